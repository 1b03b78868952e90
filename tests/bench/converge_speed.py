"""Converge speed on the sandbox (issue 24): each figure a median of RUNS runs. A benchmark, not a test: it prints
its numbers; run it on a quiet machine.

    .venv/bin/python tests/bench/converge_speed.py [--runs 3] [--only P2,P6,P4] [--keep] [--health-poll S]

P2  no-op converge of one host (sandbox bench-speed, the one-host sandbox inventory: prefill, decode and router):
    site.yml once to converge, then RUNS runs that must change nothing (the script fails loudly on changed != 0).
    Per run: the wall time of `ansible-playbook -i INV site.yml`, and from its PLAY RECAP the tasks that reached the
    host: ok (Ansible's ok counts the changed ones too) and, apart, skipped; of the ok, how many ran a module on a
    host rather than on the controller only (set_fact, debug, assert, ...: from the bench_timing callback).
    Then the floor of that shape: the same host, one play of one ansible.builtin.ping per task that ran a module and
    one ansible.builtin.set_fact per other task the last no-op run started (median of RUNS), plus the 1 s that
    sglang's /health takes at least; what the run takes beyond it is the collection's own cost. (A ping goes through
    AnsiballZ, as every module of the collection does.)
P6  rolling overhead per batch (sandbox bench-roll, one host: prefill0 TP4, decode0 and decode1 TP2 each, the router).
    Per run, decode1 alone gets a changed environment variable (its instance's env BENCH_ROLL), so exactly one batch
    rolls. Measured: (a) the playbook's wall time, split into before / the rolling step (rolling.yml and the files it
    includes) / after; (b) the batch's own time, from the start of the first task of rolling_batch.yml to the start
    of the task after its last one (task start times from the bench_timing callback); (c) the engine's own stop and
    start, from the decode1 unit's journal: stop = systemd's "Stopping" to "Stopped", start = "Started" to the
    simulator's "The server is fired up and ready to roll!". overhead = batch - (stop + start): what the collection
    adds (router out and in, the drain check, the health polls, systemd between Stopped and Started). For the
    simulator's start-up delay SGLANG_SIM_STARTUP_DELAY (sglang_decode_extra_env) 0 and 20 s; no load runs meanwhile.
P4  cold converge of four hosts over a cold converge of one host: fresh sandbox hosts booted for each converge (down,
    up), then site.yml. One host: bench-cold1 with the one-host sandbox inventory (1 prefill, 1 decode, router);
    four hosts: bench-cold4 with the multi-host scenario of tests/integration/multihost.py (a router host, a
    prefill host with two instances, two decode hosts: 4 workers). The two alternate, one run each in turn.
    Where the time goes, in CPU seconds during each converge: the sandbox hosts' (every process under the sandbox's
    systemd-nspawn processes: their systemd, sshd, simulators, pip, the modules run there), the controller's
    (ansible-playbook, its forks and ssh clients) and the whole machine's (/proc/stat): on a 2-core machine whatever
    the hosts burn is wall time the converge waits for, and not the collection's to cut.

Each figure uses its own sandbox, brought up if needed, and takes it down when done unless --keep. All three with
--runs 3 take about 20 minutes on a 2-core machine (P2 2, P6 7, P4 10).
"""

import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO))  # multihost reads tests.sandbox.engine_timing

import multihost  # noqa: E402
from sandbox_hosts import VENV_BIN, debug_messages, down, run, ssh_config, up, write_inventory  # noqa: E402

CALLBACKS = Path(__file__).resolve().parent / "callback_plugins"
SPEED, ROLL, COLD1, COLD4 = "bench-speed", "bench-roll", "bench-cold1", "bench-cold4"
PLAYBOOK_TIMEOUT = 1800
RECAP = re.compile(
    r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)\s+rescued=(\d+)"
    r"\s+ignored=(\d+)",
    re.MULTILINE,
)
RECAP_KEYS = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
# Actions that run on the controller only: their ok results never reached a host.
CONTROLLER_ACTIONS = {"set_fact", "debug", "assert", "fail", "meta", "add_host", "group_by", "include_vars",
                      "include_tasks", "include_role", "import_tasks", "import_role", "set_stats",
                      "validate_argument_spec"}  # fmt: skip
