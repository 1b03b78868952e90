#!/usr/bin/env bash
# Runs `ansible-test sanity --local` on the collection. ansible-test needs the collection at
# .../ansible_collections/disagg/sglang, so the files git knows (tracked, plus untracked ones that are not
# ignored, so uncommitted work is checked too) are copied into a temporary tree of that shape first.
# Extra arguments go to ansible-test (e.g. `scripts/sanity.sh --test pylint`).
# The per-test virtual environments of ansible-test (pylint, voluptuous, ...) are created from the package
# index on first use (`--requirements`) and reused afterwards from ~/.ansible/test/venv.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${SANITY_PYTHON:-3.12}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/ansible_collections/disagg/sglang
mkdir -p "$dest"
# .venv and .collections may be symlinks in a git worktree (then .gitignore's "/.venv/" misses them).
git -C "$root" ls-files -z --cached --others --exclude-standard -- . ':(exclude).venv' ':(exclude).collections' \
  | rsync -a --from0 --ignore-missing-args --files-from=- "$root/" "$dest/"

# ansible-test bootstraps pip into each test's venv with a get-pip.py it downloads from its own site, which
# these machines cannot reach; a cached copy is used when present, so put the stand-in there.
pip_version=$(python -c 'import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$python"'"))["pip"])')
get_pip=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [[ ! -f $get_pip ]]; then
  mkdir -p "$(dirname "$get_pip")"
  cp scripts/get_pip_offline.py "$get_pip"
fi

cd "$dest"
ansible-test sanity --local --python "$python" --requirements --color no "$@"
