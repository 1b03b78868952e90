"""The PD worker simulator (tests/sandbox/pdsim) on its own and behind the real sglang-router 0.3.2.

Everything listens on 127.0.0.1 ports picked at run time; every process is stopped by its fixture, every
wait is bounded. Timings are printed (router ready time, request latency).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import openai
import pytest
import sglang_router
import yaml

ROUTER_VERSION = sglang_router.__version__  # the real router's package: missing, the module fails (never skipped)
PDSIM_SRC = Path(__file__).resolve().parents[1] / "sandbox" / "pdsim"
if str(PDSIM_SRC) not in sys.path:
    sys.path.insert(0, str(PDSIM_SRC))

from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf  # noqa: E402
from pdsim_testing import tiny_model  # noqa: E402
from sglang_pd_sim import cli as sim_cli  # noqa: E402

SGLANG_PARSER = Path(__file__).resolve().parents[1] / "sglang_parser"
if str(SGLANG_PARSER) not in sys.path:
    sys.path.insert(0, str(SGLANG_PARSER))
import real_parser_client  # noqa: E402 (builds the SMG venv: tests/sglang_parser/build_venv.sh smg)

# loopback only: never through a proxy named in the environment (the router's HTTP client honours them too)
from tests.http_client import DIRECT, free_port, http, stream, without_proxies  # noqa: E402

MODEL = "/models/DeepSeek-V4-Flash"

# The DeepSeek-V4-Flash sm_120 deployment, as the collection renders it (TP4 + TP4, marlin, NIXL).
DSV4_COMMON = [
    "--model-path", MODEL, "--tp-size", "4", "--page-size", "256", "--kv-cache-dtype", "fp8_e4m3",
    "--attention-backend", "dsv4", "--moe-runner-backend", "marlin", "--context-length", "8192",
    "--mem-fraction-static", "0.70", "--disaggregation-transfer-backend", "nixl",
    "--disaggregation-bootstrap-port", "8998", "--dist-init-addr", "127.0.0.1:30335",
    "--host", "127.0.0.1", "--enable-metrics", "--trust-remote-code",
]  # fmt: skip
DSV4_PREFILL = [
    *DSV4_COMMON, "--disaggregation-mode", "prefill", "--chunked-prefill-size", "8192",
    "--cuda-graph-backend-prefill", "disabled", "--port", "30000",
]  # fmt: skip
DSV4_DECODE = [
    *DSV4_COMMON, "--disaggregation-mode", "decode", "--cuda-graph-max-bs-decode", "64", "--port", "30001",
]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def wait_until(probe, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Call probe() until it returns a truthy value; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            last = probe()
            if last:
                return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def status_of(url: str) -> int:
    try:
        with DIRECT.open(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def report(capsys, text: str) -> None:
    with capsys.disabled():
        print(f"\n    [timing] {text}", end="")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path
    ports: dict = field(default_factory=dict)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 5.0) -> int | None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
        return self.popen.returncode


class Launcher:
    """Starts simulators and routers as subprocesses and stops all of them at teardown."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[Proc] = []
        # a directory sglang can load: the double checks it at start-up (sglang_pd_sim/model_dir.py)
        self.model = str(tiny_model(tmp_path / "DeepSeek-V4-Flash"))

    def _spawn(self, name: str, argv: list[str], env: dict | None = None, **ports) -> Proc:
        log_path = self.tmp_path / f"{name}.log"
        full_env = without_proxies()
        full_env.update(env or {}, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PDSIM_SRC), full_env.get("PYTHONPATH")]))
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=self.tmp_path)
        proc = Proc(name, popen, log_path, ports)
        self.procs.append(proc)
        return proc

    def sim(self, role: str, *extra: str, env: dict | None = None, name: str | None = None) -> Proc:
        port = free_port()
        argv = [sys.executable, "-m", "sglang_pd_sim", "serve", "--model-path", self.model, "--host",
                "127.0.0.1", "--port", str(port), "--disaggregation-mode", role, "--page-size", "256",
                "--disaggregation-transfer-backend", "nixl", "--enable-metrics"]  # fmt: skip
        ports = {"port": port}
        # An instant engine (no weight load, no warm-up: the double's default), unlike the sandbox hosts' engines
        # (tests/sandbox/engine_timing.py): these loopback tests are of the routers and the double; no run of the
        # collection waits on them (the load and warm-up themselves: test_sim_health_503_while_loading_then_200).
        # teardown's SIGTERM: a short watchdog period (sglang: 5 s) and a scheduler that exits at once after the drain
        # (sglang: up to 15 s, the double's default): these tests are of the routers and time no engine shutdown
        # (tests/sandbox/pdsim/tests/test_pdsim_drain.py does)
        env = {"SGLANG_SIM_DRAIN_POLL": "0.1", "SGLANG_SIM_SCHEDULER_EXIT": "0", **(env or {})}
        if role == "prefill":
            ports["bootstrap"] = free_port()
            argv += ["--disaggregation-bootstrap-port", str(ports["bootstrap"])]
        return self._spawn(name or f"sim-{role}-{port}", [*argv, *extra], env, **ports)

    def router(self, prefill: Proc | list, decode: Proc | list, *extra: str, python: str | None = None) -> Proc:
        """sglang-router 0.3.2 (this venv's); with PYTHON, that interpreter's smg.launch_router (SMG 1.13, which
        takes the same flags). PREFILL and DECODE: one worker or a list."""
        port, prom = free_port(), free_port()
        program = (
            [python, "-m", "smg.launch_router"] if python else [sys.executable, "-m", "sglang_router.launch_router"]
        )
        workers = []
        for p in prefill if isinstance(prefill, list) else [prefill]:
            workers += ["--prefill", f"http://127.0.0.1:{p.ports['port']}", str(p.ports["bootstrap"])]
        for d in decode if isinstance(decode, list) else [decode]:
            workers += ["--decode", f"http://127.0.0.1:{d.ports['port']}"]
        argv = [
            *program, "--pd-disaggregation", *workers,
            "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom),
            "--prefill-policy", "round_robin", "--decode-policy", "round_robin",
            # fast and offline: check workers every second, no hub download for a tokenizer
            "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
            "--health-check-timeout-secs", "2", "--worker-startup-timeout-secs", "60",
            "--request-timeout-secs", "30", "--log-level", "warn",
            *extra,
        ]  # fmt: skip
        return self._spawn(f"router-{port}", argv, port=port, prometheus=prom)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def dump_logs(self) -> str:
        return "\n".join(f"--- {p.name} (rc={p.popen.poll()}) ---\n{p.log_tail()}" for p in self.procs)


