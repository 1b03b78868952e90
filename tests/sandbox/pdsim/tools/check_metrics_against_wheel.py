"""Compare the simulator's series table with sglang's own metrics_collector.py (name, type, HELP).

    pip download --no-deps sglang==0.5.23 -d /tmp/sgl && unzip -q /tmp/sgl/sglang-*.whl -d /tmp/sgl/x
    python tests/sandbox/pdsim/tools/check_metrics_against_wheel.py \\
        /tmp/sgl/x/sglang/srt/observability/metrics_collector.py

Prints one line per series (OK / DIFF / MISSING) and exits 1 on any difference. Label sets are printed
as sglang spells them, to read against collector.label_names().
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_pd_sim.collector import SERIES


def declared(source: str) -> dict:
    """{name: (constructor, documentation, labelnames source)} of every sglang:* metric constructed."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        name = kw.get("name")
        if not (isinstance(name, ast.Constant) and str(name.value).startswith("sglang:")):
            continue
        func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "?")
        try:
            doc = ast.literal_eval(kw["documentation"]) if "documentation" in kw else None
        except ValueError:
            doc = ast.unparse(kw["documentation"])
        labels = ast.unparse(kw["labelnames"]) if "labelnames" in kw else None
        found[name.value] = (func, doc, labels)
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    found = declared(Path(argv[0]).read_text(encoding="utf-8"))
    bad = 0
    for _attr, kind, name, _labels, _buckets, doc in SERIES:
        if name not in found:
            print(f"MISSING {name}")
            bad += 1
            continue
        func, their_doc, labels = found[name]
        same = func.lower() == kind and their_doc == doc
        bad += not same
        print(f"{'OK' if same else 'DIFF'} {name} {func} labels={labels}" + ("" if same else f" help={their_doc!r}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
