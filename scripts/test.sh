#!/usr/bin/env bash
# Runs every test: lint, then pytest (unit, sandbox and integration tests), then the molecule scenarios.
# `scripts/test.sh lint` runs the linters only; `scripts/test.sh bench` the benchmark test alone.
set -euo pipefail
cd "$(dirname "$0")/.."

run_lint() {
  echo "== lint: ruff, yamllint, ansible-lint (production profile), ansible-test sanity"
  ruff check .
  ruff format --check .
  yamllint --strict .
  ansible-lint --profile production
  bash scripts/sanity.sh
}

run_pytest() {
  echo "== pytest"
  set +e
  python -m pytest "$@"
  local rc=$?
  set -e
  # Exit code 5 means pytest collected nothing: a suite that ran no test is a broken suite, not a pass.
  if ((rc == 5)); then
    echo "pytest collected no tests: failing on purpose (tests were expected under tests/)" >&2
    return 1
  fi
  return "$rc"
}

run_molecule() {
  echo "== molecule"
  local scenario
  for scenario in molecule/*/molecule.yml; do
    scenario=$(basename "$(dirname "$scenario")")
    [[ $scenario == shared ]] && continue
    molecule test -s "$scenario"
  done
}

# The benchmark test alone (AIPerf installed into a sandbox host, three sweeps): 6 min 55 s on a quiet machine.
BENCH_TEST=tests/integration/test_bench.py

case "${1:-all}" in
  lint) run_lint ;;
  bench) run_pytest "$BENCH_TEST" ;;
  all)
    run_lint
    run_pytest tests
    run_molecule
    ;;
  *) echo "usage: $0 [lint|bench|all]" >&2; exit 2 ;;
esac