@pytest.fixture
def pd_launcher(tmp_path) -> Iterator[Launcher]:
    """Simulators and routers for one test; all stopped at teardown. Their logs show when a test fails."""
    launcher = Launcher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.stop_all()
        sys.stderr.write(launcher.dump_logs() + "\n")  # captured: pytest prints it for failed tests only


def url(proc: Proc, path: str, which: str = "port") -> str:
    return f"http://127.0.0.1:{proc.ports[which]}{path}"


def wait_sim_healthy(proc: Proc, timeout: float = 15.0) -> None:
    def probe():
        if proc.popen.poll() is not None:
            pytest.fail(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log_tail()}")
        return status_of(url(proc, "/health")) == 200

    wait_until(probe, timeout, what=f"{proc.name} /health 200")


def wait_router_ready(router: Proc, healthy: int = 2, timeout: float = 30.0) -> float:
    t0 = time.monotonic()

    def probe():
        if router.popen.poll() is not None:
            pytest.fail(f"router exited with {router.popen.returncode}:\n{router.log_tail()}")
        status, body = http("GET", url(router, "/readiness"), timeout=2)
        return status == 200 and isinstance(body, dict) and body.get("healthy_workers") == healthy

    wait_until(probe, timeout, interval=0.1, what="router /readiness 200")
    return time.monotonic() - t0


def sim_requests(proc: Proc, path: str) -> list[dict]:
    status, body = http("GET", url(proc, f"/sim/requests?path={path}"))
    assert status == 200
    return body


def rooms(records: list[dict]) -> set:
    return {r["bootstrap_room"] for r in records if r["bootstrap_room"] is not None}


# --------------------------------------------------------------------------------------------------
# the simulator's command line (in process: the parser the package builds from the 0.5.23 flag table)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [DSV4_PREFILL, DSV4_DECODE], ids=["prefill", "decode"])
def test_sim_parser_accepts_dsv4_flash_pd_command_lines(argv):
    args = sim_cli.parse_args(["serve", *argv])
    assert args.model_path == MODEL
    assert args.tp_size == 4 and args.page_size == 256 and args.context_length == 8192
    assert args.kv_cache_dtype == "fp8_e4m3" and args.attention_backend == "dsv4"
    assert args.moe_runner_backend == "marlin" and args.mem_fraction_static == pytest.approx(0.70)
    assert args.disaggregation_transfer_backend == "nixl" and args.disaggregation_bootstrap_port == 8998
    assert args.dist_init_addr == "127.0.0.1:30335" and args.host == "127.0.0.1"
    assert args.enable_metrics is True and args.trust_remote_code is True
    if "prefill" in argv:
        assert args.disaggregation_mode == "prefill" and args.port == 30000
        assert args.chunked_prefill_size == 8192 and args.cuda_graph_backend_prefill == "disabled"
    else:
        assert args.disaggregation_mode == "decode" and args.port == 30001
        assert args.cuda_graph_max_bs_decode == 64
    # untouched flags keep sglang 0.5.23's defaults
    assert args.dp_size == 1 and args.disaggregation_decode_allocation_policy == "early"


def test_sim_parser_argparse_details():
    args = sim_cli.parse_args(
        ["--model", MODEL, "--tp", "2", "--context-length", "8Ki", "--cuda-graph-bs-decode", "1", "2", "4",
         "--no-dllm-fdfo", "--log-requests-level", "3"]
    )  # fmt: skip
    assert args.tp_size == 2  # prefix of --tp-size
    assert args.context_length == 8192  # human_readable_int: Ki is binary (IEC), as sglang 0.5.23
    assert args.cuda_graph_bs_decode == [1, 2, 4]  # a list flag
    assert args.dllm_fdfo is False  # BooleanOptionalAction
    assert args.log_requests_level == 3  # int choices


