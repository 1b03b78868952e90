#!/usr/bin/env bash
# The device run of issue 13 (see tests/fixtures/kv_transport/README.md): the KV transport probe in its
# three cases and the peer-to-peer status, raw outputs into $OUT. nixl + nixl-cu13 1.5.1 travel as wheels
# in the folder given as $1 (default .whl); the device machine's python3 holds torch, numpy and nvidia-ml-py.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
wheels=${1:-.whl}
out=${OUT:-/tmp/kv-transport-out}
mkdir -p "$out"
{
  date -u
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$wheels"/nixl-*.whl "$wheels"/nixl_cu13-*.whl && export PYTHONPATH=/tmp/site
  nvidia-smi -L; nvidia-smi --version | head -3
  python3 -c 'import sys, torch, nixl, nixl._api as a; print(sys.version.split()[0], "torch", torch.__version__,
    "gpus", torch.cuda.device_count(), "nixl", a.nixl_agent("x").get_plugin_list())'
  command -v systemd-run && systemd-run --version | head -1; ps -o comm= -p 1
  PYTHONUNBUFFERED=1 python3 tests/hardware/run_kv_transport.py "$out" "${@:2}"
} 2>&1 | tee "$out/run.log"
