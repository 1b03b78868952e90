"""The built collection artifact carries the collection, not the test bed."""

import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_build_leaves_out_tests_and_the_sandbox(tmp_path):
    galaxy = Path(sys.executable).with_name("ansible-galaxy")
    subprocess.run([str(galaxy), "collection", "build", str(REPO), "--output-path", str(tmp_path)],
                   check=True, capture_output=True, text=True)  # fmt: skip
    (artifact,) = tmp_path.glob("disagg-sglang-*.tar.gz")
    names = tarfile.open(artifact).getnames()
    tops = {name.split("/")[0] for name in names}
    assert {"roles", "plugins", "playbooks", "profiles", "site.yml", "meta", "inventories"} <= tops
    leaked = [n for n in names if n.split("/")[0] in {"tests", "molecule", ".ci", "scripts", ".venv", ".cache"}
              or n.startswith("inventories/sandbox") or "pdsim" in n]  # fmt: skip
    assert leaked == [], leaked
    assert "roles/sglang/templates/sglang.service.j2" in names
    assert "plugins/modules/gpu_topology.py" in names
