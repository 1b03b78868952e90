#!/usr/bin/env bash
# Runs every test in four lanes at once, each printing its lines with its name in front. What runs in which lane
# follows the measured durations (docs/test-durations.md, issue 49), so that the lanes end close together:
#   lane A: the linters, the multi-host module's sglang-router tests (one four-host deployment and a sequence of
#           changes) but its engine upgrade, then the benchmark module;
#   lane B: the multi-host module's engine upgrade, switch to SMG and SMG tests on a deployment of its own, then the
#           site module, molecule, then molecule's site scenario on the oldest supported ansible-core (2.19 on
#           Python 3.11, .venv-oldest);
#   lane C: pytest on the unit tests, the test doubles' tests and the one-host modules no other lane runs (the
#           bad-inventory module among them), then the unit tests on the oldest core;
#   lane D: the routers' module (several routers behind HAProxy), then the faults and hardening modules.
# A sandbox module spends much of its time waiting for services (weight loading, health checks, loads at a set rate):
# in the first fresh-clone run of three lanes the 2 cores were idle 19% of the time on average (vmstat every 30 s),
# 20-70% in its second half, so a fourth lane shortens the run where a third waits. Each module boots its own named
# sandbox and the sandbox tool locks what they share (rootfs, wheelhouse, network). Fails if any lane fails, or past
# the budget below.
# History: session 33's fresh clone ran lane A's pytest 61 min; session 48's CI run lane A 3608 s (multi-host and
# routers' modules, molecule), lane B 3419 s (all else); issue 49's baseline and runs are docs/test-durations.md.
# `scripts/test.sh lint` runs the linters only; `scripts/test.sh bench` the benchmark test alone.
set -euo pipefail
cd "$(dirname "$0")/.."

run_lint() {
  echo "== lint: ruff, yamllint, ansible-lint (production profile), ansible-test sanity"
  # Chained with && (not left to set -e): a lane runs this inside a list, where bash ignores set -e.
  ruff check . && ruff format --check . && yamllint --strict . && ansible-lint --profile production &&
    bash scripts/sanity.sh
}

# run_pytest NAME ARGS...: pytest with its JUnit XML as $TEST_RESULTS/NAME.xml (scripts/test_budget.py reads it).
run_pytest() {
  local name=$1
  shift
  echo "== pytest ($name)"
  set +e
  COLUMNS=${COLUMNS:-240} python -m pytest -rfE ${TEST_RESULTS:+--junitxml="$TEST_RESULTS/$name.xml"} "$@"
  local rc=$?
  set -e
  # Exit code 5 means pytest collected nothing: a suite that ran no test is a broken suite, not a pass.
  if ((rc == 5)); then
    echo "pytest collected no tests: failing on purpose (tests were expected under tests/)" >&2
    return 1
  fi
  return "$rc"
}

# Which modules run in lanes A, B and D, by the fresh-clone run ci9 on 8bfab78 (docs/test-durations.md, session 54,
# seconds): the multi-host module's tests but the engine upgrade 1630, its engine upgrade and SMG part 1657; the
# routers' module 1295, faults 808 (mostly waiting: loads at a set rate, freezes), site 500, benchmark 436, hardening
# 163, the linters 207, molecule's sandbox scenario 65, molecule's site scenario on the oldest core 116. Lane C runs
# every other test: its pytest 1994 there (bad inventories 464, the engine double's router tests 418, monitoring 406,
# robust values 109, the unit tests and the doubles' tests) and the oldest core's unit tests 299. Lanes by those
# figures: A 2276, B 2340, C 2293, D 2267 (ci9: C 2358 with molecule's sandbox scenario, B 2275).
MULTIHOST=tests/integration/test_multihost.py
LANE_A_MODULES=(tests/integration/test_bench.py)
LANE_B_MODULES=(tests/integration/test_site.py)
LANE_D_MODULES=(tests/integration/test_routers.py tests/integration/test_faults.py tests/integration/test_hardening.py)
LANES=(A B C D)

