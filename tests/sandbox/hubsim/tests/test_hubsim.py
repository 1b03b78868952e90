"""hubsim (tests/sandbox/hubsim) against the real huggingface_hub client pinned in requirements/controller.txt: the
client downloads the generated repository byte for byte, and the server's own record counts exactly its bytes."""

import hashlib
import json
import os
import struct

import huggingface_hub
import pytest
from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError

from tests.http_client import http
from tests.sandbox.hubsim import generate, git_blob_id
from tests.sandbox.hubsim.testing import REPO, TOKEN


def get_json(url):
    status, answer = http("GET", url)
    assert status == 200, answer
    return answer


@pytest.fixture
def token_env(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def files_of(directory):
    out = {}
    for root, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if d != ".cache"]
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, directory)] = handle.read()
    return out


def test_the_client_pinned_is_the_one_hubsim_mirrors():
    assert huggingface_hub.__version__ == "2.4.0"


def test_a_repository_is_the_same_bytes_for_a_seed_and_another_revision_for_another():
    assert generate(0) == generate(0)
    assert generate(0).commit != generate(1).commit
    assert (
        generate(0).files["model-00001-of-00003.safetensors"] != generate(1).files["model-00001-of-00003.safetensors"]
    )


def test_the_index_names_every_tensor_of_every_shard_and_each_shard_is_a_safetensors_file():
    rev = generate(0, shards=2)
    index = json.loads(rev.files["model.safetensors.index.json"])
    shards = {p for p in rev.files if p.endswith(".safetensors")}
    assert set(index["weight_map"].values()) == shards
    for shard in shards:
        data = rev.files[shard]
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + length])
        end = max(t["data_offsets"][1] for t in header.values())
        assert 8 + length + end == len(data)
        assert {name for name, path in index["weight_map"].items() if path == shard} == set(header)


def test_the_real_client_downloads_the_repository_and_the_servers_record_is_one_copy(hub, token_env, tmp_path):
    hub, server, (_old, new) = hub
    path = snapshot_download(REPO, revision=new.commit, local_dir=tmp_path / "m", endpoint=server.url)
    assert files_of(path) == new.files
    stats = get_json(server.url + "/hubsim/stats")
    assert stats["file_bytes"] == new.total_bytes
    assert stats["clients"]["127.0.0.1"]["file_bytes"] == new.total_bytes
    assert {p: f["bytes"] for p, f in stats["files"].items()} == {p: len(d) for p, d in new.files.items()}
    assert stats["unauthorized"] == 0
    # A second download of the same commit into the same directory asks for no file again.
    snapshot_download(REPO, revision=new.commit, local_dir=tmp_path / "m", endpoint=server.url)
    assert get_json(server.url + "/hubsim/stats")["file_bytes"] == new.total_bytes


def test_model_info_gives_each_lfs_files_sha256_and_each_files_blob_id(hub, token_env):
    hub, server, (old, new) = hub
    info = HfApi(endpoint=server.url).model_info(REPO, revision=old.commit, files_metadata=True)
    assert info.sha == old.commit
    by_name = {s.rfilename: s for s in info.siblings}
    assert set(by_name) == set(old.files)
    for path, data in old.files.items():
        assert by_name[path].size == len(data)
        if path.endswith(".safetensors"):
            assert by_name[path].lfs.sha256 == hashlib.sha256(data).hexdigest()
        else:
            assert by_name[path].lfs is None
            assert by_name[path].blob_id == git_blob_id(data)
    # `main` resolves to the last revision; an unknown commit is the hub's RevisionNotFound.
    assert HfApi(endpoint=server.url).model_info(REPO, revision="main").sha == new.commit
    with pytest.raises(RevisionNotFoundError):
        HfApi(endpoint=server.url).model_info(REPO, revision="f" * 40)


def test_without_the_token_the_client_gets_nothing(hub, monkeypatch, tmp_path):
    hub, server, (_old, new) = hub
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    with pytest.raises(HfHubHTTPError) as caught:
        snapshot_download(REPO, revision=new.commit, local_dir=tmp_path / "m", endpoint=server.url)
    assert caught.value.response.status_code == 401
    stats = get_json(server.url + "/hubsim/stats")
    assert stats["unauthorized"] >= 1 and stats["file_bytes"] == 0


def test_a_connection_cut_mid_file_is_resumed_with_a_range_and_no_byte_is_sent_twice(serve_hub, token_env, tmp_path):
    """The client writes what it received in chunks of constants.DOWNLOAD_CHUNK_SIZE (10 MiB; file_download.py
    http_get iterates response.iter_bytes(chunk_size=...)), so it resumes with a Range from the last whole chunk:
    a cut past the first 10 MiB of a 12 MiB shard resumes there and the server sends each byte once."""
    chunk = huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE
    rev = generate(2, shards=1, shard_bytes=chunk + (2 << 20))
    shard = "model-00001-of-00001.safetensors"
    hub, server = serve_hub({REPO: [rev]})
    hub.faults["cut"].append({"path": shard, "after": chunk + 500_000})
    path = snapshot_download(REPO, revision=rev.commit, local_dir=tmp_path / "m", endpoint=server.url)
    assert files_of(path) == rev.files
    stats = get_json(server.url + "/hubsim/stats")
    # The cut GET sent chunk + 500000 bytes, of which the client kept the first chunk; the ranged GET the rest.
    assert stats["files"][shard] == {"bytes": len(rev.files[shard]) + 500_000, "gets": 2, "ranged": 1}