def test_sim_parser_config_file(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "model-path: /m\ntp_size: 2\nenable-metrics: true  # a comment\ntrust-remote-code: false\n"
        "cuda-graph-bs-decode:\n  - 1\n  - 8\n"
    )
    args = sim_cli.parse_args(["--config", str(cfg), "--tp-size", "4"])
    assert args.model_path == "/m" and args.tp_size == 4  # the command line wins over the file
    assert args.enable_metrics is True and args.trust_remote_code is False
    assert args.cuda_graph_bs_decode == [1, 8]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--no-such-flag", "1"], "unrecognized arguments: --no-such-flag 1"),
        (["--cuda-graph-max-bs", "64"], "ambiguous option: --cuda-graph-max-bs could match"),
        (["--disaggregation-mode", "prefil"], "argument --disaggregation-mode: invalid choice: 'prefil'"),
        (["--kv-cache-dtype", "fp8"], "argument --kv-cache-dtype: invalid choice: 'fp8'"),
        (["--tp-size", "four"], "argument --tp-size/--tensor-parallel-size: invalid int value: 'four'"),
    ],
    ids=["unknown", "ambiguous", "choice", "choice-dtype", "type"],
)
def test_sim_parser_rejects_like_sglang(capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        sim_cli.parse_args(["--model-path", MODEL, *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    if "ambiguous" in message:
        assert "--cuda-graph-max-bs-decode" in err and "--cuda-graph-max-bs-prefill" in err


def test_sim_parser_requires_model_path(capsys):
    with pytest.raises(SystemExit) as exc:
        sim_cli.parse_args(["--port", "30000"])
    assert exc.value.code == 2
    assert "the following arguments are required: --model-path" in capsys.readouterr().err


def test_sim_cli_exit_codes_and_help():
    env = {**os.environ, "PYTHONPATH": str(PDSIM_SRC)}
    run = [sys.executable, "-m", "sglang_pd_sim"]
    bad = subprocess.run([*run, "serve", "--model-path", MODEL, "--cuda-graph-max-bs", "8"],
                         capture_output=True, text=True, env=env, timeout=30, check=False)  # fmt: skip
    assert bad.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in bad.stderr
    unknown = subprocess.run([*run, "--model-path", MODEL, "--bogus"],
                             capture_output=True, text=True, env=env, timeout=30, check=False)  # fmt: skip
    assert unknown.returncode == 2 and "unrecognized arguments: --bogus" in unknown.stderr
    helped = subprocess.run([*run, "--help"], capture_output=True, text=True, env=env, timeout=30, check=False)
    assert helped.returncode == 0
    assert "--disaggregation-bootstrap-port" in helped.stdout and "SGLANG_SIM_STARTUP_DELAY" in helped.stdout


def test_sim_knobs_from_environment():
    knobs = sim_cli.load_knobs(
        {"SGLANG_SIM_STARTUP_DELAY": "2.5", "SGLANG_SIM_FAIL": "generate:503, health:500,crash-after:3,bogus",
         "SGLANG_SIM_HANDOFF_TIMEOUT": "x"}
    )  # fmt: skip
    assert knobs.startup_delay == 2.5 and knobs.fail_generate == 503 and knobs.fail_health == 500
    assert knobs.crash_after == 3 and knobs.handoff_timeout == 300.0  # sglang WAITING_TIMEOUT
    assert any("bogus" in p for p in knobs.problems) and any("SGLANG_SIM_HANDOFF_TIMEOUT" in p for p in knobs.problems)


# --------------------------------------------------------------------------------------------------
# simulator processes on their own
# --------------------------------------------------------------------------------------------------


def test_sim_health_503_while_loading_then_200(pd_launcher, capsys):
    sim = pd_launcher.sim("prefill", env={"SGLANG_SIM_STARTUP_DELAY": "1.5", "SGLANG_SIM_WARMUP_DELAY": "1"})
    t0 = time.monotonic()
    wait_until(lambda: status_of(url(sim, "/health", "bootstrap")) == 200, 10, what="the bootstrap server")
    with pytest.raises(OSError):  # as sglang: the HTTP port listens only once the weights are loaded
        status_of(url(sim, "/health"))
    first = wait_until(lambda: status_of(url(sim, "/health")), 10, what="the simulator to listen")
    assert first == 503, "health must be 503 during the warm-up (ServerStatus.Starting)"
    wait_sim_healthy(sim)
    elapsed = time.monotonic() - t0
    assert elapsed >= 2.2
    report(capsys, f"health 503 -> 200 after {elapsed:.2f}s (SGLANG_SIM_STARTUP_DELAY=1.5, WARMUP_DELAY=1)")
    status, info = http("GET", url(sim, "/server_info"))
    assert status == 200 and info["disaggregation_mode"] == "prefill" and info["version"] == "0.5.23"
    assert info["disaggregation_bootstrap_port"] == sim.ports["bootstrap"] and info["tp_size"] == 1
    assert info["served_model_name"] == pd_launcher.model and isinstance(info["internal_states"], list)
    status, model_info = http("GET", url(sim, "/get_model_info"))
    assert status == 200 and model_info["architectures"] == ["DeepseekV4ForCausalLM"]
    status, metrics = http("GET", url(sim, "/metrics"))
    assert status == 200 and "sglang:num_running_reqs" in metrics


def test_decode_fails_request_for_room_prefill_never_saw(pd_launcher, capsys):
    prefill = pd_launcher.sim("prefill")
    decode = pd_launcher.sim("decode", env={"SGLANG_SIM_HANDOFF_TIMEOUT": "0.6"})
    wait_sim_healthy(prefill)
    wait_sim_healthy(decode)
    room = 4242424242
    body = {"text": "who answers?", "sampling_params": {"max_new_tokens": 4}, "bootstrap_host": "127.0.0.1",
            "bootstrap_port": prefill.ports["bootstrap"], "bootstrap_room": room}  # fmt: skip
    t0 = time.monotonic()
    status, err = http("POST", url(decode, "/generate"), body)
    waited = time.monotonic() - t0
    assert status == 500
    assert f"KVTransferError(bootstrap_room={room})" in err["error"]["message"]
    assert "prefill has not seen this bootstrap_room" in err["error"]["message"]
    assert 0.5 <= waited < 5
    report(capsys, f"decode failed the unknown room after {waited:.2f}s (SGLANG_SIM_HANDOFF_TIMEOUT=0.6)")
    assert rooms(sim_requests(prefill, "/generate")) == set()
    [record] = sim_requests(decode, "/generate")
    assert record["bootstrap_room"] == room and record["status"] == 500

    # the same room on both roles at once (as the router sends them) goes through: the prefill waits for the
    # decode to connect for the room before it computes and sends the KV (sglang's bootstrap queue)
    with ThreadPoolExecutor(2) as pool:
        on_prefill = pool.submit(http, "POST", url(prefill, "/generate"), body)
        status, out = http("POST", url(decode, "/generate"), body)
        assert status == 200 and out["meta_info"]["completion_tokens"] == 4
        status, out = on_prefill.result(10)
        assert status == 200 and out["meta_info"]["completion_tokens"] == 1
    # and a decode whose page size differs from the prefill's refuses the KV
    odd = pd_launcher.sim("decode", "--page-size", "64", env={"SGLANG_SIM_HANDOFF_TIMEOUT": "0.6"})
    wait_sim_healthy(odd)
    status, err = http("POST", url(odd, "/generate"), body)
    assert status == 500 and "page_size mismatch" in err["error"]["message"]


def test_sim_api_key_and_sigterm(pd_launcher, capsys):
    sim = pd_launcher.sim("decode", "--api-key", "sekret", "--served-model-name", "dsv4-flash")
    wait_sim_healthy(sim)  # /health stays open
    assert http("GET", url(sim, "/v1/models"))[0] == 401
    status, models = http("GET", url(sim, "/v1/models"), headers={"Authorization": "Bearer sekret"})
    assert status == 200 and models["data"][0]["id"] == "dsv4-flash"
    t0 = time.monotonic()
    sim.popen.send_signal(signal.SIGTERM)
    rc = sim.popen.wait(10)
    took = time.monotonic() - t0
    assert rc == 0 and took < 3
    report(capsys, f"SIGTERM -> exit 0 in {took:.2f}s")
    assert "Received SIGTERM" in sim.log_tail()


def test_sim_failure_injection(pd_launcher):
    sick = pd_launcher.sim("decode", env={"SGLANG_SIM_FAIL": "health:503,generate:503"})
    wait_until(lambda: status_of(url(sick, "/server_info")) == 200, 10, what="sick simulator up")
    assert status_of(url(sick, "/health")) == 503
    status, body = http("POST", url(sick, "/v1/completions"), {"prompt": "x", "bootstrap_room": 1})
    assert status == 503 and body["object"] == "error" and body["code"] == 503

    fragile = pd_launcher.sim("null", env={"SGLANG_SIM_FAIL": "crash-after:2"})
    wait_sim_healthy(fragile)
    for _attempt in range(2):
        assert (
            http("POST", url(fragile, "/generate"), {"text": "x", "sampling_params": {"max_new_tokens": 1}})[0] == 200
        )
    assert fragile.popen.wait(10) == 1  # a crash, not a clean stop
    assert "crash-after:2 reached" in fragile.log_tail()


# --------------------------------------------------------------------------------------------------
# behind the real router
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def pd_stack(pd_launcher, capsys):
    # a prefill waits for its decode to connect for the room (sglang's bootstrap queue) up to sglang's own
    # SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (300 s): short here, for the decode-is-down case
    prefill = pd_launcher.sim("prefill", env={"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "1"})
    decode = pd_launcher.sim("decode", env={"SGLANG_SIM_HANDOFF_TIMEOUT": "5"})
    wait_sim_healthy(prefill)
    wait_sim_healthy(decode)
    # a decode that looks healthy to the router until it is gone (no health verdict races the test)
    router = pd_launcher.router(prefill, decode, "--health-failure-threshold", "100")
    ready = wait_router_ready(router)
    report(capsys, f"router /readiness 200 with 2 healthy workers after {ready:.2f}s")
    return prefill, decode, router


def test_router_pd_generate_and_stream_reach_decode_with_one_bootstrap_room(pd_stack, capsys):
    prefill, decode, router = pd_stack
    status, workers = http("GET", url(router, "/workers"))
    assert status == 200
    types = {w["worker_type"]: w for w in workers["workers"]}
    assert types["prefill"]["bootstrap_port"] == prefill.ports["bootstrap"] and types["decode"]["is_healthy"]

    t0 = time.monotonic()
    status, out = http("POST", url(router, "/generate"),
                       {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}})  # fmt: skip
    gen_latency = time.monotonic() - t0
    assert status == 200, out
    assert out["meta_info"]["completion_tokens"] == 8 and len(out["output_ids"]) == 8  # decode's answer
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 8}
    [p_rec] = sim_requests(prefill, "/generate")
    [d_rec] = sim_requests(decode, "/generate")
    assert p_rec["bootstrap_room"] == d_rec["bootstrap_room"] and p_rec["bootstrap_room"] is not None
    assert p_rec["status"] == d_rec["status"] == 200

    t0 = time.monotonic()
    chat = {"model": "dsv4", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 5, "stream": True}
    events, first_chunk = [], None
    with stream("POST", url(router, "/v1/chat/completions"), chat, timeout=20) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            first_chunk = first_chunk or time.monotonic() - t0
            payload = line[len("data:") :].strip()
            if payload == "[DONE]":
                events.append(payload)
                break
            events.append(json.loads(payload))
    stream_latency = time.monotonic() - t0
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["object"] == "chat.completion.chunk"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert len(content.split()) == 5 and chunks[-1]["choices"][0]["finish_reason"] == "length"
    [p_chat] = sim_requests(prefill, "/v1/chat/completions")
    [d_chat] = sim_requests(decode, "/v1/chat/completions")
    assert p_chat["bootstrap_room"] is not None
    assert p_chat["bootstrap_room"] == d_chat["bootstrap_room"]
    assert p_chat["bootstrap_room"] != p_rec["bootstrap_room"]  # a new room per request
    status, comp = http("POST", url(router, "/v1/completions"), {"model": "dsv4", "prompt": "1 2 3", "max_tokens": 3})
    assert status == 200 and comp["object"] == "text_completion" and comp["usage"]["completion_tokens"] == 3
    assert rooms(sim_requests(prefill, "/v1/completions")) == rooms(sim_requests(decode, "/v1/completions"))
    report(capsys, f"/generate via router {1000 * gen_latency:.1f} ms; streaming chat first chunk "
                   f"{1000 * first_chunk:.1f} ms, done {1000 * stream_latency:.1f} ms")  # fmt: skip


def test_router_answers_502_when_decode_is_down(pd_stack, capsys):
    prefill, decode, router = pd_stack
    status = http("POST", url(router, "/generate"), {"text": "warm up", "sampling_params": {"max_new_tokens": 2}})[0]
    assert status == 200
    before = len(sim_requests(prefill, "/generate"))
    decode.popen.kill()  # no goodbye: the process is simply gone
    decode.popen.wait(5)
    t0 = time.monotonic()
    status, body = http(
        "POST", url(router, "/generate"), {"text": "anyone?", "sampling_params": {"max_new_tokens": 2}}, timeout=30
    )  # the router waits for each attempt's prefill half (its bootstrap timeout)
    took = time.monotonic() - t0
    assert status == 502, body
    assert "decode" in json.dumps(body).lower()
    report(capsys, f"router 502 {1000 * took:.0f} ms after decode was killed")
    # the prefill half went out, once per router attempt, each with a fresh room that no decode answered
    attempts = sim_requests(prefill, "/generate")[before:]
    assert len(attempts) >= 1 and len(rooms(attempts)) == len(attempts)
    report(capsys, f"prefill saw {len(attempts)} attempt(s) for the failed request")


# n: 2 through each router with the role's settings, measured (see the test below): the router's attempts, each of
# which waits out the decode's KV wait (sglang: SGLANG_DISAGGREGATION_WAITING_TIMEOUT, sglang_disagg_waiting_timeout,
# 300 s). Without HAProxy in front, n: 2 ends after attempts x that wait; behind HAProxy (sglang_router_instances) it
# is refused at once (plugins/module_utils/router/lb.py REFUSE_N_LINE, tests/integration/test_routers.py).
N2_ATTEMPTS = {"sglang_router": 5, "smg": 5}


@pytest.mark.parametrize("router_impl", ["sglang_router", "smg"])
def test_n2_through_each_router_ends_after_its_attempts_of_the_kv_wait(router_impl, pd_launcher, request, capsys,
                                                                       monkeypatch):  # fmt: skip
    """n=2 through the real router (the role's settings) with the real OpenAI client: the router sends one
    bootstrap_room per sample (and host/port lists); sglang 0.5.23 sends the warmup and both samples with
    bootstrap_room[0] (io_struct.py _normalize_bootstrap_params, tokenizer_manager.py _handle_batch_request), the
    samples never get KV and the decode answers HTTP 500 (a KVTransferError) once its wait (2 s here) ends. The
    router tries N2_ATTEMPTS times, each a full wait: the client's answer comes after attempts x the wait."""
    wait_kv = 2.0
    env = {"SGLANG_SIM_HANDOFF_TIMEOUT": str(wait_kv)}
    prefill = pd_launcher.sim("prefill", "--served-model-name", "dsv4", env=env)  # SMG routes by the model's name
    decode = pd_launcher.sim("decode", "--served-model-name", "dsv4", env=env)
    wait_sim_healthy(prefill)
    wait_sim_healthy(decode)
    python = request.getfixturevalue("smg_python") if router_impl == "smg" else None
    router = pd_launcher.router(prefill, decode, *role_flags(router_impl), python=python)
    wait_router_ready(router, timeout=60)
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # the client honours proxy variables: loopback only
    client = openai.OpenAI(base_url=url(router, "/v1"), api_key="none", max_retries=0, timeout=120)
    t0 = time.monotonic()
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "hi"}], n=2, max_tokens=4)
    took = time.monotonic() - t0
    records = sim_requests(decode, "/v1/chat/completions")
    report(capsys, f"{router_impl}: n=2 HTTP {exc.value.status_code} after {took:.1f} s, {len(records)} attempt(s) "
                   f"of the {wait_kv} s KV wait; {str(exc.value)[:200]}")  # fmt: skip
    assert exc.value.status_code == 500 and "KVTransferError" in str(exc.value)
    assert records and all(r["status"] == 500 for r in records)
    assert len(records) == N2_ATTEMPTS[router_impl], records
    assert len(records) * wait_kv <= took < len(records) * (wait_kv + 1.5), took
    for record in records:  # what the router sent: one room per sample
        assert isinstance(record["bootstrap_room"], list) and len(record["bootstrap_room"]) == 2
    # the prefill only ever saw each attempt's first room, as sglang uses only bootstrap_room[0]
    status, kv = http("GET", url(prefill, "/sim/kv", "bootstrap"))
    assert status == 200
    assert {e["bootstrap_room"] for e in kv} == {r["bootstrap_room"][0] for r in records}
    # the same request with n=1 is served
    out = client.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert len(out.choices) == 1 and out.usage.completion_tokens == 4


