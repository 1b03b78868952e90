#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Stage one model revision on a host, verified, into its versioned directory (plugins/module_utils/model)."""

DOCUMENTATION = r"""
---
module: model_stage
short_description: Fetch a model revision from the hub or a mirror into a verified, versioned directory
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - Stages the revision of O(source) at C(<models_dir>/<name>-<revision>). The files are fetched into
    C(<models_dir>/.staging-<name>-<revision>), each verified against the manifest (the hub's sha256 of each LFS
    file, the git blob id of the others, every size), and only then is the directory renamed to its versioned
    name, so a unit never points at a partial copy.
  - From the hub, the real C(huggingface_hub) client fetches (C(snapshot_download) into the temporary directory),
    run by O(python). The token reaches it only as the environment variable C(HF_TOKEN); it is in no argv, result or
    diff.
  - From a mirror (an http(s) base URL or an absolute path; a host of the cluster serving its staged directory is
    one), each file is copied and resumed from what an interrupted copy left.
  - Resumable - the files an interrupted run verified or completed stay in the temporary directory and are not
    fetched again.
  - A staged directory records its manifest and each file's size and modification time when verified
    (C(.disagg-model.json)); a rerun compares the files with that record (O(verify=quick)) or hashes every file
    again (O(verify=full)), asks the source nothing and fetches nothing when they match. A file that does not match
    is fetched again and renamed over its copy.
options:
  source:
    description:
      - "C({hub, revision, endpoint}) or C({mirror, revision, manifest, name}); the revision is a commit (40 hex
        digits). C(manifest) is the manifest itself (C({path: {size, sha256 | blob}}), a staged directory's stamp
        holds it), or the URL or path of a JSON file of it; without it C(<mirror>/.disagg-model.json)."
    type: dict
    required: true
  models_dir:
    description: The directory of the staged revisions (C(sglang_models_dir)).
    type: path
    required: true
  token:
    description: The hub token (C(sglang_hub_token), from the vault); passed to the client as C(HF_TOKEN) only.
    type: str
  python:
    description: The Python that holds C(huggingface_hub); the module's own interpreter when omitted.
    type: path
  verify:
    description: C(quick) trusts a staged file whose size and modification time are those recorded at its
      verification; C(full) hashes every file again.
    type: str
    choices: [quick, full]
    default: quick
  max_workers:
    description: Files the hub client fetches at once.
    type: int
    default: 8
attributes:
  check_mode:
    support: full
    details: Reads the manifest (the hub's model info, or the staged directory's record) and verifies what is on
      the host, and says what it would fetch and how many bytes; it fetches and changes nothing.
  diff_mode:
    support: full
    details: Before, the files of the revision that are in place and verified; after, every file of the revision,
      so the diff's added lines are what is (or would be) fetched.
"""

EXAMPLES = r"""
- name: Stage the model from the hub
  disagg.sglang.model_stage:
    source: {hub: deepseek-ai/DeepSeek-V4-Flash, revision: 0123456789abcdef0123456789abcdef01234567}
    models_dir: /opt/models
    token: "{{ sglang_hub_token | default(omit) }}"
    python: /opt/models/.stage-venv/bin/python
  register: staged
"""

RETURN = r"""
path:
  description: The versioned directory, C(<models_dir>/<name>-<revision>).
  type: str
  returned: always
revision:
  description: The commit staged.
  type: str
  returned: always
fetched_from:
  description: C(hub) or C(mirror).
  type: str
  returned: always
fetched:
  description: The files fetched (in check mode, that would be).
  type: list
  elements: str
  returned: always
bytes_fetched:
  description: Their bytes, by the manifest.
  type: int
  returned: always
seconds:
  description: The fetch's duration.
  type: float
  returned: always
gbps:
  description: bytes_fetched per second, in GB/s (10^9 bytes); null when nothing was fetched.
  type: float
  returned: always
total_bytes:
  description: The revision's bytes.
  type: int
  returned: always
found_wrong:
  description: The files found not to match the manifest (C({path, why})), fetched again.
  type: list
  elements: dict
  returned: always
found_missing:
  description: The files of a staged directory found missing, fetched again.
  type: list
  elements: str
  returned: always
resumed:
  description: The files an earlier, interrupted run left in the temporary directory, verified and kept.
  type: list
  elements: str
  returned: always
repaired:
  description: Whether files of the staged directory were replaced.
  type: bool
  returned: always
manifest:
  description: "The revision's manifest, C({path: {size, sha256 | blob}}) (a peer stages from it as from a mirror)."
  type: dict
  returned: always
"""

import hashlib
import json
import os
import shutil
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.disagg.sglang.plugins.module_utils.model import hub_client, mirror, source, staging
from ansible_collections.disagg.sglang.plugins.module_utils.model import manifest as mf

CHUNK = 8 << 20


def digest(path, kind):
    """sha256 of the file, or its git blob id (sha1 of 'blob <size>\\0' + bytes)."""
    if kind == "sha256":
        h = hashlib.sha256()
    else:
        h = hashlib.sha1()
        h.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as handle:
        while True:
            data = handle.read(CHUNK)
            if not data:
                return h.hexdigest()
            h.update(data)