# Runs "$@" with every line it prints prefixed by the lane's name, keeping a copy in $LANE_LOGS/<name>.log (the
# recap reads it); its exit status is the command's.
lane() {
  local name=$1 start=$SECONDS rc=0
  shift
  ("$@") 2>&1 | sed -u "s/^/[lane $name] /" | tee "$LANE_LOGS/$name.log" || rc=$?
  echo "== lane $name ended: exit $rc after $((SECONDS - start)) s" | tee -a "$LANE_LOGS/$name.log"
  return "$rc"
}

# The end of the output says why a run failed, whichever lane ended first: each lane's end line and pytest's
# FAILED/ERROR lines, and the last lines of a failed lane (a linter's or molecule's message has no FAILED line).
recap() {
  local name log
  echo "== recap"
  awk -F'\t' '$3 != 0 {print "step " $1 " failed: exit " $3 " after " $2 " s"}' "$TEST_RESULTS/steps.tsv" 2>/dev/null || true
  for name in "${LANES[@]}"; do
    log=$LANE_LOGS/$name.log
    grep -E '^\[lane .\] (FAILED|ERROR) |^\[lane .\] =+ .*(passed|failed|error).* in |^== lane ' "$log" || true
    if ! grep -q "^== lane $name ended: exit 0 " "$log"; then
      echo "-- the last 40 lines of lane $name:"
      tail -n 40 "$log"
    fi
  done
}

# The multi-host module in two parts, each on its own four-host deployment converged from bare, side by side: lane A
# its sglang-router tests but the engine upgrade; lane B the engine upgrade (about 14 min: two venv builds on three
# hosts, two rolling runs, two reruns), then the switch to SMG under load and the SMG tests, in the module's order.
MULTIHOST_A="not smg and not engine_upgrade"
MULTIHOST_B="smg or engine_upgrade"
lane_A() {
  step A-lint run_lint &&
    step A-multihost run_pytest A-multihost "$MULTIHOST" -k "$MULTIHOST_A" -p no:cacheprovider \
      --basetemp="${TMPDIR:-/tmp}/disagg-test-lane-a" --durations=10 &&
    step A-pytest run_pytest A-pytest "${LANE_A_MODULES[@]}" -p no:cacheprovider \
      --basetemp="${TMPDIR:-/tmp}/disagg-test-lane-a-more" --durations=5
}

lane_B() {
  DISAGG_MULTIHOST_SANDBOX=clms step B-multihost run_pytest B-multihost "$MULTIHOST" -k "$MULTIHOST_B" \
    -p no:cacheprovider --basetemp="${TMPDIR:-/tmp}/disagg-test-lane-b" --durations=5 &&
    step B-pytest run_pytest B-pytest "${LANE_B_MODULES[@]}" -p no:cacheprovider \
      --basetemp="${TMPDIR:-/tmp}/disagg-test-lane-b-more" --durations=5 &&
    run_molecule && step B-oldest-converge run_oldest_converge
}

# The oldest ansible-core of meta/runtime.yml's range (the newest is .venv, which runs everything else), with
# .venv-oldest (scripts/bootstrap.sh) first on PATH: its unit tests (about 4 min, at the end of lane C) and one real
# converge, molecule's site scenario (one host, prefill, decode and router; converge, idempotence, verify; about
# 2 min, at the end of lane B).
oldest() {
  echo "== oldest supported: ansible-core $(.venv-oldest/bin/python -c 'from ansible.release import __version__ as v
print(v)'), $(.venv-oldest/bin/python -V)"
  PATH="$PWD/.venv-oldest/bin:$PATH" "$@"
}

# The oldest run is for the collection: tests/unit. The tests of the test doubles and tools (the engine simulator, the
# hub simulator, the load client, HAProxy's stats reader) live beside them under tests/sandbox and run once, on .venv.
run_oldest_units() {
  oldest run_pytest C-oldest tests/unit -p no:cacheprovider --basetemp="${TMPDIR:-/tmp}/disagg-test-oldest"
}

run_oldest_converge() {
  oldest molecule test -s site
}

