"""plugins/module_utils/model: the source check, the names, the manifest, the verification, the staging steps over
fake ops, the keep-last-two choice and the whole-model check, as tables."""

import hashlib
import json

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.model import cluster, hub_client, manifest, source, staging

C1 = "0123456789abcdef0123456789abcdef01234567"
C2 = "89abcdef0123456789abcdef0123456789abcdef"
SHA = "a" * 64


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (None, []),
        ({}, []),
        ({"hub": "org/model", "revision": C1}, []),
        ({"hub": "org/model", "revision": C1, "endpoint": "http://10.0.0.5:8900"}, []),
        ({"mirror": "https://models.example.internal/ds", "revision": C1}, []),
        ({"mirror": "/srv/models/ds-" + C1, "revision": C1}, []),
        ({"hub": "org/model", "revision": "main"}, ["sglang_model_source.revision is 'main', not a commit"]),
        ({"hub": "org/model", "revision": "v1.0"}, ["sglang_model_source.revision is 'v1.0', not a commit"]),
        ({"hub": "org/model", "revision": C1.upper()}, ["not a commit"]),
        ({"hub": "org/model"}, ["sglang_model_source.revision is missing"]),
        ({"hub": "model", "revision": C1}, ["sglang_model_source.hub is 'model': write the repository as org/name"]),
        ({"hub": "org/model", "revision": C1, "endpoint": "hub.local"}, ["sglang_model_source.endpoint is"]),
        ({"mirror": "models/ds", "revision": C1}, ["write an http(s) base URL or an absolute path"]),
        ({"mirror": "http://10.0.0.5:8899/", "revision": C1}, ["ends in no usable name: set sglang_model_source.name"]),
        ({"mirror": "http://10.0.0.5:8899/", "revision": C1, "name": "ds"}, []),
        ({"hub": "org/model", "revision": C1, "token": "x"}, ["has keys token that a hub source does not take"]),
        ({"hub": "org/m", "mirror": "/m", "revision": C1}, ["names both hub and mirror"]),
        ({"repo": "org/m", "revision": C1}, ["needs hub"]),
        ("org/model", ["must be a mapping"]),
    ],
)
def test_a_source_is_checked_and_each_message_names_the_key_and_the_fix(given, want):
    found = source.problems(given)
    assert len(found) == len(want), found
    for message, part in zip(found, want, strict=True):
        assert part in message


def test_a_branch_is_refused_with_how_to_pin_it():
    (message,) = source.problems({"hub": "org/model", "revision": "main"})
    assert "branch or tag moves" in message and "gives its commit as `sha`" in message and "40 hex" in message


@pytest.mark.parametrize(
    ("given", "name", "staged"),
    [
        (
            {"hub": "deepseek-ai/DeepSeek-V4-Flash", "revision": C1},
            "DeepSeek-V4-Flash",
            f"/opt/models/DeepSeek-V4-Flash-{C1}",
        ),
        ({"mirror": f"http://10.0.0.5:8899/ds-{C1}/", "revision": C1}, "ds", f"/opt/models/ds-{C1}"),
        ({"mirror": "/srv/share/ds", "revision": C1}, "ds", f"/opt/models/ds-{C1}"),
        ({"mirror": "http://10.0.0.5:8899/", "revision": C1, "name": "ds"}, "ds", f"/opt/models/ds-{C1}"),
    ],
)
def test_the_staged_directory_is_the_name_and_the_revision_under_the_models_dir(given, name, staged):
    assert source.name(given) == name
    assert source.staged_dir("/opt/models/", given) == staged
    assert source.temp_dir("/opt/models", given) == f"/opt/models/.staging-{name}-{C1}"