def walk(directory):
    """{path: {size, mtime_ns}} of a directory's files; the stamp, the hub client's .cache and unfinished copies
    left out."""
    out = {}
    for root, dirs, names in os.walk(directory):
        if root == directory:
            dirs[:] = [d for d in dirs if d != ".cache"]
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, directory)
            if rel == staging.STAMP or name.endswith(mirror.INCOMPLETE):
                continue
            st = os.stat(full)
            out[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


class Ops:
    """The host's side of module_utils/model/staging.py."""

    def __init__(self, module):
        self.module = module
        params = module.params
        self.source = params["source"]
        self.kind = source.kind(self.source)
        self.models_dir = params["models_dir"]
        self.python = params["python"] or sys.executable
        self.client = None

    # --- reading ---------------------------------------------------------------------------------------------
    def exists(self, directory):
        return os.path.isdir(directory)

    def read_stamp(self, directory):
        try:
            with open(os.path.join(directory, staging.STAMP), encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    walk = staticmethod(walk)
    digest = staticmethod(digest)
    clock = staticmethod(time.monotonic)

    def model_info(self):
        if self.kind == "hub":
            answer = self.hub("info")
            if answer.get("sha") != self.source["revision"]:
                raise staging.StageError(f"the hub answered commit {answer.get('sha')} for {self.source['revision']}")
            return mf.from_model_info(answer.get("siblings"))
        given = self.source.get("manifest")
        if isinstance(given, dict):
            return mf.from_document(given)
        where = given or mirror.file_url(self.source["mirror"], staging.STAMP)
        try:
            if mirror.is_url(where):
                with open_url(where, method="GET", timeout=30) as resp:
                    doc = json.loads(resp.read())
            else:
                with open(where, encoding="utf-8") as handle:
                    doc = json.load(handle)
        except (OSError, ValueError) as exc:
            raise staging.StageError(f"the mirror's manifest {where} could not be read: {exc}") from exc
        return mf.from_document(doc)

    # --- the hub client ----------------------------------------------------------------------------------------
    def hub(self, op, local_dir=None, files=None):
        req = hub_client.request(
            op,
            self.source["hub"],
            self.source["revision"],
            endpoint=self.source.get("endpoint"),
            local_dir=local_dir,
            files=files,
            max_workers=self.module.params["max_workers"],
        )
        env = hub_client.environment(self.module.params["token"], os.path.join(self.models_dir, ".hf-home"))
        rc, out, err = self.module.run_command([self.python, "-c", hub_client.SCRIPT], data=json.dumps(req),
                                               environ_update=env, binary_data=True)  # fmt: skip
        answer = hub_client.answer(out)
        if rc != 0 or "error" in answer:
            tail = "\n".join((err or "").strip().splitlines()[-5:])
            raise staging.StageError(f"the hub client ({self.python}) failed: {answer.get('error')} {tail}".strip())
        self.client = answer.get("client")
        return answer

    # --- writing -----------------------------------------------------------------------------------------------
    def fetch(self, directory, paths):
        os.makedirs(directory, exist_ok=True)
        if self.kind == "hub":
            self.hub("download", directory, paths)
            return
        for path in paths:
            target = os.path.join(directory, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            where = mirror.file_url(self.source["mirror"], path)
            if mirror.is_url(where):
                mirror.copy(lambda offset, url=where: self.http_range(url, offset), target + mirror.INCOMPLETE,
                            target)  # fmt: skip
            else:
                mirror.copy(lambda offset, p=where: mirror.file_chunks(p, offset), target + mirror.INCOMPLETE, target)

    @staticmethod
    def http_range(url, offset):
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        resp = open_url(url, method="GET", headers=headers, timeout=60)
        start = offset if offset and resp.getcode() == 206 else 0

        def chunks():
            with resp:
                while True:
                    data = resp.read(CHUNK)
                    if not data:
                        return
                    yield data

        return start, chunks()

    def remove_files(self, directory, paths):
        metadata = os.path.join(directory, ".cache", "huggingface", "download")
        for path in paths:
            for victim in (os.path.join(directory, path), os.path.join(metadata, path + ".metadata")):
                if os.path.lexists(victim):
                    os.unlink(victim)

    def finish(self, temp, final, stamp):
        shutil.rmtree(os.path.join(temp, ".cache"), ignore_errors=True)
        write_json(os.path.join(temp, staging.STAMP), stamp)
        os.rename(temp, final)

    def replace_files(self, temp, final, paths):
        for path in paths:
            target = os.path.join(final, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(os.path.join(temp, path), target)

    def write_stamp(self, directory, stamp):
        write_json(os.path.join(directory, staging.STAMP), stamp)

    @staticmethod
    def remove_tree(directory):
        shutil.rmtree(directory, ignore_errors=True)


def diff_of(path, manifest, result):
    bad = set(result["fetched"])

    def line(p):
        return f"{p} {manifest[p]['size']}\n"

    return {
        "before_header": path,
        "after_header": path,
        "before": "".join(line(p) for p in sorted(manifest) if p not in bad),
        "after": "".join(line(p) for p in sorted(manifest)),
    }


ARGUMENT_SPEC = {
    "source": {"type": "dict", "required": True},
    "models_dir": {"type": "path", "required": True},
    "token": {"type": "str", "no_log": True},
    "python": {"type": "path"},
    "verify": {"type": "str", "choices": ["quick", "full"], "default": "quick"},
    "max_workers": {"type": "int", "default": 8},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    found = source.problems(params["source"])
    if found or not params["source"]:
        module.fail_json(msg="; ".join(found) or "source is empty: nothing to stage")
    src = params["source"]
    request = {
        "final": source.staged_dir(params["models_dir"], src),
        "temp": source.temp_dir(params["models_dir"], src),
        "revision": src["revision"],
        "source": source.public({k: v for k, v in src.items() if k != "manifest" or not isinstance(v, dict)}),
        "full": params["verify"] == "full",
        "check_mode": module.check_mode,
    }
    ops = Ops(module)
    try:
        result = staging.stage(request, ops)
    except (staging.StageError, OSError) as exc:
        module.fail_json(msg=str(exc), path=request["final"])
    result.update(revision=src["revision"], fetched_from=source.kind(src), client=ops.client)
    # Shown by Ansible only with --diff.
    result["diff"] = diff_of(result["path"], result["manifest"], result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
