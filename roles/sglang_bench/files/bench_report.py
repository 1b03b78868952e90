"""Benchmark results of disagg.sglang: normalization, server metrics, comparison, the report page.

Pure functions (standard library only), run on the controller by bench_tool.py and tested by
tests/unit/bench/test_bench_report.py. /metrics pages are read by the collection's one Prometheus text parser,
plugins/module_utils/monitoring/prom_text.py (standard library only too). Two real clients feed it:

- AIPerf (profile_export_aiperf.json, schema 1.x): its `inter_token_latency` is per-request
  (latency - TTFT) / (output tokens - 1), i.e. what sglang.bench_serving calls TPOT; its
  `inter_chunk_latency` is the gap between streamed chunks, i.e. bench_serving's ITL.
- sglang.bench_serving (the JSON line of --output-file): median_/p90_/p99_ ttft, tpot, itl in ms.

Every normalized step has the same keys whichever client ran (STEP_KEYS); missing values are None.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from pathlib import Path

SCHEMA = "disagg.sglang/bench-report/1"

# Keys of one normalized step (per concurrency).
STEP_KEYS = (
    "concurrency",
    "requests",
    "completed",
    "failed",
    "duration_s",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "output_tok_s",
    "input_tok_s",
    "req_s",
    "goodput_req_s",
    "slo_attainment",
)
PCT_KEYS = {
    "ttft_ms": ("mean", "p50", "p90", "p99"),
    "tpot_ms": ("mean", "p50", "p99"),
    "itl_ms": ("mean", "p50", "p99"),
}
PCT_KEYS["e2e_ms"] = ("mean", "p50", "p99")

# Metric names (flattened: "tpot_ms.p50") and which way is worse.
HIGHER_IS_WORSE = {f"{k}.{p}" for k, ps in PCT_KEYS.items() for p in ps} | {"failed"}
LOWER_IS_WORSE = {"output_tok_s", "input_tok_s", "req_s", "goodput_req_s", "slo_attainment"}
COMPARABLE = HIGHER_IS_WORSE | LOWER_IS_WORSE

# What the workers' /metrics tell about a run (sglang 0.5.23: sglang/srt/observability/metrics_collector.py).
SERVER_HISTOGRAMS = (
    "sglang:kv_transfer_speed_gb_s",
    "sglang:kv_transfer_latency_ms",
    "sglang:kv_transfer_bootstrap_ms",
    "sglang:kv_transfer_alloc_ms",
    "sglang:kv_transfer_total_mb",
    "sglang:queue_time_seconds",
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:e2e_request_latency_seconds",
)
SERVER_GAUGES = (
    "sglang:num_queue_reqs",
    "sglang:num_running_reqs",
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
    "sglang:token_usage",
    "sglang:gen_throughput",
)
SERVER_COUNTERS = (
    "sglang:num_requests_total",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:num_aborted_requests_total",
    "sglang:num_transfer_failed_reqs_total",
    "sglang:num_bootstrap_failed_reqs_total",
    "sglang:kv_transfer_failures_total",
)
SERVER_METRIC_PREFIXES = SERVER_HISTOGRAMS + SERVER_GAUGES + SERVER_COUNTERS


class BenchError(ValueError):
    """A client output or a report that cannot be read; the message says which and why."""


def _num(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) or math.isinf(out) else out


def empty_step(concurrency: int, requests: int) -> dict:
    step = dict.fromkeys(STEP_KEYS)
    step.update(concurrency=concurrency, requests=requests)
    for key, pcts in PCT_KEYS.items():
        step[key] = dict.fromkeys(pcts)
    return step


# --------------------------------------------------------------------------------------------------
# Client outputs -> one normalized step
# --------------------------------------------------------------------------------------------------


def normalize_aiperf(raw: dict, concurrency: int, requests: int) -> dict:
    """AIPerf's profile_export_aiperf.json -> a normalized step."""
    if not isinstance(raw, dict) or "aiperf_version" not in raw:
        raise BenchError("not an AIPerf profile export (no aiperf_version): was the client AIPerf?")
    step = empty_step(concurrency, requests)

    def stat(tag, name):
        return _num((raw.get(tag) or {}).get(name))

    for key, tag in (
        ("ttft_ms", "time_to_first_token"),
        ("tpot_ms", "inter_token_latency"),
        ("itl_ms", "inter_chunk_latency"),
        ("e2e_ms", "request_latency"),
    ):
        for pct in PCT_KEYS[key]:
            step[key][pct] = stat(tag, "avg" if pct == "mean" else pct)
    completed = stat("request_count", "avg")
    errors = sum(int(e.get("count", 0)) for e in raw.get("error_summary") or [] if isinstance(e, dict))
    errors = max(errors, int(stat("error_request_count", "avg") or 0))
    step["completed"] = int(completed) if completed is not None else 0
    step["failed"] = errors if errors else max(0, requests - step["completed"])
    step["duration_s"] = stat("benchmark_duration", "avg")
    step["output_tok_s"] = stat("output_token_throughput", "avg")
    step["input_tok_s"] = stat("input_token_throughput", "avg")
    step["req_s"] = stat("request_throughput", "avg")
    step["goodput_req_s"] = stat("goodput", "avg")
    fraction = stat("good_request_fraction", "avg")
    if fraction is not None and step["completed"]:
        # AIPerf's fraction is of the completed requests; count the failed ones as missing the SLO.
        fraction = fraction * step["completed"] / (step["completed"] + step["failed"])
    step["slo_attainment"] = fraction
    return step


