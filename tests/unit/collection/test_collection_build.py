"""The built collection artifact carries the collection, not the test bed."""

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
USER_SECTION = "## Install"
ROOT_FILES = {"README", "LICENSE", "CHANGELOG"}


@pytest.fixture(scope="module")
def artifact_names(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    galaxy = Path(sys.executable).with_name("ansible-galaxy")
    subprocess.run([str(galaxy), "collection", "build", str(REPO), "--output-path", str(out)],
                   check=True, capture_output=True, text=True)  # fmt: skip
    (artifact,) = out.glob("disagg-sglang-*.tar.gz")
    with tarfile.open(artifact) as tar:
        return tar.getnames()


def readme_paths(text):
    """Repository paths the README names in backticks. Left aside: host paths, URLs, bare extensions (`.yml`),
    placeholders (`<cluster>`, `NAME`) and paths in the user's own project, which the README writes as ./PATH."""
    for token in re.findall(r"`([^`\s]+)`", text):
        if token.startswith(("/", "./", "http", "-")) or "<" in token or re.fullmatch(r"\.\w+", token):
            continue
        if any(part.isupper() and part not in ROOT_FILES for part in re.split(r"[/.]", token)):
            continue
        if "/" in token or re.search(r"\.(ya?ml|py|j2|md|sh)$", token):
            yield token.rstrip("/")


def shipped(path, names):
    """Whether the artifact has path, as a file or folder, at its top or below (`wait.yml` in a role)."""
    return any(n == path or n.startswith(path + "/") or n.endswith("/" + path) or f"/{path}/" in f"/{n}"
               for n in names)  # fmt: skip


def test_build_leaves_out_tests_and_the_sandbox(artifact_names):
    names = artifact_names
    tops = {name.split("/")[0] for name in names}
    assert {"roles", "plugins", "playbooks", "profiles", "site.yml", "meta", "inventories"} <= tops
    leaked = [n for n in names if n.split("/")[0] in {"tests", "molecule", ".ci", "scripts", ".venv", ".cache"}
              or n.startswith("inventories/sandbox") or "pdsim" in n]  # fmt: skip
    assert leaked == [], leaked
    assert "roles/sglang/templates/sglang.service.j2" in names
    assert "plugins/modules/gpu_topology.py" in names
    assert "LICENSE" in names


def test_readme_names_only_shipped_paths_or_says_they_are_left_out(artifact_names):
    """The README travels in the artifact: a path it names is in the artifact, or it is one that galaxy.yml
    leaves out on purpose and the user section says so."""
    readme = (REPO / "README.md").read_text()
    ignored = [entry.rstrip("/") for entry in yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]]
    user_section = readme.split(USER_SECTION, 1)[1]
    missing = sorted({path for path in readme_paths(readme) if not shipped(path, artifact_names)})
    unexplained = [
        path
        for path in missing
        if not any(path == entry or path.startswith(entry + "/") for entry in ignored)
        or not any(f"`{entry}" in user_section for entry in ignored if path == entry or path.startswith(entry + "/"))
    ]
    assert missing, "the README names the test bed; this test expects to see it left out"
    assert unexplained == [], f"README.md names paths the artifact lacks and does not say why: {unexplained}"
