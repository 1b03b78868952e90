# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The hub fetch, run by the real huggingface_hub client (pinned: requirements/controller.txt, 2.4.0) in the Python
that holds it, as `python -c SCRIPT` with its request as JSON on stdin and the token, when there is one, in the
environment as HF_TOKEN (the client's own variable): never in argv, the request or the answer.

    request(op, repo, revision, endpoint, local_dir, files, max_workers)
                    'info': the revision's model info with blobs (huggingface_hub hf_api.py HfApi.model_info,
                    files_metadata=True); 'download': snapshot_download of `files` (their exact names, as
                    allow_patterns with fnmatch's special characters escaped) into local_dir, which resumes: the
                    files it holds with the client's metadata of this commit are kept
                    (file_download.py _hf_hub_download_to_local_dir)
    environment(token, home)
                    HF_TOKEN (only with a token), HF_HOME under the models dir (no ~/.cache of the account),
                    no progress bars, no telemetry
    answer(stdout)  the JSON line the script prints: {client, sha, siblings} or {client, downloaded}, or {error}
"""

import json
import re

SCRIPT = r"""
import json, sys
request = json.load(sys.stdin)
try:
    import huggingface_hub
    from huggingface_hub import HfApi, snapshot_download
    out = {"client": huggingface_hub.__version__}
    if request["op"] == "info":
        info = HfApi(endpoint=request.get("endpoint")).model_info(
            request["repo"], revision=request["revision"], files_metadata=True)
        out["sha"] = info.sha
        out["siblings"] = [
            {"rfilename": s.rfilename, "size": s.size, "blobId": s.blob_id,
             "lfs": {"sha256": s.lfs.sha256, "size": s.lfs.size} if s.lfs is not None else None}
            for s in info.siblings or []]
    else:
        snapshot_download(request["repo"], revision=request["revision"], local_dir=request["local_dir"],
                          endpoint=request.get("endpoint"), allow_patterns=request["files"],
                          max_workers=request.get("max_workers", 8))
        out["downloaded"] = len(request["files"])
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__ + ": " + str(exc)}))
    sys.exit(1)
print(json.dumps(out))
"""


def escape(path):
    """An exact file name as an fnmatch pattern: [, ], * and ? each in brackets."""
    return re.sub(r"([\[\]*?])", r"[\1]", path)


def request(op, repo, revision, *, endpoint=None, local_dir=None, files=None, max_workers=8):
    out = {"op": op, "repo": repo, "revision": revision, "endpoint": endpoint or None}
    if op == "download":
        out.update(local_dir=local_dir, files=[escape(p) for p in files or []], max_workers=max_workers)
    return out


def environment(token, home):
    env = {"HF_HOME": home, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1" if not token else "0", "LC_ALL": "C"}  # fmt: skip
    if token:
        env["HF_TOKEN"] = token
    return env


def answer(stdout):
    for line in reversed((stdout or "").strip().splitlines()):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return {"error": "the hub client printed no answer"}