def normalize_bench_serving(raw: dict, concurrency: int, requests: int) -> dict:
    """One result line of `python -m sglang.bench_serving --output-file` -> a normalized step."""
    if not isinstance(raw, dict) or "median_ttft_ms" not in raw:
        raise BenchError("not a sglang.bench_serving result (no median_ttft_ms): was the client bench_serving?")
    step = empty_step(concurrency, requests)
    names = {"mean": "mean_{}_ms", "p50": "median_{}_ms", "p90": "p90_{}_ms", "p99": "p99_{}_ms"}
    for key, short in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", "e2e_latency")):
        for pct in PCT_KEYS[key]:
            step[key][pct] = _num(raw.get(names[pct].format(short)))
    completed = int(raw.get("completed") or 0)
    errors = raw.get("errors")
    step["completed"] = completed
    if isinstance(errors, list):
        step["failed"] = sum(1 for e in errors if e)
    else:
        step["failed"] = max(0, requests - completed)
    step["duration_s"] = _num(raw.get("duration"))
    step["output_tok_s"] = _num(raw.get("output_throughput"))
    step["input_tok_s"] = _num(raw.get("input_throughput"))
    step["req_s"] = _num(raw.get("request_throughput"))
    step["goodput_req_s"] = _num(raw.get("request_goodput"))
    step["slo_attainment"] = _num(raw.get("slo_attainment"))
    return step


NORMALIZERS = {"aiperf": normalize_aiperf, "bench_serving": normalize_bench_serving}


def normalize(client: str, raw: dict, concurrency: int, requests: int) -> dict:
    if client not in NORMALIZERS:
        raise BenchError(f"unknown client {client!r}: one of {sorted(NORMALIZERS)}")
    return NORMALIZERS[client](raw, concurrency, requests)


def progress_line(step: dict, index: int, total: int, seconds: float | None = None) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.1f} ms"

    def num(v, unit):
        return "-" if v is None else f"{v:.1f} {unit}"

    line = (
        f"step {index}/{total} concurrency {step['concurrency']}: {step['completed']}/{step['requests']} ok, "
        f"{step['failed']} failed; TTFT p50 {ms(step['ttft_ms']['p50'])}, TPOT p50 {ms(step['tpot_ms']['p50'])}, "
        f"{num(step['output_tok_s'], 'tok/s')}, goodput {num(step['goodput_req_s'], 'req/s')}"
    )
    return line + (f" ({seconds:.1f} s)" if seconds is not None else "")