BENCH_FILES = Path(__file__).resolve().parents[2] / "roles" / "sglang_bench" / "files"


def accuracy_run(router: Proc, prefill: Proc, run_dir: Path, gate: dict, baseline: str = "none") -> tuple[int, str]:
    """The accuracy step's runner (roles/sglang_bench/files/accuracy_step.py) through the router, then the
    controller's build: (exit status, what it printed)."""
    settings = {"url": url(router, ""), "endpoint": "completions", "model": "dsv4", "dataset": "gsm8k-test",
                "questions": 40, "shots": 3, "max_tokens": 256, "temperature": 0.0, "concurrency": 8,
                "request_timeout": 30, "deadline": 60}  # fmt: skip
    (run_dir / "raw").mkdir(parents=True)
    env = without_proxies()
    env["PYTHONPATH"] = str(BENCH_FILES)
    for number, first in enumerate((0, 20), start=1):
        config = run_dir / f"step-{number}.json"
        config.write_text(json.dumps({**settings, "first": first, "count": 20,
                                      "metrics_urls": {"h/prefill0": url(prefill, "/metrics")},
                                      "metric_names": ["sglang:kv_transfer_total_mb_count"]}))  # fmt: skip
        out = subprocess.run([sys.executable, str(BENCH_FILES / "accuracy_step.py"), str(config)], env=env,
                             capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
        (run_dir / "raw" / f"step-{number:03d}.out.json").write_text(out.stdout)
    meta = {"inventory": "loopback", "profile": "-", "collection_root": str(BENCH_FILES.parents[2]),
            "settings": settings, "gate": gate,
            "hosts": {"h": {"server_info": {"decode0": {"simulator": True}}}}}  # fmt: skip
    (run_dir / "meta.json").write_text(json.dumps(meta))
    build = subprocess.run(
        [sys.executable, str(BENCH_FILES / "accuracy.py"), "build", str(run_dir), "--meta", str(run_dir / "meta.json"),
         "--baseline", baseline],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return build.returncode, build.stdout + build.stderr


def test_accuracy_step_through_the_real_router_scores_the_answer_mode(pd_launcher, tmp_path, capsys):
    """GSM8K few-shot through the real router to a decode in the simulator's answer mode: all right passes the
    gate with the KV transfers counted on the prefill; the same decode with a 50 % error rate fails it, against
    the floor and against the first run as the baseline."""
    gate = {"metric": "flexible", "floor": 0.9, "max_drop": 0.05, "max_failed_share": 0.02}
    prefill = pd_launcher.sim("prefill")
    decode = pd_launcher.sim("decode", env={"SGLANG_SIM_ANSWERS": "gsm8k"}, name="decode-right")
    wait_sim_healthy(prefill)
    wait_sim_healthy(decode)
    router = pd_launcher.router(prefill, decode)
    wait_router_ready(router)
    rc, printed = accuracy_run(router, prefill, tmp_path / "r1", gate)
    assert rc == 0, printed
    report(capsys, printed)
    good = json.loads((tmp_path / "r1" / "accuracy.json").read_text())
    assert good["simulated"] is True and good["verdict"]["passed"] is True
    assert good["summary"]["questions"] == 40 and good["summary"]["flexible"] == 1.0
    assert good["verdict"]["kv_transfers"] >= 40  # one transfer per question, counted by the prefill
    assert "accuracy gate PASSED" in printed and "(SIMULATED)" in (tmp_path / "r1" / "accuracy.md").read_text()

    decode.stop()
    worse = pd_launcher.sim("decode", env={"SGLANG_SIM_ANSWERS": "gsm8k", "SGLANG_SIM_ANSWER_ERROR_RATE": "0.5"},
                            name="decode-wrong")  # fmt: skip
    wait_sim_healthy(worse)
    router.stop()
    router = pd_launcher.router(prefill, worse)
    wait_router_ready(router)
    rc, printed = accuracy_run(router, prefill, tmp_path / "r2", gate, baseline=str(tmp_path / "r1"))
    assert rc == 3, printed
    report(capsys, printed)
    bad = json.loads((tmp_path / "r2" / "accuracy.json").read_text())
    reasons = " | ".join(bad["verdict"]["reasons"])
    assert "below the floor" in reasons and f"below the baseline {good['id']}" in reasons, reasons
    wrong = 40 - bad["summary"]["flexible_correct"]
    assert 8 <= wrong <= 32 and len(bad["failures"]) == wrong  # every wrong answer is in the report
    assert all(f["reference"] != f["flexible"] for f in bad["failures"])


# --------------------------------------------------------------------------------------------------
# every API route through both routers, with the real OpenAI Python client (issue 37 item 6)
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smg_python():
    """SMG 1.13's python (its own venv: it ships an `smg` command as sglang-router does). Never skipped."""
    try:
        python, _seconds = real_parser_client.ensure_venv(program="smg")
    except real_parser_client.ParserUnavailable as exc:
        pytest.fail(f"the SMG venv could not be built: {exc}", pytrace=False)
    return str(python)


def words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("router_impl", ["sglang_router", "smg"])
def test_openai_client_gets_an_answer_on_every_route_through_each_router(router_impl, pd_launcher, request, capsys,
                                                                         monkeypatch):  # fmt: skip
    """The real OpenAI client through the real router in front of a 1P1D pair of the double: /v1/models names the
    served model (SMG routes by it), /generate, /v1/completions and /v1/chat/completions answer the tokens asked
    for, streamed or not, with usage (stream_options.include_usage) and stop strings (finish_reason "stop",
    matched_stop passed through), each a PD pair of one room; n: 2 fails as sglang 0.5.23's PD path does (HTTP 500
    once the router's attempts are spent, none answered) and leaves the router serving."""
    env = {"SGLANG_SIM_HANDOFF_TIMEOUT": "1"}  # n: 2's samples wait this long for KV (sglang: 300 s)
    prefill = pd_launcher.sim("prefill", "--served-model-name", "dsv4", env=env)
    decode = pd_launcher.sim("decode", "--served-model-name", "dsv4", env=env)
    wait_sim_healthy(prefill)
    wait_sim_healthy(decode)
    python = request.getfixturevalue("smg_python") if router_impl == "smg" else None
    router = pd_launcher.router(prefill, decode, "--health-failure-threshold", "100", python=python)
    wait_router_ready(router, timeout=60)
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # the client honours proxy variables: loopback only
    client = openai.OpenAI(base_url=url(router, "/v1"), api_key="none", max_retries=0, timeout=30)

    [model] = [m.id for m in client.models.list().data]
    assert model == "dsv4"

    status, gen = http(
        "POST", url(router, "/generate"), {"text": "Name a city", "sampling_params": {"max_new_tokens": 6}}
    )
    assert status == 200 and len(words(gen["text"])) == 6 and gen["meta_info"]["completion_tokens"] == 6

    comp = client.completions.create(model=model, prompt="Name a city", max_tokens=5)
    [choice] = comp.choices
    assert len(words(choice.text)) == 5 and choice.finish_reason == "length"
    assert (comp.usage.completion_tokens, comp.usage.total_tokens) == (5, comp.usage.prompt_tokens + 5)
    chunks = client.completions.create(model=model, prompt="Name a city", max_tokens=5, stream=True)
    streamed = "".join(c.choices[0].text for c in chunks)
    assert streamed == choice.text  # the same prompt, the same text, streamed

    messages = [{"role": "user", "content": "Name a city"}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=5)
    said = chat.choices[0].message.content
    assert len(words(said)) == 5 and chat.choices[0].finish_reason == "length"
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 5

    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=5, stream=True,
                                                 stream_options={"include_usage": True}))  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == said
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5  # the usage chunk comes last

    stop = " " + words(said)[2]  # the third word: the answer ends before it
    cut = " " + " ".join(words(said)[:2])
    stopped = client.chat.completions.create(model=model, messages=messages, max_tokens=5, stop=[stop])
    assert stopped.choices[0].message.content == cut and stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].model_extra["matched_stop"] == stop and stopped.usage.completion_tokens == 3
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=5, stop=stop,
                                                 stream=True))  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == cut
    assert chunks[-1].choices[0].finish_reason == "stop"
    comp_stop = client.completions.create(model=model, prompt="Name a city", max_tokens=5,
                                          stop=" " + words(choice.text)[1])  # fmt: skip
    assert comp_stop.choices[0].text == " " + words(choice.text)[0] and comp_stop.choices[0].finish_reason == "stop"

    # every request above was one PD pair: the same room on both workers, one per request
    for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
        sent = sim_requests(prefill, path)
        assert rooms(sent) == rooms(sim_requests(decode, path)) and len(rooms(sent)) == len(sent)

    t0 = time.monotonic()
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model=model, messages=messages, max_tokens=5, n=2)
    took = time.monotonic() - t0
    assert failed.value.status_code == 500 and "KVTransferError" in str(failed.value)
    attempts = [r for r in sim_requests(decode, "/v1/chat/completions") if r["status"] == 500]
    assert attempts and all(isinstance(r["bootstrap_room"], list) and len(r["bootstrap_room"]) == 2 for r in attempts)
    assert took >= len(attempts) * 1.0  # each attempt waited out the samples' KV wait (1 s here, 300 s in sglang)
    after = client.chat.completions.create(model=model, messages=messages, max_tokens=5)
    assert after.choices[0].message.content == said  # one n: 2 request does not open the breaker
    report(capsys, f"{router_impl}: every route answered; n: 2 HTTP 500 after {took:.1f}s ({len(attempts)} attempts)")


