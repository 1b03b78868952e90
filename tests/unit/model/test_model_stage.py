"""The module model_stage against hubsim (tests/sandbox/hubsim) with the real huggingface_hub client: each fetch is
judged by the hub server's own byte count."""

import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.model import staging
from ansible_collections.disagg.sglang.plugins.modules import model_check, model_prune
from ansible_collections.disagg.sglang.plugins.modules import model_stage as module
from samples import loopback_server

from tests.http_client import free_port, http
from tests.sandbox.hubsim.testing import REPO, TOKEN

COLLECTIONS = str(Path(__file__).resolve().parents[3] / ".collections")


def http_status(url):
    """The status of a GET, the body read; None when nothing answers."""
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serving_directory(path):
    """A peer host's staged directory PATH over HTTP on loopback; yields its base URL."""
    return loopback_server(partial(QuietFiles, directory=path))


def stats(url):
    status, answer = http("GET", url + "/hubsim/stats")
    assert status == 200
    return answer


@pytest.fixture
def argv_seen(monkeypatch):
    """Every command the module runs, with the environment it adds, recorded before it runs."""
    seen = []
    real = module.AnsibleModule.run_command

    def run_command(self, args, **kwargs):
        seen.append({"argv": list(args), "env": dict(kwargs.get("environ_update") or {}), "data": kwargs.get("data")})
        return real(self, args, **kwargs)

    monkeypatch.setattr(module.AnsibleModule, "run_command", run_command)
    return seen


def run(capsys, **args):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        module.main()
    out = capsys.readouterr().out
    return done.value.code, json.loads(out), out


def stage(capsys, server, rev, models_dir, **extra):
    args = {"source": {"hub": REPO, "revision": rev.commit, "endpoint": server.url}, "models_dir": str(models_dir),
            "token": TOKEN, **extra}  # fmt: skip
    return run(capsys, **args)


def files_of(directory):
    out = {}
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory)
            if rel != staging.STAMP:
                with open(path, "rb") as handle:
                    out[rel] = handle.read()
    return out


def test_a_bare_host_stages_the_revision_verified_in_its_versioned_directory_one_copy_from_the_hub(
    hub, capsys, tmp_path, argv_seen
):
    hub, server, (old, _new) = hub
    rc, result, raw = stage(capsys, server, old, tmp_path)
    assert rc == 0, result
    final = tmp_path / f"tiny-llama-{old.commit}"
    assert result["changed"] is True and result["path"] == str(final)
    assert files_of(final) == old.files  # no .cache of the client, no temporary directory left
    assert not (tmp_path / f".staging-tiny-llama-{old.commit}").exists()
    assert sorted(result["fetched"]) == sorted(old.files) and result["bytes_fetched"] == old.total_bytes
    assert result["total_bytes"] == old.total_bytes and result["client"] == "2.4.0"
    assert result["gbps"] > 0
    record = stats(server.url)
    assert record["file_bytes"] == old.total_bytes and record["unauthorized"] == 0
    # The token went to the client in its environment only.
    assert TOKEN not in raw
    assert all(TOKEN not in " ".join(call["argv"]) and TOKEN not in (call["data"] or "") for call in argv_seen)
    assert [call["env"].get("HF_TOKEN") for call in argv_seen] == [TOKEN, TOKEN]  # model info, then the download


def test_a_rerun_asks_the_hub_nothing_and_changes_nothing(hub, capsys, tmp_path, argv_seen):
    hub, server, (old, _new) = hub
    assert stage(capsys, server, old, tmp_path)[0] == 0
    before = stats(server.url)
    rc, result, _raw = stage(capsys, server, old, tmp_path)
    assert (rc, result["changed"], result["fetched"], result["bytes_fetched"]) == (0, False, [], 0)
    assert stats(server.url) == before  # not one request: the staged directory's record is the manifest
    assert len(argv_seen) == 2  # the first run's two client calls, none for the rerun