def test_the_manifest_takes_the_lfs_sha256_and_the_blob_id_of_plain_files():
    siblings = [
        {"rfilename": "config.json", "size": 10, "blobId": "b" * 40, "lfs": None},
        {"rfilename": "model.safetensors", "size": 134, "blobId": "c" * 40, "lfs": {"sha256": SHA, "size": 5000}},
        {"rfilename": "notes.txt", "size": 3},
    ]
    assert manifest.from_model_info(siblings) == {
        "config.json": {"size": 10, "blob": "b" * 40},
        "model.safetensors": {"size": 5000, "sha256": SHA},
        "notes.txt": {"size": 3},
    }
    assert manifest.from_document({"manifest": {"a": {"size": 1}}, "revision": C1}) == {"a": {"size": 1}}


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ({"a": {"size": 1, "sha256": SHA}}, []),
        ({}, ["names no file"]),
        ({"a": {"sha256": SHA}}, ["a: the manifest gives no size"]),
        ({"../etc/passwd": {"size": 1}}, ["not a path inside"]),
        ({"/abs": {"size": 1}}, ["not a path inside"]),
        ({"a": {"size": 1, "sha256": "xyz"}}, ["not 64 hex digits"]),
        ({"a": {"size": 1, "blob": "xyz"}}, ["not 40 hex digits"]),
    ],
)
def test_a_manifest_that_cannot_prove_a_file_is_refused(given, want):
    found = manifest.problems(given)
    assert len(found) == len(want) and all(p in m for m, p in zip(found, want, strict=True)), found


MANIFEST = {"config.json": {"size": 4, "blob": "1" * 40}, "w.safetensors": {"size": 8, "sha256": "2" * 64},
            "extra.txt": {"size": 2}}  # fmt: skip
GOOD = {"config.json": "1" * 40, "w.safetensors": "2" * 64}


@pytest.mark.parametrize(
    ("present", "digests", "record", "want", "hashed"),
    [
        # all good: two files hashed, the size-only one not
        ({"config.json": (4, 1), "w.safetensors": (8, 1), "extra.txt": (2, 1)}, GOOD, None,
         {"ok": 3, "missing": [], "wrong": [], "extra": []}, ["config.json", "w.safetensors"]),
        # a record of the same size and mtime: nothing hashed
        ({"config.json": (4, 1), "w.safetensors": (8, 1), "extra.txt": (2, 1)}, {}, "same",
         {"ok": 3, "missing": [], "wrong": [], "extra": []}, []),
        # the mtime moved: that one file hashed again, and found wrong
        ({"config.json": (4, 1), "w.safetensors": (8, 2), "extra.txt": (2, 1)}, {"w.safetensors": "3" * 64}, "same",
         {"ok": 2, "missing": [], "wrong": ["w.safetensors"], "extra": []}, ["w.safetensors"]),
        # a wrong size is wrong without hashing; a missing file and an extra one
        ({"config.json": (5, 1), "w.safetensors": (8, 1), "notes": (1, 1)}, GOOD, None,
         {"ok": 1, "missing": ["extra.txt"], "wrong": ["config.json"], "extra": ["notes"]}, ["w.safetensors"]),
    ],
)  # fmt: skip
def test_verification_finds_missing_and_wrong_files_hashing_only_what_its_record_cannot_vouch_for(
    present, digests, record, want, hashed
):
    seen = {p: {"size": s, "mtime_ns": m} for p, (s, m) in present.items()}
    record = {p: {"size": v["size"], "mtime_ns": 1} for p, v in MANIFEST.items()} if record == "same" else None
    calls = []

    def digest(path, kind):
        calls.append(path)
        return digests[path]

    report = manifest.verify(MANIFEST, seen, digest, record)
    got = {"ok": len(report["ok"]), "missing": report["missing"], "wrong": [w["path"] for w in report["wrong"]],
           "extra": report["extra"]}  # fmt: skip
    assert got == want
    assert sorted(calls) == hashed


@pytest.mark.parametrize(
    ("found", "in_use", "current", "removed"),
    [
        # the current one and the newest other (the previous) are kept
        (["a:1", "b:2", "c:3"], [], ["c"], ["a"]),
        (["a:1", "b:2", "c:3", "d:4"], [], ["d"], ["a", "b"]),
        # a unit still serves an older one: it is the kept previous, the newest other goes
        (["a:1", "b:2", "c:3"], ["a"], ["c"], ["b"]),
        # the current one serves: the newest other is the previous
        (["a:1", "b:2", "c:3"], ["c"], ["c"], ["a"]),
        (["a:1"], [], ["a"], []),
        ([], [], ["a"], []),
    ],
)
def test_the_last_two_revisions_are_kept_and_the_rest_go_oldest_first(found, in_use, current, removed):
    dirs = [{"path": f.split(":")[0], "mtime": int(f.split(":")[1])} for f in found]
    assert [d["path"] for d in staging.to_remove(dirs, in_use, current)] == removed


INDEX = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors", "c": "model-2.safetensors"}}


