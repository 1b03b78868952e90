"""PNG plots of a benchmark report with matplotlib: TTFT, TPOT and output throughput against concurrency,
this run against the previous one. Run on the controller (matplotlib comes from requirements/controller.txt)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PLOTS = (
    ("ttft.png", "Time to first token", "TTFT (ms)", (("ttft_ms", "p50"), ("ttft_ms", "p99"))),
    ("tpot.png", "Time per output token", "TPOT (ms)", (("tpot_ms", "p50"), ("tpot_ms", "p99"))),
    ("throughput.png", "Output throughput", "output tokens/s", (("output_tok_s", None),)),
)


def _series(steps, key, pct):
    xs, ys = [], []
    for step in sorted(steps, key=lambda s: s["concurrency"]):
        value = step.get(key)
        if pct:
            value = (value or {}).get(pct)
        if value is not None:
            xs.append(step["concurrency"])
            ys.append(value)
    return xs, ys


def plot_report(report: dict, previous: dict | None, out_dir: Path) -> list[str]:
    """Writes the PNGs into out_dir; returns their file names."""
    names = []
    label = " (simulated)" if report.get("simulated") else ""
    for name, title, ylabel, metrics in PLOTS:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for key, pct in metrics:
            tag = f" {pct}" if pct else ""
            xs, ys = _series(report["steps"], key, pct)
            ax.plot(xs, ys, marker="o", label=f"this run{tag} ({report['id']})")
            if previous:
                xs, ys = _series(previous["steps"], key, pct)
                ax.plot(xs, ys, marker="x", linestyle="--", label=f"previous{tag} ({previous['id']})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} - {report['inventory']}{label}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / name, format="png")
        plt.close(fig)
        names.append(name)
    return names
