#!/usr/bin/env bash
# Makes .cache/sglang-parser-venv (repo-relative), idempotently: a Python 3.11 venv holding the sglang
# 0.5.23 wheel installed WITHOUT its dependencies (torch, CUDA, ...: several GB) plus the few small
# packages its argument modules import (requirements.txt beside this script). The collection's parser
# script (plugins/module_utils/cli/cli_parser_script.py --module sglang.launch_server), run by that venv's
# python, then builds sglang's own `sglang serve` argument parser on a CPU-only machine.
#
# `build_venv.sh smg` makes .cache/smg-parser-venv instead: SMG 1.13 (smg==1.13.0 with its dependencies, a few
# small wheels), the second router program (sglang_router_impl: smg), apart from the controller venv's
# sglang-router 0.3.2 because both ship an `smg` command.
#
# Prints the venv's python on its last line. Exits non-zero, saying why, when it cannot be built.
# SGLANG_PARSER_PYTHON=/path/to/python3.11 picks the interpreter; otherwise the first candidate
# that really runs as 3.11 (pyenv shims exist for versions that are not selected: each is run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
program=${1:-sglang}
case $program in
  sglang) venv=$root/.cache/sglang-parser-venv; pin='sglang==0.5.23'; module=sglang.launch_server ;;  # cp311 only
  smg) venv=$root/.cache/smg-parser-venv; pin='smg==1.13.0'; module=smg.launch_router ;;
  *) echo "build_venv: no such program $program (sglang or smg)" >&2; exit 2 ;;
esac

mkdir -p "$root/.cache"
exec 9>"$venv.lock"
flock 9  # two test runs at once build it once

want=$( (cat "$here/requirements.txt" "$here/build_venv.sh"; echo "$pin") | sha256sum | cut -c1-16)
stamp=$venv/.build-stamp
if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

pick_python() {
  local c
  for c in ${SGLANG_PARSER_PYTHON:-} /root/.pyenv/versions/3.11*/bin/python3.11 /usr/local/bin/python3.11 \
           /usr/bin/python3.11 python3.11; do
    [[ -n $c ]] || continue
    if "$c" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1; then
      command -v "$c"
      return
    fi
  done
  echo "build_venv: no working Python 3.11 found (tried /root/.pyenv/versions/3.11*/bin/python3.11," \
    "/usr/local/bin/python3.11, /usr/bin/python3.11, python3.11); the sglang 0.5.23 wheel is cp311-only." \
    "Install python3.11 (with venv and ensurepip) or set SGLANG_PARSER_PYTHON." >&2
  return 1
}

py=$(pick_python)
echo "build_venv: $venv from $py ($pin)" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input)
# Local find-links/extra-index entries of this machine's pip config may not exist: drop that noise.
quiet() { grep -v 'is ignored: it is neither a file nor a directory' >&2 || true; }
if [[ $program == sglang ]]; then
  "${pip[@]}" -r "$here/requirements.txt" 2>&1 | quiet
  "${pip[@]}" --no-deps "$pin" 2>&1 | quiet
else
  "${pip[@]}" "$pin" 2>&1 | quiet
fi
# pipefail keeps pip's exit status through the filter; the smoke check below proves the result.
"$venv/bin/python" "$root/plugins/module_utils/cli/cli_parser_script.py" --module "$module" --info \
  | cut -c1-200 >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