@pytest.mark.parametrize(
    ("files", "docs", "want"),
    [
        ({"config.json", "model.safetensors.index.json", "model-1.safetensors", "model-2.safetensors"}, {}, []),
        ({"config.json", "model.safetensors"}, {}, []),
        ({"model.safetensors.index.json", "model-1.safetensors", "model-2.safetensors"}, {},
         ["config.json is missing"]),
        ({"config.json", "model.safetensors.index.json", "model-1.safetensors"}, {},
         ["model-2.safetensors, named by model.safetensors.index.json, is missing"]),
        ({"config.json"}, {}, ["no weight file"]),
        ({"config.json", "model.safetensors.index.json"}, {"model.safetensors.index.json": {"metadata": {}}},
         ["has no weight_map"]),
        ({"config.json", "model.safetensors"}, {"config.json": None}, ["config.json is not a JSON object"]),
    ],
)  # fmt: skip
def test_a_directory_is_a_whole_model_when_it_has_its_config_and_every_shard_its_index_names(files, docs, want):
    default = {"config.json": {"model_type": "llama"}, "model.safetensors.index.json": INDEX}
    found = staging.whole_model(files, {**default, **docs}.get)
    assert len(found) == len(want) and all(p in m for m, p in zip(found, want, strict=True)), found


class FakeOps:
    """A host whose files are a dict; fetch copies from the source's bytes."""

    def __init__(self, files, fail=()):
        self.source = files
        self.dirs = {}
        self.stamps = {}
        self.fail = set(fail)
        self.fetches = []
        self.info_calls = 0
        self.now = 0.0

    def model_info(self):
        self.info_calls += 1
        return {p: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in self.source.items()}

    def exists(self, d):
        return d in self.dirs

    def read_stamp(self, d):
        return self.stamps.get(d)

    def walk(self, d):
        return {p: {"size": len(b), "mtime_ns": hash(b) & 0xFFFF} for p, b in self.dirs.get(d, {}).items()}

    def digest(self, path, kind):
        d, p = path.rsplit("/", 1)
        return hashlib.sha256(self.dirs[d][p]).hexdigest()

    def remove_files(self, d, paths):
        for p in paths:
            self.dirs.get(d, {}).pop(p, None)

    def fetch(self, d, paths):
        self.fetches.append(sorted(paths))
        self.now += 2.0
        into = self.dirs.setdefault(d, {})
        for p in paths:
            if p not in self.fail:
                into[p] = self.source[p]

    def finish(self, temp, final, stamp):
        self.dirs[final] = self.dirs.pop(temp)
        self.stamps[final] = stamp

    def replace_files(self, temp, final, paths):
        for p in paths:
            self.dirs[final][p] = self.dirs[temp].pop(p)

    def write_stamp(self, d, stamp):
        self.stamps[d] = stamp

    def remove_tree(self, d):
        self.dirs.pop(d, None)

    def clock(self):
        return self.now


FILES = {"config.json": b"{}", "w1.safetensors": b"1" * 1000, "w2.safetensors": b"2" * 1000}
REQ = {"final": "/m/x-" + C1, "temp": "/m/.staging-x-" + C1, "revision": C1, "source": {"hub": "o/x"}}


def test_staging_fetches_into_the_temporary_directory_and_renames_only_a_verified_whole():
    ops = FakeOps(FILES)
    result = staging.stage(dict(REQ), ops)
    assert result["changed"] and ops.dirs[REQ["final"]] == FILES and REQ["temp"] not in ops.dirs
    assert (result["bytes_fetched"], result["seconds"], result["gbps"]) == (2002, 2.0, round(2002 / 2 / 1e9, 3))
    assert ops.stamps[REQ["final"]]["revision"] == C1
    again = staging.stage(dict(REQ), ops)
    assert (again["changed"], ops.info_calls, len(ops.fetches)) == (False, 1, 1)


def test_a_fetch_that_leaves_a_file_missing_is_an_error_and_nothing_is_renamed():
    ops = FakeOps(FILES, fail={"w2.safetensors"})
    with pytest.raises(staging.StageError, match=r"w2\.safetensors"):
        staging.stage(dict(REQ), ops)
    assert REQ["final"] not in ops.dirs and set(ops.dirs[REQ["temp"]]) == {"config.json", "w1.safetensors"}
    ops.fail = set()
    result = staging.stage(dict(REQ), ops)
    assert ops.fetches[-1] == ["w2.safetensors"] and sorted(result["resumed"]) == ["config.json", "w1.safetensors"]