# --------------------------------------------------------------------------------------------------
# Prometheus text -> the server side of a step
# --------------------------------------------------------------------------------------------------


def _collection_module(name: str):
    """plugins/module_utils/NAME.py of this collection, loaded from its file: this file runs by path under the
    controller's Python, where ansible_collections is not importable. The role and the plugins ship together, so
    the file is three folders up (roles/sglang_bench/files -> the collection's root)."""
    path = Path(__file__).resolve().parents[3] / "plugins" / "module_utils" / f"{name.replace('.', '/')}.py"
    spec = importlib.util.spec_from_file_location(f"_disagg_sglang_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prom_text = _collection_module("monitoring.prom_text")


def finite_samples(text: str) -> list[tuple[str, dict, float]]:
    """(name, labels, value) of every sample of a /metrics page (prom_text.samples) whose value is finite: a NaN
    or infinite sample would spoil the sums and the report's JSON."""
    return [(name, labels, value) for name, labels, value in prom_text.samples(text) if math.isfinite(value)]


def _histograms(samples):
    """{name: {"count": c, "sum": s, "buckets": {le: cumulative}}} summed over label sets (TP/DP ranks)."""
    hist: dict = {}
    for name, labels, value in samples:
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in SERVER_HISTOGRAMS:
                h = hist.setdefault(name[: -len(suffix)], {"count": 0.0, "sum": 0.0, "buckets": {}})
                if suffix == "_bucket":
                    le = labels.get("le", "+Inf")
                    h["buckets"][le] = h["buckets"].get(le, 0.0) + value
                else:
                    h[suffix[1:]] += value
    return hist


def _le(key: str) -> float:
    return math.inf if key in ("+Inf", "inf") else float(key)


def histogram_quantile(buckets: dict, q: float):
    """Prometheus' histogram_quantile over cumulative buckets {le: count}; None without observations."""
    items = sorted(((_le(k), v) for k, v in buckets.items()), key=lambda kv: kv[0])
    if not items or items[-1][1] <= 0:
        return None
    total = items[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in items:
        if count >= rank:
            if math.isinf(le):  # beyond the last finite bucket: its bound, as Prometheus; unknown without one
                return prev_le if len(items) > 1 else None
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def server_delta(before: str, after: str, gauge_max: dict | None = None) -> dict:
    """What one worker's /metrics saw between two scrapes: histogram count/mean/p50/p99 of the
    observations made in between, counter increases, and the gauges' highest sampled value."""
    b, a = _histograms(finite_samples(before)), _histograms(finite_samples(after))
    out = {"histograms": {}, "counters": {}, "gauges_max": {}}
    for name, ha in sorted(a.items()):
        hb = b.get(name, {"count": 0.0, "sum": 0.0, "buckets": {}})
        count = ha["count"] - hb["count"]
        if count <= 0:
            continue
        buckets = {le: v - hb["buckets"].get(le, 0.0) for le, v in ha["buckets"].items()}
        out["histograms"][name] = {
            "count": count,
            "mean": (ha["sum"] - hb["sum"]) / count,
            "p50": histogram_quantile(buckets, 0.5),
            "p99": histogram_quantile(buckets, 0.99),
        }
    sb, sa = finite_samples(before), finite_samples(after)

    def totals(samples, names):
        acc: dict = {}
        for name, _labels, value in samples:
            if name in names:
                acc[name] = acc.get(name, 0.0) + value
        return acc

    cb, ca = totals(sb, SERVER_COUNTERS), totals(sa, SERVER_COUNTERS)
    out["counters"] = {k: ca[k] - cb.get(k, 0.0) for k in sorted(ca)}
    gauges = dict(gauge_max or {})
    for name, value in totals(sa, SERVER_GAUGES).items():
        gauges[name] = max(value, gauges.get(name, value))
    out["gauges_max"] = {k: gauges[k] for k in sorted(gauges) if k in SERVER_GAUGES}
    return out


def gauge_totals(text: str) -> dict:
    """Gauges of one scrape, summed over label sets; the step runner keeps the highest per gauge."""
    acc: dict = {}
    for name, _labels, value in finite_samples(text):
        if name in SERVER_GAUGES:
            acc[name] = acc.get(name, 0.0) + value
    return acc


# --------------------------------------------------------------------------------------------------
# Comparison with the previous report: the regression gate
# --------------------------------------------------------------------------------------------------


def flat(step: dict, metric: str):
    key, _unused, pct = metric.partition(".")
    value = step.get(key)
    if pct:
        value = (value or {}).get(pct) if isinstance(value, dict) else None
    return _num(value)


def check_thresholds(thresholds: dict) -> list[str]:
    """Messages for thresholds the gate cannot apply (sglang_bench_regression_thresholds)."""
    msgs = []
    for metric, pct in (thresholds or {}).items():
        if metric not in COMPARABLE:
            msgs.append(
                f"sglang_bench_regression_thresholds: unknown metric {metric!r}; use one of {sorted(COMPARABLE)}"
            )
        elif _num(pct) is None or _num(pct) < 0:
            msgs.append(f"sglang_bench_regression_thresholds.{metric}: {pct!r} is not a percentage >= 0")
    return msgs


def compare(current: list[dict], previous: list[dict], thresholds: dict) -> dict:
    """Per concurrency present in both runs, each threshold's metric: previous, current, change in percent
    (positive = worse) and whether it regressed past its threshold."""
    prev = {s["concurrency"]: s for s in previous}
    rows, regressions = [], []
    for step in current:
        old = prev.get(step["concurrency"])
        if old is None:
            continue
        for metric, limit in sorted((thresholds or {}).items()):
            a, b = flat(old, metric), flat(step, metric)
            if a is None or b is None:
                continue
            if metric == "failed":
                worse = b - a  # failed requests: an absolute count, not a percentage
            elif a == 0:
                worse = 0.0 if b == 0 else (math.inf if metric in HIGHER_IS_WORSE else -math.inf)
            else:
                change = 100.0 * (b - a) / abs(a)
                worse = change if metric in HIGHER_IS_WORSE else -change
            regressed = worse > float(limit)
            row = {
                "concurrency": step["concurrency"],
                "metric": metric,
                "previous": a,
                "current": b,
                "worse_pct": worse if metric != "failed" else None,
                "worse_abs": worse if metric == "failed" else None,
                "threshold": float(limit),
                "regressed": regressed,
            }
            rows.append(row)
            if regressed:
                regressions.append(row)
    return {"rows": rows, "regressions": regressions, "passed": not regressions}


def regression_message(row: dict) -> str:
    if row["metric"] == "failed":
        return (
            f"concurrency {row['concurrency']}: failed requests {row['previous']:g} -> {row['current']:g} "
            f"(+{row['worse_abs']:g}, threshold {row['threshold']:g})"
        )
    return (
        f"concurrency {row['concurrency']}: {row['metric']} {row['previous']:.2f} -> {row['current']:.2f} "
        f"({row['worse_pct']:+.1f}% worse, threshold {row['threshold']:g}%)"
    )


def pick_previous(reports: list[dict], current_id: str) -> dict | None:
    """The newest earlier report that passed its own gate (a regressed run never becomes the baseline)."""
    earlier = [r for r in reports if r.get("id", "") < current_id and (r.get("gate") or {}).get("passed", True)]
    return max(earlier, key=lambda r: r["id"]) if earlier else None


def missing_fields(report: dict) -> list[str]:
    """Fields a report lacks (the test and the report builder use it)."""
    missing = [k for k in ("schema", "id", "inventory", "simulated", "client", "settings", "deployment", "steps")
               if k not in report]  # fmt: skip
    for i, step in enumerate(report.get("steps") or []):
        missing += [f"steps[{i}].{k}" for k in STEP_KEYS if k not in step]
        missing += [f"steps[{i}].{k}.{p}" for k, ps in PCT_KEYS.items() for p in ps if p not in (step.get(k) or {})]
        if "server" not in step:
            missing.append(f"steps[{i}].server")
    dep = report.get("deployment") or {}
    missing += [f"deployment.{k}" for k in ("collection", "profile", "units", "versions") if k not in dep]
    return missing


# --------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------


def _f(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(report: dict, plots: list[str]) -> str:
    """The report as a Markdown page: its head (what ran, where, the versions), the steps' table, the gate against
    the previous run, the accuracy link, the plots, what the servers saw and the units."""
    lines = [
        *page_head(report),
        *steps_table(report["steps"]),
        *gate_section(report.get("gate") or {}),
        *accuracy_section(report.get("accuracy")),
        "",
        "## Plots",
        "",
        *[f"![{p}]({p})" for p in plots],
        *servers_section(report["steps"]),
        *units_section(report["deployment"]),
    ]
    return "\n".join(lines) + "\n"


def page_head(report: dict) -> list[str]:
    """The title (SIMULATED where the simulator answered, with the warning), the client, the request shape, the SLO,
    the collection, profile, model revision, versions by host and each router's settings."""
    sim = report.get("simulated")
    s = report["settings"]
    dep = report["deployment"]
    lines = [
        f"# Benchmark {report['inventory']} {report['id']}" + (" (SIMULATED)" if sim else ""),
        "",
    ]
    if sim:
        lines += [
            "> **Simulated numbers.** The workers are the PD simulator (tests/sandbox/pdsim), not sglang on GPUs:",
            "> the shapes of the curves are meaningful, the values are not a measurement of any hardware.",
            "",
        ]
    return [
        *lines,
        f"- client: {report['client']} {report.get('client_version') or ''}".rstrip(),
        f"- through: {s.get('url')} ({s.get('endpoint')}), input {s.get('input_len')} / output {s.get('output_len')} "
        f"tokens, dataset {s.get('dataset')}, request rate {s.get('request_rate')}",
        f"- SLO: TTFT <= {s.get('slo_ttft_ms')} ms, TPOT <= {s.get('slo_tpot_ms')} ms",
        f"- collection {dep['collection'].get('version')} commit {dep['collection'].get('commit') or '-'}, "
        f"profile {dep.get('profile')}",
        f"- model revision: {(dep.get('model') or {}).get('revision') or '-'}",
        "- versions: "
        + ", ".join(
            f"{h}: " + " ".join(f"{k} {v}" for k, v in sorted(vs.items()) if v)
            for h, vs in sorted(dep.get("versions", {}).items())
        ),
        *[
            f"- router {name}: {r['impl']} ({r['module']}), "
            + " ".join(f"{k} {' '.join(map(str, v))}".rstrip() for k, v in sorted(r["settings"].items()))
            for name, r in sorted(dep.get("routers", {}).items())
        ],
        "",
    ]


def steps_table(steps: list) -> list[str]:
    """One row per concurrency step: requests, failures, latency percentiles and throughput."""
    lines = [
        "| concurrency | requests | failed | TTFT p50 | TTFT p90 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p50 | ITL p99 "
        "| output tok/s | req/s | goodput req/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for st in steps:
        t, p, i = st["ttft_ms"], st["tpot_ms"], st["itl_ms"]
        lines.append(
            f"| {st['concurrency']} | {st['requests']} | {st['failed']} | {_f(t['p50'])} | {_f(t['p90'])} "
            f"| {_f(t['p99'])} | {_f(p['p50'])} | {_f(p['p99'])} | {_f(i['p50'])} | {_f(i['p99'])} "
            f"| {_f(st['output_tok_s'])} | {_f(st['req_s'], 2)} | {_f(st['goodput_req_s'], 2)} |"
        )
    lines.append("")
    lines.append("Latencies in ms. TPOT: per request, (latency - TTFT) / (output tokens - 1); ITL: between chunks.")
    return lines


def gate_section(gate: dict) -> list[str]:
    """The comparison with the previous run of the inventory: the verdict and one row per metric compared."""
    lines = ["", "## Against the previous run", ""]
    if not gate.get("previous"):
        return [*lines, "No earlier report of this inventory to compare with."]
    lines.append(f"Previous: {gate['previous']} - gate {'PASSED' if gate.get('passed') else 'FAILED'}.")
    lines += [
        "",
        "| concurrency | metric | previous | current | worse by | threshold | |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for row in gate.get("rows", []):
        worse = f"{row['worse_abs']:+g}" if row["metric"] == "failed" else f"{row['worse_pct']:+.1f}%"
        lines.append(
            f"| {row['concurrency']} | {row['metric']} | {_f(row['previous'], 2)} | {_f(row['current'], 2)} "
            f"| {worse} | {row['threshold']:g} | {'REGRESSED' if row['regressed'] else 'ok'} |"
        )
    return lines


def accuracy_section(link: dict | None) -> list[str]:
    """The link to the inventory's accuracy report, its gate and whether it ran on the same units."""
    lines = ["", "## Accuracy", ""]
    if not link:
        return [*lines, "No accuracy report of this inventory (playbooks/accuracy.yml)."]
    value = "-" if link.get("value") is None else f"{link['value']:.4f}"
    return [
        *lines,
        f"[{link['id']}]({link['page']}): gate {'PASSED' if link.get('passed') else 'FAILED'}, "
        f"{link.get('metric')} {value}, "
        + ("the same units as this benchmark." if link.get("same_deployment") else "other units than these."),
    ]


def servers_section(steps: list) -> list[str]:
    """Per step and worker, the means and p99 of its /metrics histograms and the peaks of its queue gauges."""
    lines = ["", "## What the servers saw (per step, from /metrics)", ""]
    for st in steps:
        for worker, seen in sorted((st.get("server") or {}).items()):
            hs = seen.get("histograms", {})
            parts = [f"{n.split(':', 1)[1]} mean {_f(h['mean'], 3)} p99 {_f(h['p99'], 3)} (n={h['count']:g})"
                     for n, h in sorted(hs.items())]  # fmt: skip
            gm = seen.get("gauges_max", {})
            parts += [f"max {n.split(':', 1)[1]} {v:g}" for n, v in sorted(gm.items()) if "queue" in n]
            lines.append(f"- c={st['concurrency']} {worker}: " + ("; ".join(parts) or "no metrics"))
    return lines


def units_section(dep: dict) -> list[str]:
    """Each deployed unit, its host, placement and flags."""
    lines = ["", "## Units", ""]
    for unit, info in sorted(dep.get("units", {}).items()):
        flags = " ".join(f"{k} {' '.join(v)}".strip() for k, v in info.get("flags", {}).items())
        lines.append(f"- `{unit}` on {info.get('host')}: placement {info.get('placement')}; flags `{flags}`")
    return lines


# --------------------------------------------------------------------------------------------------
# The command line of both controller tools (bench_tool.py, accuracy.py), as the role's tasks run them
# --------------------------------------------------------------------------------------------------


def tool_parser(prog: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]:
    """(parser, step, build) of `PROG step RUN_DIR STEP_OUTPUT [--index I --total T]`, run after each step, and
    `PROG build RUN_DIR --meta META`, run at the end; each tool adds its own options to the two commands."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="cmd", required=True)
    step = sub.add_parser("step")
    step.add_argument("run_dir")
    step.add_argument("step_output")
    step.add_argument("--index", type=int, default=1)
    step.add_argument("--total", type=int, default=1)
    build = sub.add_parser("build")
    build.add_argument("run_dir")
    build.add_argument("--meta", required=True)
    return parser, step, build


def run_tool(parser, argv, commands: dict, error: type[Exception], exit_code: int) -> int:
    """Run commands[step|build] on the parsed ARGV; an ERROR it raises is printed (`error: ...`), exit EXIT_CODE."""
    args = parser.parse_args(argv)
    try:
        return commands[args.cmd](args)
    except error as exc:
        print(f"error: {exc}")
        return exit_code