# --------------------------------------------------------------------------------------------------
# failing fast through both routers (issue 48): the role's health checks route around a frozen or dead prefill,
# never around one busy on a long prompt; a prefill's 5xx ends the decode leg or not; n: 2
# --------------------------------------------------------------------------------------------------

ROLE_DEFAULTS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "roles" / "sglang_router" / "defaults" / "main.yml").read_text()
)
# The router flags the role renders from these variables (plugins/module_utils/units/router_flags.py ROUTER_FLAGS,
# SMG_FLAGS): the settings that decide how fast a router leaves a worker out and what it does with a failed attempt.
ROLE_ROUTER_FLAGS = {
    "health-check-interval-secs": "sglang_router_health_check_interval",
    "health-failure-threshold": "sglang_router_health_failure_threshold",
    "health-check-timeout-secs": "sglang_router_health_check_timeout",
    "health-check-endpoint": "sglang_router_health_check_endpoint",
    "retry-max-retries": "sglang_router_retry_max_retries",
    "cb-failure-threshold": "sglang_router_circuit_breaker_failure_threshold",
    "cb-timeout-duration-secs": "sglang_router_circuit_breaker_timeout",
}
# SMG's valued routing flags (not its on/off switch, nor its shutdown grace, which no test here reaches)
ROLE_SMG_FLAGS = {
    flag: var
    for flag, var in rf.SMG_FLAGS.items()
    if flag not in rf.SWITCH_OFF and flag != "shutdown-grace-period-secs"
}
ROUTE_AROUND_BOUND_S = 10.0  # a frozen or dead worker gets no request sent later than this after the fault
# The fail-fast health settings of docs/fail-fast.md, set through the role's variables (not its defaults yet: the
# defaults file says why).
FAIL_FAST = {
    "health-check-interval-secs": 2,
    "health-failure-threshold": 2,
    "health-check-timeout-secs": 2,
    "health-check-endpoint": "/ready",
    "cb-failure-threshold": 10000,
}


def role_flags(router_impl: str, **override) -> list[str]:
    """The role's defaults (roles/sglang_router/defaults/main.yml) as router flags with the fail-fast settings
    (FAIL_FAST) and OVERRIDE (flag: value) on top."""
    table = {**ROLE_ROUTER_FLAGS, **(ROLE_SMG_FLAGS if router_impl == "smg" else {})}
    values = {flag: ROLE_DEFAULTS[var] for flag, var in table.items()}
    values.update(FAIL_FAST)
    values.update(override)
    return [word for flag, value in values.items() for word in (f"--{flag}", str(value))]


def worker_health(router: Proc, worker: Proc) -> bool | None:
    """Whether ROUTER counts WORKER healthy now (its GET /workers: sglang-router 0.3.2 and SMG 1.13 both list
    {url, is_healthy}); None when it does not list it."""
    status, body = http("GET", url(router, "/workers"), timeout=2)
    assert status == 200, body
    listed = body["workers"] if isinstance(body, dict) else body
    for entry in listed:
        if entry.get("url", "").rstrip("/") == f"http://127.0.0.1:{worker.ports['port']}":
            return bool(entry.get("is_healthy"))
    return None


class PacedLoad:
    """/generate through a router at RATE requests a second, each in its own thread (a hung one holds no other):
    [(sent, ended, status)] on time.monotonic(), status 0 for no answer within TIMEOUT."""

    def __init__(self, router: Proc, rate: float, timeout: float, max_new_tokens: int = 4):
        self.router, self.rate, self.timeout = router, rate, timeout
        self.body = {"text": "route me", "sampling_params": {"max_new_tokens": max_new_tokens}}
        self.records: list[tuple[float, float, int]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.pacer = threading.Thread(target=self._pace, daemon=True)

    def _one(self) -> None:
        sent = time.monotonic()
        try:
            status = http("POST", url(self.router, "/generate"), self.body, timeout=self.timeout)[0]
        except OSError:
            status = 0
        with self.lock:
            self.records.append((sent, time.monotonic(), status))

    def _pace(self) -> None:
        start, n = time.monotonic(), 0
        while not self.stop.is_set():
            thread = threading.Thread(target=self._one, daemon=True)
            thread.start()
            self.threads.append(thread)
            n += 1
            self.stop.wait(max(0.0, start + n / self.rate - time.monotonic()))

    def __enter__(self):
        self.pacer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.pacer.join(5)
        for thread in self.threads:
            thread.join(self.timeout + 5)


def health_timeline(router: Proc, worker: Proc, seconds: float, interval: float = 0.2) -> list[tuple[float, bool]]:
    """(monotonic time, healthy) each time ROUTER's view of WORKER changes, polled for SECONDS."""
    changes, last, end = [], object(), time.monotonic() + seconds
    while time.monotonic() < end:
        now = worker_health(router, worker)
        if now != last:
            changes.append((time.monotonic(), now))
            last = now
        time.sleep(interval)
    return changes


@pytest.mark.parametrize("fault", ["SIGSTOP", "SIGKILL"])
@pytest.mark.parametrize("router_impl", ["sglang_router", "smg"])
def test_the_roles_health_checks_route_around_a_frozen_or_dead_prefill_within_10_s(router_impl, fault, pd_launcher,
                                                                                   request, capsys):  # fmt: skip
    """2P1D behind the real router with the role's health and retry settings, 10 requests a second: one prefill
    frozen (SIGSTOP, as a wedged host) or killed. The router counts it unhealthy, and no request sent later than
    ROUTE_AROUND_BOUND_S after the fault goes to it (every such request is served at once by the other prefill).
    A frozen prefill's requests hang until something ends them (the guard that kills a silent worker, not the
    router); a dead one's are refused and the router retries them on the other prefill."""
    env = {"SGLANG_SIM_HANDOFF_TIMEOUT": "30"}
    bad = pd_launcher.sim("prefill", env=env, name="prefill-bad")
    good = pd_launcher.sim("prefill", env=env, name="prefill-good")
    decode = pd_launcher.sim("decode", env=env)
    for sim in (bad, good, decode):
        wait_sim_healthy(sim)
    python = request.getfixturevalue("smg_python") if router_impl == "smg" else None
    router = pd_launcher.router([bad, good], decode, *role_flags(router_impl), python=python)
    wait_router_ready(router, healthy=3, timeout=60)
    with PacedLoad(router, rate=10, timeout=25) as load:
        time.sleep(3)
        fault_at = time.monotonic()
        bad.popen.send_signal(getattr(signal, fault))
        changes = health_timeline(router, bad, 14)
        load.stop.set()
    if fault == "SIGSTOP":
        bad.popen.send_signal(signal.SIGCONT)  # its hung requests end (the test's client timeout at the latest)
    out = next((t - fault_at for t, healthy in changes if healthy is False or healthy is None), None)
    # served before the fault: every request that ended before it (one in flight at the fault was on the faulted
    # prefill or the good one, and a frozen prefill holds its requests, as the docstring says)
    before = [r for r in load.records if r[1] < fault_at]
    after = [(round(s - fault_at, 2), round(e - s, 2), st) for s, e, st in load.records if s >= fault_at]
    slow = [r for r in after if r[2] != 200 or r[1] > 2.0]  # not served at once: it went to the faulted prefill
    last_slow = max((r[0] for r in slow), default=None)
    statuses = sorted({st for _s, _took, st in slow})
    longest = max((took for _s, took, st in slow if st == 200), default=None)
    report(capsys, f"{router_impl} {fault}: unhealthy {out and round(out, 2)} s after the fault; {len(after)} sent "
                   f"after it, {len(slow)} not served at once (status {statuses}, 0: none in 25 s; served in up to "
                   f"{longest} s), the last sent {last_slow} s after the fault")  # fmt: skip
    assert before and all(st == 200 for _s, _e, st in before), [r for r in before if r[2] != 200] or "none before"
    assert out is not None and out <= ROUTE_AROUND_BOUND_S, changes
    assert last_slow is None or last_slow <= ROUTE_AROUND_BOUND_S, slow
    late = [r for r in after if r[0] > ROUTE_AROUND_BOUND_S]
    assert late and all(st == 200 and took <= 2.0 for _s, took, st in late), late


@pytest.mark.parametrize("router_impl", ["sglang_router", "smg"])
def test_the_roles_health_check_keeps_a_prefill_busy_on_a_long_prompt(router_impl, pd_launcher, request, capsys):
    """A prefill busy 12 s on one long prompt (1200 words at 10 ms each: sglang's /health queues its one-token
    request behind it, http_server.py health_generate) stays in the router with the role's endpoint (/ready: sglang
    answers it from a flag, without the scheduler); with the generation check (/health) the router takes it out."""
    env = {"SGLANG_SIM_PREFILL_TOKEN_LATENCY": "0.01", "SGLANG_SIM_HANDOFF_TIMEOUT": "40"}
    prefill = pd_launcher.sim("prefill", env=env)
    decode = pd_launcher.sim("decode", env=env)
    wait_sim_healthy(prefill, timeout=30)
    wait_sim_healthy(decode)
    python = request.getfixturevalue("smg_python") if router_impl == "smg" else None
    seen = {}
    for endpoint in (FAIL_FAST["health-check-endpoint"], "/health"):
        router = pd_launcher.router(prefill, decode, *role_flags(router_impl, **{"health-check-endpoint": endpoint}),
                                    python=python)  # fmt: skip
        wait_router_ready(router, timeout=60)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(http, "POST", url(router, "/generate"),
                                 {"text": "long " * 1200, "sampling_params": {"max_new_tokens": 2}},
                                 timeout=40)  # fmt: skip
            changes = health_timeline(router, prefill, 11)
            status = answer.result(40)[0]
        seen[endpoint] = [healthy for _t, healthy in changes]
        router.stop()
        assert status == 200, (endpoint, status)
    report(capsys, f"{router_impl}: the prefill's health in the router through a 12 s prefill: {seen}")
    assert seen[FAIL_FAST["health-check-endpoint"]] == [True]
    assert False in seen["/health"]


# What each router does with the decode leg when the prefill answers 5xx at once (the answer is recorded in
# plugins/module_utils/plan/compat_rules.py PREFILL_5XX and docs/fail-fast.md): True, it ends the decode leg (closes
# its connection, so the decode aborts the room at its next client check) and answers the client at once; False, it
# waits for the decode's own answer (sglang: its KV wait, SGLANG_DISAGGREGATION_WAITING_TIMEOUT).
# Measured: sglang-router 0.3.2 waits (client 500 after 5 attempts x the decode's 20 s: 100.5 s); SMG 1.13.0 ends it
# (client 500 prefill_internal_error after 0.4 s, every decode leg closed and aborted 4.1 s later).
PREFILL_5XX_ENDS_DECODE_LEG = {"sglang_router": False, "smg": True}


@pytest.mark.parametrize("router_impl", ["sglang_router", "smg"])
def test_a_prefill_5xx_and_the_decode_leg(router_impl, pd_launcher, request, capsys):
    """1P1D with the role's router settings; the prefill answers every generation 500 at once (SGLANG_SIM_FAIL), the
    decode waits 10 s for KV that never comes (sglang: 300 s). Whether the router ends the decode leg is read from
    the decode's own record: a leg the router closed ends at the decode's next client check (status 0, about
    SGLANG_REQUEST_STATE_WAIT_TIMEOUT, 4 s), one it waited for ends with the decode's 500 after 10 s."""
    wait_kv = 10.0
    prefill = pd_launcher.sim("prefill", env={"SGLANG_SIM_FAIL": "generate:500"})
    decode = pd_launcher.sim("decode", env={"SGLANG_SIM_HANDOFF_TIMEOUT": str(wait_kv)})
    wait_sim_healthy(prefill)
    wait_sim_healthy(decode)
    python = request.getfixturevalue("smg_python") if router_impl == "smg" else None
    router = pd_launcher.router(prefill, decode, *role_flags(router_impl), python=python)
    wait_router_ready(router, timeout=60)
    t0 = time.monotonic()
    status, body = http("POST", url(router, "/generate"),
                        {"text": "x", "sampling_params": {"max_new_tokens": 2}}, timeout=200)  # fmt: skip
    took = time.monotonic() - t0
    time.sleep(wait_kv + 2 - min(took, wait_kv))  # every decode leg has ended by now, closed or waited out
    legs = [(r["status"], round(r["duration_s"], 1)) for r in sim_requests(decode, "/generate")]
    attempts = len(sim_requests(prefill, "/generate"))
    report(capsys, f"{router_impl}: prefill 500 -> client {status} after {took:.1f} s; {attempts} prefill attempt(s); "
                   f"decode legs (status, s) {legs}; {str(body)[:160]}")  # fmt: skip
    # every attempt's prefill leg; a decode leg the router cancelled before it was sent leaves no record (SMG's last)
    assert status >= 500 and legs and attempts >= len(legs) >= attempts - 1
    ended = all(st != 500 and dur < wait_kv - 4 for st, dur in legs)
    waited = all(st == 500 and dur >= wait_kv - 1 for st, dur in legs)
    assert ended or waited, legs
    assert ended == PREFILL_5XX_ENDS_DECODE_LEG[router_impl], (legs, took)
    if ended:
        assert took < 5 * len(legs), took  # the client's answer does not wait for the decode
    else:
        assert took >= wait_kv * len(legs) - 1, took
