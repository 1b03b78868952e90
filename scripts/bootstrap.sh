#!/usr/bin/env bash
# Installs what `make demo` and `make test` need, idempotently:
#   - Debian packages (debootstrap, systemd-container, shellcheck for ansible-test sanity, ...), from the
#     machine's own apt sources;
#   - the project venv .venv (python3.12 + ansible-core 2.21 where 3.12 exists, else 3.11 + 2.19);
#   - the oldest supported ansible-core's venv .venv-oldest (python3.11 + ansible-core 2.19, the Debian 12 case, with
#     the same tools), where scripts/test.sh runs the unit tests and a converge again (meta/runtime.yml's lower end);
#   - the collection link .collections/ansible_collections/disagg/sglang -> repo root;
#   - community.general (galaxy.yml dependencies; issue 39's drain and enable go through community.general.haproxy)
#     into .collections, for both venvs: CI reaches the package index but not Ansible Galaxy, so it comes out of the
#     `ansible` community package's wheel (downloaded alone, never installed: the venvs keep their pinned
#     ansible-core), only its ansible_collections/community/general (and the one collection that one depends on).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

need_apt=()
for pkg in debootstrap systemd-container iproute2 openssh-client rsync make shellcheck; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "bootstrap: apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

pick_python() {
  local c
  # pyenv shims exist for versions that are not selected: run each candidate to be sure.
  for c in /root/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12 python3.12 \
           python3.11 python3; do
    if "$c" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
      command -v "$c"; return
    fi
  done
  echo "bootstrap: no python3.12 or python3.11 found" >&2
  exit 1
}

stamp=.venv/.bootstrap-stamp
want=$(cat requirements/controller.txt scripts/bootstrap.sh | sha256sum | cut -c1-16)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  py=$(pick_python)
  if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    core='ansible-core>=2.21,<2.22'
  else
    core='ansible-core>=2.19,<2.20'
  fi
  echo "bootstrap: venv .venv from $py with $core"
  [[ -x .venv/bin/python ]] || "$py" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check "$core" -r requirements/controller.txt 2>&1 \
    | grep -v 'is ignored: it is neither a file nor a directory' || true
  .venv/bin/python -c 'import ansible, molecule, testinfra, sglang_router' 
  echo "$want" > "$stamp"
fi
# Said on every run, not only when the venv is built: the newest ansible-core needs Python 3.12.
if ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  echo "bootstrap: no Python 3.12 found: .venv runs ansible-core 2.19 on $(.venv/bin/python -V 2>&1), so the newest ansible-core (2.21) goes untested here" >&2
fi

# The oldest supported: Python 3.11 and ansible-core 2.19 (meta/runtime.yml's lower end), the same tools.
pick_python311() {
  local c
  for c in /root/.pyenv/versions/3.11*/bin/python3.11 /usr/local/bin/python3.11 /usr/bin/python3.11 python3.11; do
    if "$c" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1; then
      command -v "$c"; return
    fi
  done
  echo "bootstrap: no python3.11 found (the oldest supported venv .venv-oldest needs it)" >&2
  exit 1
}

stamp_oldest=.venv-oldest/.bootstrap-stamp
if [[ ! -f $stamp_oldest || $(cat "$stamp_oldest") != "$want" ]]; then
  py=$(pick_python311)
  echo "bootstrap: venv .venv-oldest from $py with ansible-core>=2.19,<2.20"
  [[ -x .venv-oldest/bin/python ]] || "$py" -m venv .venv-oldest
  .venv-oldest/bin/python -m pip install -q --disable-pip-version-check 'ansible-core>=2.19,<2.20' \
    -r requirements/controller.txt 2>&1 | grep -v 'is ignored: it is neither a file nor a directory' || true
  .venv-oldest/bin/python -c 'import ansible, molecule, testinfra, sglang_router'
  echo "$want" > "$stamp_oldest"
fi

mkdir -p .collections/ansible_collections/disagg
ln -sfn "$root" .collections/ansible_collections/disagg/sglang

# community.general from the `ansible` community package of the index: ansible 14.5.0 ships community.general
# 13.5.0 (requires_ansible >=2.18.0, so both venvs' ansible-core 2.21 and 2.19 run it) and its dependency
# community.library_inventory_filtering_v1. Only the wheel is downloaded (--no-deps; the Python version given, so a
# 3.11 venv fetches it too); its collections are copied out, pip installs nothing. galaxy.yml's range must hold it.
community_pkg=ansible==14.5.0
community_general=13.5.0
cg=.collections/ansible_collections/community/general
if ! grep -qs "\"version\": \"$community_general\"" "$cg/MANIFEST.json"; then
  echo "bootstrap: community.general $community_general from the $community_pkg wheel into .collections"
  mkdir -p .cache/community-wheel
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 -d .cache/community-wheel "$community_pkg" 2>&1 \
    | grep -v 'is ignored: it is neither a file nor a directory' || true
  .venv/bin/python - .cache/community-wheel/"${community_pkg/==/-}"-py3-none-any.whl "$community_general" <<'PY'
import json, shutil, sys, zipfile
from pathlib import Path

wheel, want = sys.argv[1], sys.argv[2]
dest = Path(".collections")
prefixes = ("ansible_collections/community/general/", "ansible_collections/community/library_inventory_filtering_v1/")
with zipfile.ZipFile(wheel) as z:
    got = json.loads(z.read(prefixes[0] + "MANIFEST.json"))["collection_info"]["version"]
    if got != want:
        sys.exit(f"bootstrap: {wheel} holds community.general {got}, not {want}")
    for prefix in prefixes:
        shutil.rmtree(dest / prefix, ignore_errors=True)
    z.extractall(dest, [n for n in z.namelist() if n.startswith(prefixes)])
PY
  rm -rf .cache/community-wheel
fi