def test_a_directory_of_the_staged_name_that_the_stage_did_not_make_is_left_alone():
    ops = FakeOps(FILES)
    ops.dirs[REQ["final"]] = {"config.json": b"mine"}
    with pytest.raises(staging.StageError, match="move it away"):
        staging.stage(dict(REQ), ops)
    assert ops.dirs[REQ["final"]] == {"config.json": b"mine"} and ops.fetches == [] and ops.info_calls == 0


def test_check_mode_fetches_nothing_and_says_what_it_would():
    ops = FakeOps(FILES)
    result = staging.stage(dict(REQ, check_mode=True), ops)
    assert result["changed"] and result["bytes_fetched"] == 2002 and ops.fetches == [] and ops.dirs == {}


def test_the_hub_clients_request_carries_no_token_and_its_environment_does_only_when_given():
    req = hub_client.request("download", "o/x", C1, local_dir="/m/t", files=["a[1].json", "w*.safetensors"])
    assert req["files"] == ["a[[]1[]].json", "w[*].safetensors"] and "token" not in json.dumps(req).lower()
    assert hub_client.environment("hf_x", "/m/.hf-home")["HF_TOKEN"] == "hf_x"
    assert "HF_TOKEN" not in hub_client.environment(None, "/m/.hf-home")
    assert hub_client.answer('noise\n{"client": "2.4.0", "sha": "x"}\n') == {"client": "2.4.0", "sha": "x"}


# Once per cluster from outside (model/cluster.py): the holder is the first host that holds the revision verified,
# else the first host; only hosts that lack a file copy from it, and it serves only when one does.
@pytest.mark.parametrize(
    ("needs", "want"),
    [
        (
            {"a": {"fetched": ["x"]}, "b": {"fetched": ["x"]}, "c": {"fetched": ["x"]}},
            {"holder": "a", "peers": ["b", "c"], "serve": True},
        ),
        (
            {"a": {"fetched": ["x"]}, "b": {"fetched": []}, "c": {"fetched": ["x"]}},
            {"holder": "b", "peers": ["a", "c"], "serve": True},
        ),
        ({"a": {"fetched": []}, "b": {"fetched": []}}, {"holder": "a", "peers": [], "serve": False}),
        # a host whose preflight step was skipped (no units) stages nothing
        ({"a": {}, "b": {"skipped": True}, "c": {"fetched": ["x"]}}, {"holder": "c", "peers": [], "serve": False}),
        ({}, {"holder": None, "peers": [], "serve": False}),
    ],
    ids=["bare", "one-holds-it", "all-hold-it", "skipped-hosts", "none"],
)
def test_one_host_fetches_from_outside_and_only_hosts_lacking_a_file_copy_from_it(needs, want):
    assert cluster.staging_plan(needs, ["a", "b", "c"]) == want


def test_the_report_names_the_bytes_from_outside_and_from_peers_and_their_rate():
    results = {
        "a": {"path": f"/m/M-{C1}", "bytes_fetched": 3_000_000_000, "seconds": 2.0},
        "b": {"path": f"/m/M-{C1}", "bytes_fetched": 3_000_000_000, "seconds": 1.0},
        "c": {"path": f"/m/M-{C1}", "bytes_fetched": 1_000, "seconds": 0.5, "repaired": True},
        "d": {"skipped": True},
    }
    out = cluster.report(results, "a", "hub")
    assert out["outside_bytes"] == 3_000_000_000 and out["outside_gbps"] == 1.5
    assert out["peer_bytes"] == 3_000_001_000 and out["peer_gbps"] == 3.0
    assert out["repaired"] == ["c"]
    assert out["line"].startswith(f"model M-{C1}: 3000000000 bytes from the hub onto a in 2.0 s (1.5 GB/s); ")
    assert "3000001000 bytes from a to 2 host(s) (b, c) in 1.0 s (3.0 GB/s)" in out["line"]
    quiet = cluster.report({"a": {"path": "/m/M", "bytes_fetched": 0}, "b": {"path": "/m/M", "bytes_fetched": 0}},
                           "a", "hub")  # fmt: skip
    assert quiet["line"] == "model M: 0 bytes from the hub onto a; 0 bytes from a to 0 host(s)"