# The rolling step: rolling.yml and the files it includes (rolling_restart.yml, rolling_batch.yml, ...); one batch:
# rolling_batch.yml.
ROLLING = re.compile(r"roles/sglang_worker/tasks/rolling[^/]*\.yml$")
ROLLING_BATCH = "roles/sglang_worker/tasks/rolling_batch.yml"
DELAYS = (0, 20)
DECODE1 = "decode1"


def say(line):
    print(line, flush=True)


def median(values):
    return statistics.median(values)


def tree_cpu(sandbox):
    """CPU seconds of sandbox SANDBOX's hosts so far: every process under its systemd-nspawn processes (the hosts'
    systemd, sshd, simulators, pip, the modules Ansible runs there), alive ones with the time of the children they
    reaped (utime + stime + cutime + cstime from /proc/PID/stat). The hosts share this machine's cgroup, so their
    processes are found by their parents."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, times, roots = {}, {}, []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parent[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(f) for f in fields[11:15]) / tick
        if cmdline[0].endswith(b"systemd-nspawn") and any(a.startswith(f"{sandbox}-".encode()) for a in cmdline):
            roots.append(int(entry))
    inside = set(roots)
    grew = True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in inside} - inside
        grew = bool(more)
        inside |= more
    return sum(times[pid] for pid in inside)


def machine_busy():
    """CPU seconds this machine was busy so far (all cores; /proc/stat's cpu line less idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def controller_cpu():
    """CPU seconds of this script's finished children (ansible-playbook, its forks and ssh clients)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Playbook:
    """One `ansible-playbook -i INV site.yml`: wall seconds, wall-clock start and end, stdout, the recap per host and
    the bench_timing events (tasks with their start times, results)."""

    def __init__(self, inventory, label, tmp, sandbox=None):
        timing = Path(tempfile.mkstemp(prefix="timing-", suffix=".jsonl", dir=tmp)[1])
        before = (tree_cpu(sandbox) if sandbox else 0.0, controller_cpu(), machine_busy())
        env = {
            "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
            "ANSIBLE_CALLBACKS_ENABLED": "bench_timing",
            "BENCH_TIMING_FILE": str(timing),
        }
        self.start = time.time()
        proc = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "site.yml"], check=False,
                   timeout=PLAYBOOK_TIMEOUT, env=env, quiet=True)  # fmt: skip
        self.end = time.time()
        after = (tree_cpu(sandbox) if sandbox else 0.0, controller_cpu(), machine_busy())
        # CPU seconds during the run: the sandbox hosts', the controller's (Ansible), the whole machine's
        self.cpu = dict(zip(("hosts", "controller", "machine"), (b - a for a, b in zip(before, after, strict=True)),
                            strict=True))  # fmt: skip
        self.seconds = proc.seconds
        self.stdout = proc.stdout
        recap_text = proc.stdout.split("PLAY RECAP", 1)[-1]
        self.recap = {m.group(1): dict(zip(RECAP_KEYS, map(int, m.groups()[1:]), strict=True))
                      for m in RECAP.finditer(recap_text)}  # fmt: skip
        if proc.returncode or not self.recap:
            raise SystemExit(f"{label} failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
        self.events = [json.loads(line) for line in timing.read_text().splitlines() if line.strip()]
        self.tasks = [e for e in self.events if e["event"] == "task"]
        self.results = [e for e in self.events if e["event"] == "result"]

    def total(self, key):
        return sum(counts[key] for counts in self.recap.values())

    def task_spans(self):
        """[(start, end, task event)]: a task ends where the next one starts (the linear strategy), the last one at
        the playbook's end."""
        ends = [t["t"] for t in self.tasks[1:]] + [self.end]
        return [(task["t"], end, task) for task, end in zip(self.tasks, ends, strict=True)]


def task_file(task):
    return task["path"].rsplit(":", 1)[0]


def task_line(task):
    return int(task["path"].rsplit(":", 1)[1])


def converge(inventory, label, tmp, sandbox=None):
    say(f"  {label} ...")
    playbook = Playbook(inventory, label, tmp, sandbox)
    cpu = playbook.cpu
    said = (f"; CPU s: sandbox hosts {cpu['hosts']:.1f}, controller {cpu['controller']:.1f}, "
            f"machine {cpu['machine']:.1f}" if sandbox else "")  # fmt: skip
    say(f"  {label}: {playbook.seconds:.1f} s, changed={playbook.total('changed')}{said}")
    return playbook


STARTED = set()  # the sandboxes this run brought up: the only ones it takes down


def boot(name, command=None):
    """Sandbox NAME up (a no-op when it is up): one host, or by COMMAND (python arguments)."""
    STARTED.add(name)
    if command:
        proc = run([str(VENV_BIN / "python"), *command], check=False)
        if proc.returncode:
            raise SystemExit(f"sandbox {name} did not come up:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    else:
        up(name)


def teardown(name):
    STARTED.discard(name)
    down(name)


def fresh(name, command=None):
    """Sandbox NAME booted fresh: taken down if it is up, then up."""
    STARTED.add(name)
    down(name)
    boot(name, command)


# ---------------------------------------------------------------- P2: no-op converge of one host


def figure_p2(args, tmp):
    say(f"P2: no-op converge of one host (sandbox {SPEED})")
    boot(SPEED)
    host = f"{SPEED}-1"
    inventory = write_inventory(tmp / "p2", SPEED, host)
    converge(inventory, "first converge", tmp)
    rows = []
    for index in range(args.runs):
        playbook = Playbook(inventory, f"no-op run {index + 1}", tmp)
        counts = playbook.recap[host]
        if counts["changed"]:
            changed = sorted({r["name"] for r in playbook.results if r["changed"]})
            raise SystemExit(f"P2 no-op run {index + 1} changed {counts['changed']} task(s), not a no-op: "
                             + "; ".join(changed))  # fmt: skip
        ok = [r for r in playbook.results if r["host"] == host and r["status"] == "ok"]
        remote = [r for r in ok if r["action"].rsplit(".", 1)[-1] not in CONTROLLER_ACTIONS]
        rows.append((playbook.seconds, counts["ok"], counts["skipped"], len(remote)))
        say(
            f"  no-op run {index + 1}: {playbook.seconds:.1f} s, ok={counts['ok']} (tasks that reached the host; "
            f"{len(remote)} of them ran a module on a host), changed=0, skipped={counts['skipped']}"
        )
    say_task_costs(playbook)
    floor = p2_floor(inventory, playbook, args.runs, tmp)
    if not args.keep:
        teardown(SPEED)
    seconds, ok, skipped, remote = (median(column) for column in zip(*rows, strict=True))
    return [
        f"P2 no-op converge, one host, median of {args.runs}: {seconds:.1f} s wall; tasks that reached the host "
        f"(recap ok, changed included) {ok:g}, of which {remote:g} ran a module on a host (not set_fact/debug/"
        f"assert/include/argument spec); changed 0; skipped {skipped:g}",
        f"   floor of the same shape on the same host, median of {args.runs}: {floor['seconds']:.1f} s "
        f"({floor['modules']} ansible.builtin.ping + {floor['others']} ansible.builtin.set_fact, one per task the "
        f"no-op run started); with sglang's /health (>= 1 s: http_server.py health_generate sleeps 1 s before it "
        f"looks) {floor['seconds'] + 1:.1f} s; the no-op run beyond it {seconds - floor['seconds'] - 1:.1f} s",
    ]


def say_task_costs(playbook, top=15):
    """Where the last no-op run's time went: its slowest tasks (start to the next task's start) and the time per task
    file, from the bench_timing callback."""
    spans = sorted(((end - start, task) for start, end, task in playbook.task_spans()), key=lambda s: -s[0])
    say(f"  the last no-op run's {top} slowest of {len(spans)} tasks (s, file:line, action):")
    for seconds, task in spans[:top]:
        where = task["path"].split("/roles/")[-1].split("/playbooks/")[-1]
        say(f"    {seconds:5.2f}  {task['name'][:70]}  ({where}, {task['action'].rsplit('.', 1)[-1]})")
    per_file = {}
    for seconds, task in spans:
        name = task_file(task).split("/roles/")[-1] if task["path"] else "(no file)"
        per_file[name] = per_file.get(name, 0.0) + seconds
    say("  per task file (s): " + "; ".join(f"{name} {sec:.1f}" for name, sec in
                                            sorted(per_file.items(), key=lambda i: -i[1])[:10]))  # fmt: skip


def p2_floor(inventory, playbook, runs, tmp):
    """What a run of the no-op run's shape costs with nothing in it: one play on the same host with one
    ansible.builtin.ping for each task that ran a module there and one ansible.builtin.set_fact for each other task
    the run started (skipped ones too: Ansible forks a worker for those as well); the median of RUNS runs."""
    ran_module = {r["name"] for r in playbook.results
                  if r["status"] == "ok" and r["action"].rsplit(".", 1)[-1] not in CONTROLLER_ACTIONS}  # fmt: skip
    modules = sum(1 for task in playbook.tasks if task["name"] in ran_module)
    others = len(playbook.tasks) - modules
    tasks = [{"name": f"Module {i}", "ansible.builtin.ping": None} for i in range(modules)]
    tasks += [{"name": f"Fact {i}", "ansible.builtin.set_fact": {"bench_floor": i}} for i in range(others)]
    path = tmp / "p2-floor.yml"
    path.write_text(json.dumps([{"name": "Floor", "hosts": "all", "gather_facts": False, "tasks": tasks}]) + "\n")
    times = []
    for _run in range(runs):
        proc = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(path)], check=False,
                   timeout=PLAYBOOK_TIMEOUT, quiet=True)  # fmt: skip
        if proc.returncode:
            raise SystemExit(f"the P2 floor playbook failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
        times.append(proc.seconds)
    return {"seconds": median(times), "modules": modules, "others": others}


# ---------------------------------------------------------------- P6: rolling overhead per batch


def roll_host_vars(delay, generation, health_poll=None):
    """prefill0 TP4 (from the sandbox group_vars), two TP2 decodes; decode1's env BENCH_ROLL is the knob that rolls
    it alone; the simulator's start-up delay for both decodes; sglang_health_poll where given (else the sandbox
    inventory's 5 s: a progress line, and so a module run, every 5 s of an engine's start)."""
    extra = {} if health_poll is None else {"sglang_health_poll": health_poll}
    return extra | {
        "sglang_decode_instances": [
            {"name": "decode0", "tp": 2, "port": 30001, "dist_init_port": 30435},
            {"name": DECODE1, "tp": 2, "port": 30011, "dist_init_port": 30445, "env": {"BENCH_ROLL": str(generation)}},
        ],
        # the measured load alone: no warm-up (the sandbox's default, tests/sandbox/engine_timing.py, adds 2 s)
        "sglang_decode_extra_env": {"SGLANG_SIM_STARTUP_DELAY": str(delay), "SGLANG_SIM_WARMUP_DELAY": "0"},
    }


def journal(name, host, unit, since):
    """[(time, message)] of UNIT's journal on HOST since the wall-clock time SINCE."""
    proc = run(["ssh", "-F", str(ssh_config(name)), host,
                f"journalctl -u {shlex.quote(unit)} -o json --no-pager --since @{int(since) - 1}"],
               check=False, quiet=True)  # fmt: skip
    if proc.returncode:
        raise SystemExit(f"journalctl of {unit} on {host} failed: {proc.stderr[-2000:]}")
    entries = []
    for line in proc.stdout.splitlines():
        entry = json.loads(line)
        message = entry.get("MESSAGE")
        if isinstance(message, str):
            entries.append((int(entry["__REALTIME_TIMESTAMP"]) / 1e6, message))
    return entries


def engine_times(entries, since):
    """The unit's stop (Stopping -> Stopped) and start (Started -> the simulator's ready line) after SINCE, and the
    gap between Stopped and Started (systemd's own)."""
    marks = {}
    patterns = [("stopping", "Stopping "), ("stopped", "Stopped "), ("started", "Started "),
                ("ready", "The server is fired up and ready to roll!")]  # fmt: skip
    after = since
    for key, text in patterns:
        found = next((t for t, message in entries if t >= after
                      and (message.startswith(text) if key != "ready" else text in message)), None)  # fmt: skip
        if found is None:
            raise SystemExit(f"P6: no {text.strip()!r} line in the decode unit's journal after the run's start")
        marks[key] = after = found
    return {
        "stop": marks["stopped"] - marks["stopping"],
        "systemd": marks["started"] - marks["stopped"],
        "start": marks["ready"] - marks["started"],
    }


def rolling_timeline(playbook):
    """Seconds before the rolling step, of it, after it, and [(batch seconds, [(task seconds, name)])]."""
    spans = playbook.task_spans()
    rolling = [i for i, span in enumerate(spans) if ROLLING.search(task_file(span[2]))]
    if not rolling:
        raise SystemExit("P6: the run did not reach the rolling step (no task of rolling.yml)")
    first, last = rolling[0], rolling[-1]
    step_start, step_end = spans[first][0], spans[last][1]
    batch_tasks = [i for i in range(first, last + 1) if task_file(spans[i][2]).endswith(ROLLING_BATCH)]
    first_line = min(task_line(spans[i][2]) for i in batch_tasks) if batch_tasks else None
    batches = []
    for i in batch_tasks:
        start, end, task = spans[i]
        if task_line(task) == first_line or not batches:
            batches.append([])
        batches[-1].append((end - start, task["name"]))
    return {
        "before": step_start - playbook.start,
        "step": step_end - step_start,
        "after": playbook.end - step_end,
        "batches": [(sum(task[0] for task in tasks), tasks) for tasks in batches],
    }


def figure_p6(args, tmp):
    say(f"P6: rolling overhead per batch (sandbox {ROLL}: prefill0 TP4, decode0 + decode1 TP2, router; one host)")
    boot(ROLL)
    host = f"{ROLL}-1"
    unit = f"sglang-{DECODE1}.service"
    generation = 0
    lines = []
    for delay in DELAYS:
        inventory = write_inventory(tmp / f"p6-{delay}-{generation}", ROLL, host,
                                    host_vars=roll_host_vars(delay, generation, args.health_poll))  # fmt: skip
        converge(inventory, f"converge with SGLANG_SIM_STARTUP_DELAY={delay} (setup, not measured)", tmp)
        rows = []
        for index in range(args.runs):
            generation += 1
            inventory = write_inventory(tmp / f"p6-{delay}-{generation}", ROLL, host,
                                        host_vars=roll_host_vars(delay, generation, args.health_poll))  # fmt: skip
            playbook = Playbook(inventory, f"P6 rolling run {index + 1} (delay {delay})", tmp)
            order = [m for _host, m in debug_messages(playbook.stdout) if m.startswith("rolling restart, batch")]
            timeline = rolling_timeline(playbook)
            if len(timeline["batches"]) != 1 or len(order) != 1 or f"sglang-{DECODE1}@" not in order[0]:
                raise SystemExit(f"P6: expected one batch of sglang-{DECODE1}, got {order or 'none'} "
                                 f"({len(timeline['batches'])} batch(es) in the task times)")  # fmt: skip
            batch, tasks = timeline["batches"][0]
            engine = engine_times(journal(ROLL, host, unit, playbook.start), playbook.start)
            own = engine["stop"] + engine["start"]
            row = {"wall": playbook.seconds, "before": timeline["before"], "step": timeline["step"],
                   "after": timeline["after"], "batch": batch, "stop": engine["stop"], "start": engine["start"],
                   "systemd": engine["systemd"], "engine": own, "overhead": batch - own}  # fmt: skip
            rows.append(row)
            slowest = "; ".join(f"{name.split(' : ')[-1][:60]} {s:.1f}" for s, name in sorted(tasks, reverse=True)[:5])
            say(
                f"  run {index + 1}: wall {row['wall']:.1f} s = before {row['before']:.1f} + rolling step "
                f"{row['step']:.1f} + after {row['after']:.1f}; batch {batch:.1f} s, engine stop {engine['stop']:.1f} "
                f"+ start {engine['start']:.1f} = {own:.1f} s (systemd between: {engine['systemd']:.2f} s); "
                f"overhead {row['overhead']:.1f} s"
            )
            say(f"    slowest batch tasks (s): {slowest}")
        m = {key: median(row[key] for row in rows) for key in rows[0]}
        lines.append(
            f"P6 rolling, one decode of two, SGLANG_SIM_STARTUP_DELAY={delay}, sglang_health_poll "
            f"{args.health_poll or '5 (sandbox)'}, median of {args.runs}: "
            f"overhead per batch {m['overhead']:.1f} s (batch {m['batch']:.1f} s - engine stop {m['stop']:.1f} s "
            f"- engine start {m['start']:.1f} s); playbook wall {m['wall']:.1f} s = before the rolling step "
            f"{m['before']:.1f} + rolling step {m['step']:.1f} + after {m['after']:.1f}"
        )
    if not args.keep:
        teardown(ROLL)
    return lines


# ---------------------------------------------------------------- P4: cold converge, four hosts over one


def figure_p4(args, tmp):
    say(f"P4: cold converge of four hosts ({COLD4}, the multi-host scenario of tests/integration/multihost.py: "
        f"router host, prefill host with 2 instances, 2 decode hosts) over one host ({COLD1}, the one-host sandbox "
        "inventory: 1 prefill, 1 decode, router)")  # fmt: skip
    one, four = [], []
    for index in range(args.runs):
        fresh(COLD1)
        inventory = write_inventory(tmp / f"p4-one-{index}", COLD1, f"{COLD1}-1")
        one.append(converge(inventory, f"run {index + 1}: cold converge, one host", tmp, COLD1))
        teardown(COLD1)
        fresh(COLD4, command=multihost.sandbox_up_command(COLD4))
        inventory = tmp / f"p4-four-{index}"
        multihost.write_inventory(inventory, COLD4)
        four.append(converge(inventory, f"run {index + 1}: cold converge, four hosts", tmp, COLD4))
        teardown(COLD4)
    walls = {"one": median([p.seconds for p in one]), "four": median([p.seconds for p in four])}
    cpu = {name: {key: median([p.cpu[key] for p in runs]) for key in ("hosts", "controller", "machine")}
           for name, runs in (("one", one), ("four", four))}  # fmt: skip
    lines = [
        f"P4 cold converge, median of {args.runs}: four hosts (multi-host scenario) {walls['four']:.1f} s, "
        f"one host (one-host sandbox inventory) {walls['one']:.1f} s, ratio {walls['four'] / walls['one']:.2f}"
    ]
    # Where the difference goes: CPU seconds on this 2-core machine. The sandbox hosts' own work (their systemd,
    # simulators, pip installs, the modules run on them) is not ours to cut; the controller's is Ansible's.
    for name in ("one", "four"):
        c = cpu[name]
        rest = c["machine"] - c["hosts"] - c["controller"]
        lines.append(f"   {name} host(s): CPU s - sandbox hosts {c['hosts']:.1f}, controller (Ansible) "
                     f"{c['controller']:.1f}, the rest of the machine {rest:.1f}; machine busy {c['machine']:.1f} of "
                     f"{os.cpu_count() * walls[name]:.1f} core-seconds")  # fmt: skip
    extra = {key: cpu["four"][key] - cpu["one"][key] for key in ("hosts", "controller", "machine")}
    lines.append(f"   four - one: {walls['four'] - walls['one']:.1f} s wall; CPU s - sandbox hosts "
                 f"+{extra['hosts']:.1f}, controller +{extra['controller']:.1f}, "
                 f"machine +{extra['machine']:.1f}")  # fmt: skip
    return lines


FIGURES = {"P2": figure_p2, "P6": figure_p6, "P4": figure_p4}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; each figure prints their median")
    parser.add_argument("--only", default=",".join(FIGURES), help="figures to run, comma separated (P2,P6,P4)")
    parser.add_argument("--health-poll", type=int, help="P6: sglang_health_poll (seconds a health call waits)")
    parser.add_argument("--keep", action="store_true", help="leave the sandboxes up")
    args = parser.parse_args()
    chosen = [name.strip().upper() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in FIGURES]
    if unknown or not chosen or args.runs < 1:
        parser.error(f"--only takes some of {', '.join(FIGURES)} (got {args.only!r}); --runs at least 1")
    summary = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="converge-speed-") as tmp:
        try:
            for name in chosen:
                summary += FIGURES[name](args, Path(tmp))
        finally:
            if not args.keep:
                for sandbox in sorted(STARTED):
                    down(sandbox)
    say(f"\nconverge speed on this machine ({time.monotonic() - started:.0f} s in all):")
    for line in summary:
        say(f"  {line}")


if __name__ == "__main__":
    try:
        main()
    except subprocess.TimeoutExpired as exc:
        raise SystemExit(f"timed out: {exc}") from exc