def test_a_corrupted_file_is_found_and_fetched_again_alone(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    stage(capsys, server, old, tmp_path)
    final = tmp_path / f"tiny-llama-{old.commit}"
    shard = "model-00002-of-00003.safetensors"
    data = bytearray((final / shard).read_bytes())
    data[1000] ^= 0xFF
    (final / shard).write_bytes(bytes(data))
    before = stats(server.url)["file_bytes"]
    rc, result, _raw = stage(capsys, server, old, tmp_path)
    assert rc == 0 and result["changed"] and result["repaired"]
    assert [w["path"] for w in result["found_wrong"]] == [shard] and "sha256" in result["found_wrong"][0]["why"]
    assert result["fetched"] == [shard]
    assert stats(server.url)["file_bytes"] - before == len(old.files[shard])
    assert files_of(final) == old.files
    assert stage(capsys, server, old, tmp_path)[1]["changed"] is False


def test_quick_trusts_an_unchanged_size_and_mtime_and_full_hashes_every_file(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    stage(capsys, server, old, tmp_path)
    final = tmp_path / f"tiny-llama-{old.commit}"
    path = final / "config.json"
    st = path.stat()
    path.write_bytes(path.read_bytes().replace(b"llama", b"LLAMA"))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert stage(capsys, server, old, tmp_path)[1]["changed"] is False
    rc, result, _raw = stage(capsys, server, old, tmp_path, verify="full")
    assert rc == 0 and [w["path"] for w in result["found_wrong"]] == ["config.json"]
    assert "blob" in result["found_wrong"][0]["why"]  # a plain git file is checked by its git blob id
    assert files_of(final) == old.files


def test_a_missing_file_of_a_staged_directory_is_fetched_again(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    stage(capsys, server, old, tmp_path)
    final = tmp_path / f"tiny-llama-{old.commit}"
    (final / "tokenizer.json").unlink()
    rc, result, _raw = stage(capsys, server, old, tmp_path)
    assert rc == 0 and result["found_missing"] == ["tokenizer.json"] and result["fetched"] == ["tokenizer.json"]
    assert files_of(final) == old.files


def test_an_interrupted_stage_resumes_and_fetches_only_what_it_lacked(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    shard = "model-00003-of-00003.safetensors"
    hub.faults["fail"].append({"path": shard, "status": 500, "times": 1})
    rc, result, _raw = stage(capsys, server, old, tmp_path)
    assert rc == 1 and result["failed"] and "500" in result["msg"]
    assert not (tmp_path / f"tiny-llama-{old.commit}").exists()  # never a partial versioned directory
    assert stats(server.url)["file_bytes"] == old.total_bytes - len(old.files[shard])
    rc, result, _raw = stage(capsys, server, old, tmp_path)
    assert rc == 0 and result["fetched"] == [shard]
    assert sorted(result["resumed"]) == sorted(set(old.files) - {shard})
    assert stats(server.url)["file_bytes"] == old.total_bytes  # each byte once over both runs
    assert files_of(tmp_path / f"tiny-llama-{old.commit}") == old.files


def test_a_wrong_file_left_by_an_interrupted_stage_is_dropped_and_fetched_again(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    shard = "model-00003-of-00003.safetensors"
    hub.faults["fail"].append({"path": shard, "status": 500, "times": 1})
    stage(capsys, server, old, tmp_path)
    temp = tmp_path / f".staging-tiny-llama-{old.commit}"
    (temp / "model-00001-of-00003.safetensors").write_bytes(b"\0" * len(old.files["model-00001-of-00003.safetensors"]))
    rc, result, _raw = stage(capsys, server, old, tmp_path)
    assert rc == 0 and sorted(result["fetched"]) == ["model-00001-of-00003.safetensors", shard]
    assert files_of(tmp_path / f"tiny-llama-{old.commit}") == old.files


def test_check_mode_says_what_it_would_fetch_and_fetches_nothing(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    rc, result, raw = stage(capsys, server, old, tmp_path, _ansible_check_mode=True, _ansible_diff=True)
    assert rc == 0 and result["changed"] is True
    assert sorted(result["fetched"]) == sorted(old.files) and result["bytes_fetched"] == old.total_bytes
    assert stats(server.url)["file_bytes"] == 0
    assert list(tmp_path.iterdir()) == []  # not even the models dir, nor the client's HF_HOME
    diff = result["diff"]
    assert diff["before"] == "" and diff["after"].count("\n") == len(old.files)
    assert TOKEN not in raw
    # After a real stage, check mode with a corrupted file names that one file alone.
    stage(capsys, server, old, tmp_path)
    final = tmp_path / f"tiny-llama-{old.commit}"
    (final / "config.json").write_bytes(b"{}" + b" " * (len(old.files["config.json"]) - 2))
    before = stats(server.url)
    rc, result, _raw = stage(capsys, server, old, tmp_path, _ansible_check_mode=True, _ansible_diff=True)
    assert rc == 0 and result["changed"] and result["fetched"] == ["config.json"]
    assert stats(server.url) == before
    names = {side: [line.split(" ")[0] for line in result["diff"][side].splitlines()] for side in ("before", "after")}
    assert sorted(set(names["after"]) - set(names["before"])) == ["config.json"]


def test_a_wrong_token_fails_and_the_message_holds_no_token(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    wrong = "hf_wrong_token_never_shown"
    source = {"hub": REPO, "revision": old.commit, "endpoint": server.url}
    rc, result, raw = run(capsys, source=source, models_dir=str(tmp_path), token=wrong)
    assert rc == 1 and "401" in result["msg"]
    assert wrong not in raw and stats(server.url)["unauthorized"] >= 1


def test_a_branch_name_is_refused_naming_the_variable_and_the_fix(hub, capsys, tmp_path):
    hub, server, _revs = hub
    source = {"hub": REPO, "revision": "main", "endpoint": server.url}
    rc, result, _raw = run(capsys, source=source, models_dir=str(tmp_path))
    assert rc == 1
    assert "sglang_model_source.revision is 'main'" in result["msg"] and "pin those 40 hex digits" in result["msg"]
    assert stats(server.url)["bytes"] == 0


def test_a_mirror_is_a_base_url_with_a_manifest_and_an_interrupted_copy_resumes_with_a_range(hub, capsys, tmp_path):
    """The hub's resolve URL of a commit is a mirror's base URL: each file at its path, with Range."""
    hub, server, (old, _new) = hub
    hub.token = None
    first = tmp_path / "first"
    run(capsys, source={"hub": REPO, "revision": old.commit, "endpoint": server.url}, models_dir=str(first))
    manifest = json.loads((first / f"tiny-llama-{old.commit}" / staging.STAMP).read_text())["manifest"]
    hub.reset()
    shard = "model-00001-of-00003.safetensors"
    temp = tmp_path / "second" / f".staging-tiny-llama-{old.commit}"
    temp.mkdir(parents=True)
    (temp / (shard + ".incomplete")).write_bytes(old.files[shard][:300_000])  # what a cut copy left
    source = {"mirror": f"{server.url}/{REPO}/resolve/{old.commit}", "revision": old.commit, "manifest": manifest,
              "name": "tiny-llama"}  # fmt: skip
    rc, result, _raw = run(capsys, source=source, models_dir=str(tmp_path / "second"))
    assert rc == 0 and result["fetched_from"] == "mirror"
    assert files_of(tmp_path / "second" / f"tiny-llama-{old.commit}") == old.files
    record = stats(server.url)
    assert record["files"][shard] == {"bytes": len(old.files[shard]) - 300_000, "gets": 1, "ranged": 1}
    assert record["file_bytes"] == old.total_bytes - 300_000


def test_a_second_host_stages_from_a_peers_staged_directory_and_the_hub_serves_one_copy(hub, capsys, tmp_path):
    """A peer serves its versioned directory over HTTP; the second host takes the manifest from the peer's stamp,
    verifies every file again, and the hub's own record is one copy for the two hosts."""
    hub, server, (old, _new) = hub
    rc, first, _raw = stage(capsys, server, old, tmp_path / "host1")
    assert rc == 0
    with serving_directory(first["path"]) as peer:
        source = {"mirror": f"{peer}/", "revision": old.commit,
                  "name": "tiny-llama"}  # fmt: skip
        rc, second, _raw = run(capsys, source=source, models_dir=str(tmp_path / "host2"))
    assert rc == 0, second
    assert second["manifest"] == first["manifest"] and second["bytes_fetched"] == old.total_bytes
    assert files_of(second["path"]) == old.files
    assert stats(server.url)["file_bytes"] == old.total_bytes  # the hub: one copy, whatever the number of hosts


def test_a_copy_resumed_from_a_server_that_ignores_the_range_starts_the_file_again(hub, capsys, tmp_path):
    """http.server answers a Range with the whole file (200): the part is started again, not appended to."""
    hub, server, (old, _new) = hub
    rc, first, _raw = stage(capsys, server, old, tmp_path / "host1")
    shard = "model-00001-of-00003.safetensors"
    temp = tmp_path / "host2" / f".staging-tiny-llama-{old.commit}"
    temp.mkdir(parents=True)
    (temp / (shard + ".incomplete")).write_bytes(old.files[shard][:300_000])
    with serving_directory(first["path"]) as peer:
        source = {"mirror": f"{peer}/", "revision": old.commit,
                  "name": "tiny-llama", "manifest": first["manifest"]}  # fmt: skip
        rc, second, _raw = run(capsys, source=source, models_dir=str(tmp_path / "host2"))
    assert rc == 0, second
    assert files_of(second["path"]) == old.files


def test_a_peer_file_that_does_not_match_the_manifest_fails_the_stage_and_is_not_renamed_into_place(
    hub, capsys, tmp_path
):
    hub, server, (old, _new) = hub
    rc, first, _raw = stage(capsys, server, old, tmp_path / "host1")
    mirror_dir = tmp_path / "host1" / f"tiny-llama-{old.commit}"
    (mirror_dir / "tokenizer.json").write_bytes(b"x" * len(old.files["tokenizer.json"]))
    source = {"mirror": str(mirror_dir), "revision": old.commit, "manifest": first["manifest"]}
    rc, result, _raw = run(capsys, source=source, models_dir=str(tmp_path / "host2"))
    assert rc == 1 and "tokenizer.json" in result["msg"]
    assert not (tmp_path / "host2" / f"tiny-llama-{old.commit}").exists()
    assert hashlib.sha256(old.files["config.json"]).hexdigest()  # the others were copied and kept for the next run
    assert (tmp_path / "host2" / f".staging-tiny-llama-{old.commit}" / "config.json").exists()


def run_check(capsys, **args):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        model_check.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def test_a_staged_revision_is_a_whole_model_and_one_without_a_shard_is_not(hub, capsys, tmp_path):
    hub, server, (old, _new) = hub
    rc, staged, _raw = stage(capsys, server, old, tmp_path)
    checked = run_check(capsys, path=staged["path"])[1]
    assert (checked["whole"], checked["problems"], checked["free_bytes"]) == (True, [], None)
    os.unlink(os.path.join(staged["path"], "model-00002-of-00003.safetensors"))
    rc, result = run_check(capsys, path=staged["path"])
    assert (rc, result["whole"]) == (0, False)
    assert result["problems"] == ["model-00002-of-00003.safetensors, named by model.safetensors.index.json, is missing"]


def test_a_file_system_without_room_for_the_revision_is_named_with_the_fix(capsys, tmp_path):
    rc, result = run_check(capsys, models_dir=str(tmp_path / "not" / "yet"), need_bytes=1 << 60)
    assert rc == 0 and result["free_bytes"] > 0
    assert "needs 1152921504606846976 more" in result["problems"][0] and "sglang_models_dir" in result["problems"][0]
    assert run_check(capsys, models_dir=str(tmp_path), need_bytes=1)[1]["problems"] == []


def test_a_holder_serves_its_staged_revision_to_a_peer_which_resumes_and_the_hub_serves_one_copy(hub, capsys, tmp_path):
    """model_serve on the first host (as the role runs it: its own process, until idle); the second stages from its
    URL, taking the manifest from the holder's stamp, resuming a cut copy with a Range; nothing outside the manifest
    is served; the holder's record is the bytes from a peer, the hub's one copy."""
    hub, server, (old, _new) = hub
    rc, first, _raw = stage(capsys, server, old, tmp_path / "host1")
    port = free_port()
    args = tmp_path / "serve.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"path": first["path"], "address": "127.0.0.1", "port": port,
                                                        "idle": 3, "deadline": 60}}))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(COLLECTIONS)}
    serving = subprocess.Popen(
        [sys.executable, "-m", "ansible_collections.disagg.sglang.plugins.modules.model_serve", str(args)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while http_status(f"http://127.0.0.1:{port}/config.json") != 200:
            assert time.monotonic() < deadline and serving.poll() is None, "model_serve did not listen"
            time.sleep(0.1)
        for outside in ("/../../etc/passwd", "/.cache/x", "/", "/nothing.json"):
            assert http_status(f"http://127.0.0.1:{port}{outside}") == 404
        shard = "model-00002-of-00003.safetensors"
        temp = tmp_path / "host2" / f".staging-tiny-llama-{old.commit}"
        temp.mkdir(parents=True)
        (temp / (shard + ".incomplete")).write_bytes(old.files[shard][:400_000])
        source = {"mirror": f"http://127.0.0.1:{port}", "revision": old.commit, "name": "tiny-llama"}
        rc, second, _raw = run(capsys, source=source, models_dir=str(tmp_path / "host2"))
        out, _err = serving.communicate(timeout=30)
    finally:
        if serving.poll() is None:
            serving.kill()
    assert rc == 0, second
    assert files_of(second["path"]) == old.files and second["manifest"] == first["manifest"]
    served = json.loads(out)
    assert served["reason"] == "idle"
    stamp_bytes = len((tmp_path / "host1" / f"tiny-llama-{old.commit}" / staging.STAMP).read_bytes())
    assert served["served"]["127.0.0.1"]["bytes"] == old.total_bytes - 400_000 + stamp_bytes + len(
        old.files["config.json"]
    )
    assert stats(server.url)["file_bytes"] == old.total_bytes


def prune(capsys, **args):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        model_prune.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def test_prune_keeps_what_a_record_uses_this_runs_and_the_previous_revision_and_never_an_unstamped_dir(
    capsys, tmp_path
):
    models, records = tmp_path / "models", tmp_path / "deployed"
    records.mkdir()
    for age, name in enumerate(["M-r1", "M-r2", "M-r3", "M-r4"]):
        (models / name).mkdir(parents=True)
        stamp = models / name / staging.STAMP
        stamp.write_text("{}")
        os.utime(stamp, (1000 + age, 1000 + age))
    (models / "by-hand").mkdir()  # no stamp: not the staging's
    (models / ".staging-M-r5").mkdir()
    (records / "sglang-decode0.json").write_text(json.dumps({"unit": "sglang-decode0", "model_path": f"{models}/M-r4"}))
    # check mode removes nothing and says what it would
    rc, out = prune(capsys, models_dir=str(models), record_dir=str(records), current=[f"{models}/M-r4"],
                    _ansible_check_mode=True)  # fmt: skip
    assert rc == 0 and out["changed"] and out["removed"] == [f"{models}/M-r1", f"{models}/M-r2"]
    assert sorted(p.name for p in models.iterdir()) == [".staging-M-r5", "M-r1", "M-r2", "M-r3", "M-r4", "by-hand"]
    rc, out = prune(capsys, models_dir=str(models), record_dir=str(records), current=[f"{models}/M-r4"])
    assert rc == 0 and out["removed"] == [f"{models}/M-r1", f"{models}/M-r2"]
    assert sorted(p.name for p in models.iterdir()) == [".staging-M-r5", "M-r3", "M-r4", "by-hand"]
    rc, out = prune(capsys, models_dir=str(models), record_dir=str(records), current=[f"{models}/M-r4"])
    assert rc == 0 and not out["changed"] and out["removed"] == []