lane_C() {
  step C-pytest run_pytest C-pytest tests --ignore="$MULTIHOST" "${LANE_A_MODULES[@]/#/--ignore=}" \
    "${LANE_B_MODULES[@]/#/--ignore=}" "${LANE_D_MODULES[@]/#/--ignore=}" --durations=25 &&
    step C-oldest run_oldest_units
}

lane_D() {
  step D-pytest run_pytest D-pytest "${LANE_D_MODULES[@]}" -p no:cacheprovider \
    --basetemp="${TMPDIR:-/tmp}/disagg-test-lane-d" --durations=10
}

# step NAME CMD...: runs CMD and appends "NAME<TAB>seconds<TAB>exit" to $TEST_RESULTS/steps.tsv.
step() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  [[ -n ${TEST_RESULTS:-} ]] && printf '%s\t%s\t%s\n' "$name" "$((SECONDS - start))" "$rc" >>"$TEST_RESULTS/steps.tsv"
  return "$rc"
}

# The suite's budget (issue 49): CI allows 90 min; past DISAGG_TEST_BUDGET_S seconds (45 min) the run fails and
# scripts/test_budget.py prints where the time went, so the budget holds as features land. DISAGG_TEST_DURATIONS=FILE
# also writes the tables there (docs/test-durations.md holds the runs that placed the lanes). The suite's target is
# 40 min; a new test pays for itself (shares a deployment, rides on a run, or retires a slower test).
BUDGET_S=${DISAGG_TEST_BUDGET_S:-2700}

budget() {
  local elapsed=$1 lanes=() name
  for name in "${LANES[@]}"; do
    lanes+=(--lane "$name=$(sed -n "s/^== lane $name ended: exit [0-9]* after \([0-9]*\) s$/\1/p" \
      "$LANE_LOGS/$name.log" | tail -n 1)")
  done
  python scripts/test_budget.py "$TEST_RESULTS" --budget "$BUDGET_S" --elapsed "$elapsed" "${lanes[@]}" \
    ${DISAGG_TEST_DURATIONS:+--markdown "$DISAGG_TEST_DURATIONS"}
}

run_lanes() {
  local pids=() rcs=() rc_budget=0 start=$SECONDS name i
  LANE_LOGS=$(mktemp -d "${TMPDIR:-/tmp}/disagg-test-lanes.XXXXXX")
  TEST_RESULTS=$LANE_LOGS/results
  mkdir -p "$TEST_RESULTS"
  for name in "${LANES[@]}"; do
    lane "$name" "lane_$name" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    rcs[i]=0
    wait "${pids[i]}" || rcs[i]=$?
  done
  # The budget's tables first and the recap last: CI shows a run's last lines, which must say why it failed.
  echo "== budget"
  budget "$((SECONDS - start))" || rc_budget=$?
  recap
  rm -rf "$LANE_LOGS"
  for i in "${!rcs[@]}"; do
    ((rcs[i] == 0)) || return 1
  done
  ((rc_budget == 0))
}

# Every molecule scenario but site, which runs on the oldest core only (run_oldest_converge): on the newest, its
# converge of the sandbox inventory from bare, its idempotence and its verify are test_site's first converge, its rerun
# and its placement test (issue 49: the same converge twice, about 2 min).
run_molecule() {
  echo "== molecule"
  local scenario
  for scenario in molecule/*/molecule.yml; do
    scenario=$(basename "$(dirname "$scenario")")
    [[ $scenario == shared || $scenario == site ]] && continue
    step "B-molecule-$scenario" molecule test -s "$scenario" || return
  done
}

# The benchmark and accuracy module alone (AIPerf installed into a sandbox host, three sweeps, three accuracy runs):
# 8 min 22 s with another sandbox module beside it.
BENCH_TEST=tests/integration/test_bench.py

case "${1:-all}" in
  lint) run_lint ;;
  bench) run_pytest bench "$BENCH_TEST" ;;
  all) run_lanes ;;
  *) echo "usage: $0 [lint|bench|all]" >&2; exit 2 ;;
esac
