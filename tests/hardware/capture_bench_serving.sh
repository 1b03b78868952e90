#!/usr/bin/env bash
# The device run of issue 14: real `python -m sglang.bench_serving` output through the real router (servers
# simulated), kept as tests/fixtures/bench/bench_serving-0.5.23-*.jsonl. The kit folder given as $1 holds
# sglang-py.tgz (the sglang 0.5.23 wheel's Python files, without its compiled extensions, tests and
# multimodal_gen, none of which the client loads),
# the sglang-router 0.3.2 wheel and, under whl/, the pure-Python needs that the device image lacks. The device
# machine's python3 holds torch, transformers, aiohttp and numpy.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
kit=${1:-.bsv}
out=${OUT:-/tmp/bench-serving-out}
mkdir -p "$out" /tmp/site
{
  date -u
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$kit"/whl/*.whl "$kit"/sglang_router-*.whl && tar xzf "$kit"/sglang-py.tgz -C /tmp/site || exit 1
  # The client needs no GPU. With one visible, importing sglang loads its CUDA kernel package (sgl_kernel,
  # hundreds of MB, too big to carry) at import time; hidden, it does not.
  export PYTHONPATH=/tmp/site CUDA_VISIBLE_DEVICES=
  python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__,
    "transformers", transformers.__version__)'
  python3 -W ignore -c 'import sglang.benchmark.serving, sglang.version as v; print("sglang", v.__version__)' || exit 1
  PYTHONUNBUFFERED=1 python3 tests/hardware/capture_bench_serving.py "$out" "${@:2}"
} 2>&1 | tee "$out/run.log"
