"""Run simulators as subprocesses on loopback for tests (tests/sandbox/pdsim/tests/test_pdsim_*.py). Not part of the
wheel.

Every wait is bounded; every process started is stopped by `SimPool.close()` (SIGKILL after a grace).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PDSIM_SRC = Path(__file__).resolve().parent
REPO = PDSIM_SRC.parents[2]
if str(PDSIM_SRC) not in sys.path:
    sys.path.insert(0, str(PDSIM_SRC))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# requests to the simulators go through the tests' one client, never through a proxy named in the environment
from tests.http_client import free_port, http, without_proxies  # noqa: E402
from tests.sandbox.fakegpu import render_model  # noqa: E402


def tiny_model(path: Path) -> Path:
    """A model directory sglang can load, the one the sandbox hosts get (tests/sandbox/fakegpu.py render_model:
    config.json, a tokenizer, model.safetensors.index.json and the two tiny shards it names), for a simulator a test
    starts: the double checks its --model-path at start-up as sglang does (sglang_pd_sim/model_dir.py)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        render_model(path)
    return path


class Sim:
    def __init__(self, popen: subprocess.Popen, port: int, bootstrap: int | None, log_path: Path):
        self.popen = popen
        self.port = port
        self.bootstrap = bootstrap
        self.log_path = log_path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_healthy(self, timeout: float = 10.0) -> None:
        """Until /ready answers 200 (server status Up): as quick as /health is slow (a generation, about 1 s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"simulator exited {self.popen.returncode}:\n{self.log()[-2000:]}")
            try:
                if http("GET", self.url("/ready"), timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"simulator not healthy after {timeout}s:\n{self.log()[-2000:]}")

    def metrics_text(self) -> str:
        status, text = http("GET", self.url("/metrics"))
        if status != 200:
            raise AssertionError(f"/metrics answered {status}: {text!r}")
        return text


class SimPool:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.sims: list[Sim] = []

    def start(
        self,
        role: str = "null",
        *extra: str,
        env: dict | None = None,
        healthy: bool = True,
        python: str | None = None,
        src: Path | None = None,
    ) -> Sim:
        """A simulator on loopback; PYTHON runs it instead of this interpreter (e.g. one with nixl installed);
        SRC is a simulator tree to run instead of this one (e.g. a copy rewritten to another release)."""
        port = free_port()
        model = tiny_model(self.tmp_path / "model")
        argv = [python or sys.executable, "-m", "sglang_pd_sim", "serve", "--model-path", str(model),
                "--served-model-name", "sim", "--host", "127.0.0.1", "--port", str(port),
                "--disaggregation-mode", role]  # fmt: skip
        bootstrap = None
        if role == "prefill":
            bootstrap = free_port()
            argv += ["--disaggregation-bootstrap-port", str(bootstrap)]
        full_env = {k: v for k, v in without_proxies().items() if not k.startswith(("SGLANG_SIM_", "SGL_"))}
        full_env.update(env or {})
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src or PDSIM_SRC), full_env.get("PYTHONPATH")]))
        log_path = self.tmp_path / f"sim-{role}-{port}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen([*argv, *extra], stdout=log, stderr=subprocess.STDOUT, env=full_env)
        sim = Sim(popen, port, bootstrap, log_path)
        self.sims.append(sim)
        if healthy:
            sim.wait_healthy()
        return sim

    def close(self) -> None:
        for sim in self.sims:
            if sim.popen.poll() is None:
                sim.popen.send_signal(signal.SIGINT)  # SIGINT stops at once; SIGTERM would drain
                try:
                    sim.popen.wait(5)
                except subprocess.TimeoutExpired:
                    sim.popen.kill()
                    sim.popen.wait(5)
