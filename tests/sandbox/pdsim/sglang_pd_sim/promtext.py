"""A small Prometheus registry (counter, gauge, histogram with labels) and its text exposition 0.0.4.

Pure standard library, shaped after what SGLang 0.5.23 serves: prometheus_client in multiprocess mode
(sglang/srt/utils/common.py `add_prometheus_middleware`: a CollectorRegistry with a MultiProcessCollector).
So, as there:
- a labelled series appears only once it has a value (a counter after its first increment, a histogram
  after its first observation); a metric without any series is left out, HELP and TYPE included;
- counters are named with their `_total` in HELP, TYPE and samples; no `_created` samples;
- label pairs are sorted by name, `le` last; numbers are written as prometheus_client's floatToGoString.
"""

from __future__ import annotations

import math
import threading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def go_float(value: float) -> str:
    """prometheus_client.utils.floatToGoString: 1 -> '1.0', inf -> '+Inf', 1e6 -> '1e+06'."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # large integers: Go's %g style
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _escape(value: str) -> str:
    return str(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels_text(pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


class Metric:
    kind = "untyped"

    def __init__(self, registry: Registry, name: str, documentation: str, labelnames, buckets=None):
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.buckets = (*(float(b) for b in buckets), math.inf) if buckets is not None else None
        self.lock = registry.lock
        self.series: dict[tuple, object] = {}
        registry.metrics.append(self)

    def _key(self, labels: dict) -> tuple:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name}: labels {sorted(labels)} != {sorted(self.labelnames)}")
        return tuple(sorted((k, str(v)) for k, v in labels.items()))

    def samples(self) -> list[tuple[str, list[tuple[str, str]], float]]:
        raise NotImplementedError


class Counter(Metric):
    kind = "counter"

    def inc(self, labels: dict, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        key = self._key(labels)
        with self.lock:
            self.series[key] = self.series.get(key, 0.0) + amount

    def value(self, labels: dict) -> float:
        with self.lock:
            return self.series.get(self._key(labels), 0.0)

    def samples(self):
        return [(self.name, list(key), val) for key, val in self.series.items()]


class Gauge(Metric):
    kind = "gauge"

    def set(self, labels: dict, value: float) -> None:
        key = self._key(labels)
        with self.lock:
            self.series[key] = float(value)

    def samples(self):
        return [(self.name, list(key), val) for key, val in self.series.items()]


class Histogram(Metric):
    kind = "histogram"

    def observe(self, labels: dict, value: float, count: int = 1) -> None:
        """count > 1 records `count` observations of `value` at once (sglang's inter-token latency does)."""
        key = self._key(labels)
        with self.lock:
            entry = self.series.get(key)
            if entry is None:
                entry = self.series[key] = {"buckets": [0] * len(self.buckets), "sum": 0.0}
            entry["sum"] += float(value) * count
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    entry["buckets"][i] += count
                    break

    def count(self, labels: dict) -> int:
        with self.lock:
            entry = self.series.get(self._key(labels))
            return sum(entry["buckets"]) if entry else 0

    def samples(self):
        out = []
        for key, entry in self.series.items():
            acc = 0
            for bound, n in zip(self.buckets, entry["buckets"], strict=True):
                acc += n
                out.append((self.name + "_bucket", [*key, ("le", go_float(bound))], float(acc)))
            out.append((self.name + "_sum", list(key), entry["sum"]))
            out.append((self.name + "_count", list(key), float(acc)))
        return out


class Registry:
    def __init__(self):
        self.lock = threading.RLock()
        self.metrics: list[Metric] = []

    def counter(self, name, documentation, labelnames) -> Counter:
        return Counter(self, name, documentation, labelnames)

    def gauge(self, name, documentation, labelnames) -> Gauge:
        return Gauge(self, name, documentation, labelnames)

    def histogram(self, name, documentation, labelnames, buckets) -> Histogram:
        return Histogram(self, name, documentation, labelnames, buckets)

    def exposition(self) -> str:
        lines: list[str] = []
        with self.lock:
            for metric in self.metrics:
                samples = metric.samples()
                if not samples:
                    continue
                doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
                lines.append(f"# HELP {metric.name} {doc}")
                lines.append(f"# TYPE {metric.name} {metric.kind}")
                lines.extend(f"{name}{_labels_text(pairs)} {go_float(val)}" for name, pairs, val in samples)
        return "\n".join(lines) + "\n" if lines else ""


def parse_exposition(text: str) -> dict:
    """{name: {"type": ..., "help": ..., "samples": [(sample_name, {label: value}, float)]}}: for tests."""
    out: dict = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _sep, doc = line[7:].partition(" ")
            current = out.setdefault(name, {"type": None, "help": doc, "samples": []})
        elif line.startswith("# TYPE "):
            name, _sep, kind = line[7:].partition(" ")
            current = out.setdefault(name, {"type": None, "help": "", "samples": []})
            current["type"] = kind
        elif line and not line.startswith("#"):
            head, _sep, value = line.rpartition(" ")
            sname, _sep, rest = head.partition("{")
            labels = {}
            for part in filter(None, _split_labels(rest.rstrip("}"))):
                k, _sep, v = part.partition("=")
                labels[k] = v[1:-1].replace(r"\"", '"').replace(r"\n", "\n").replace(r"\\", "\\")
            base = next((n for n in out if sname == n or sname in (n + "_bucket", n + "_sum", n + "_count")), sname)
            out.setdefault(base, {"type": None, "help": "", "samples": []})["samples"].append(
                (sname, labels, float(value))
            )
    return out


def _split_labels(text: str) -> list[str]:
    parts, cur, quoted, esc = [], "", False, False
    for ch in text:
        if esc:
            cur, esc = cur + ch, False
        elif ch == "\\":
            cur, esc = cur + ch, True
        elif ch == '"':
            cur, quoted = cur + ch, not quoted
        elif ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts
