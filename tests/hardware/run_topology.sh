#!/usr/bin/env bash
# The device run of issue 3 (see tests/fixtures/topology/h200-x2/README.md): probe the GPU host with
# the topology code through NVML and nvidia-smi, time it, and keep the raw outputs in $OUT.
# ansible-core travels as a wheel in .whl/ (name .whl in the device tool's carry) so that the module
# itself runs too; without it the probe still runs.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-${1:-/tmp/topology-out}}
mkdir -p "$out"
if compgen -G ".whl/ansible_core-*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/ansible_core-*.whl && export PYTHONPATH=/tmp/site
fi
PYTHONUNBUFFERED=1 python3 tests/hardware/run_topology.py "$out" 2>&1 | tee "$out/run.log"
