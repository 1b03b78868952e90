"""The worker: SGLang's HTTP API on --port, and on a prefill the bootstrap server on --disaggregation-bootstrap-port.

PD handoff, as simulated here: the router sends the same body, carrying bootstrap_host/bootstrap_port/
bootstrap_room, to a prefill and a decode at once. The prefill records the room and, after
SGLANG_SIM_PREFILL_LATENCY, marks its KV "transferred". The decode polls the prefill's bootstrap server
(GET /sim/kv/<room> at bootstrap_host:bootstrap_port) until that room is transferred, checks that both
sides agree on page size, KV dtype and transfer backend, then generates. If the room does not show up
within SGLANG_SIM_HANDOFF_TIMEOUT, decode fails the request with HTTP 500, as SGLang aborts a request
whose KV transfer failed.

Modules: state (shared state), httpbase (HTTP plumbing, /sim/*), bootstrap (prefill bootstrap server),
worker (routing) with generation, handoff, info and metrics; this module starts the process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time

from sglang_pd_sim import SGLANG_VERSION, __version__, answers, model_dir, nixl_handoff
from sglang_pd_sim.bootstrap import BootstrapHandler
from sglang_pd_sim.cli import load_knobs, parse_args
from sglang_pd_sim.httpbase import SimHTTPServer
from sglang_pd_sim.lifecycle import ServerStatus
from sglang_pd_sim.state import SimState
from sglang_pd_sim.worker import WorkerHandler

log = logging.getLogger("sglang_pd_sim")


def _configure_logging(level_name: str) -> None:
    level = getattr(logging, str(level_name).upper(), logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def _load_weights(state: SimState) -> bool:
    """sglang/srt/entrypoints/engine.py Engine._launch_subprocesses: the schedulers load the weights while the
    main process waits (scheduler_init_result.wait_for_ready) before http_server.py starts uvicorn, so the HTTP
    port is not listening meanwhile. False when stopped (SIGINT) during the load."""
    delay = state.knobs.startup_delay
    # model_dir.py: the weight files as sglang's loader finds them (loader.py _prepare_weights) and each shard's
    # safetensors header as it is opened; a failure comes after the share of the load read before it
    plan = model_dir.plan_load(state.args.model_path, getattr(state.args, "load_format", "auto"))
    if delay:
        log.info("Loading weights (simulated, %.1fs) ...", delay)
    if plan.failure is not None:
        if state.stop.wait(delay * plan.fails_after):
            return False
        _scheduler_failed(state, plan.failure)
    if delay and state.stop.wait(delay):
        return False
    try:
        if nixl_handoff.prepare(state.args.disaggregation_transfer_backend, state.role):
            log.info("NIXL agent and KV buffer registered (UCX)")
    except nixl_handoff.NixlHandoffError as exc:
        log.error("%s", exc)
        state.life.log_exit(state, "startup-exit")
        logging.shutdown()
        os._exit(1)
    if state.knobs.startup_exit:
        log.error("SGLANG_SIM_FAIL startup:exit: simulated failure while loading weights (exit 1)")
        state.life.log_exit(state, "startup-exit")
        logging.shutdown()
        os._exit(1)
    return True


def _scheduler_failed(state: SimState, failure: model_dir.LoadFailure) -> None:
    """A scheduler that raised while loading, as sglang 0.5.23 ends then: sglang/srt/managers/scheduler.py
    run_scheduler_process logs the traceback and sends SIGQUIT to the launching process, whose
    launch_phase_sigquit_handler (sglang/srt/entrypoints/engine.py) calls kill_process_tree(os.getpid())
    (sglang/srt/utils/common.py), which SIGKILLs the process itself: no port listens, the exit is a SIGKILL."""
    log.error("Scheduler hit an exception: %s", failure.traceback())
    log.error("Received sigquit from a child process. It usually means the child failed.")
    log.info("kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d", os.getpid(), os.getpid())
    state.life.log_exit(state, "scheduler-exception")
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_and_warmup(state: SimState) -> None:
    """sglang/srt/entrypoints/http_server.py _wait_and_warmup / _execute_server_warmup: once the HTTP server runs,
    a warm-up generation (SGLANG_SIM_WARMUP_DELAY here) while the status is Starting (/health 503), then Up;
    --skip-server-warmup: Up at once."""
    delay = state.knobs.warmup_delay
    if delay and not getattr(state.args, "skip_server_warmup", False):
        log.info("Warming up (simulated, %.1fs) ...", delay)
        if state.stop.wait(delay):
            return
    state.life.set_status(ServerStatus.Up)
    log.info("The server is fired up and ready to roll! (%.2fs after start)", time.time() - state.started)


def _drain(state: SimState) -> str:
    """sglang/srt/managers/tokenizer_manager.py `sigterm_watchdog` (0.5.23), once it saw gracefully_exit: every
    period (5 s there; SGLANG_SIM_DRAIN_POLL here) exit at once if the server status is UnHealthy (a failed
    health check: in-flight requests are cut) or SGL_FORCE_SHUTDOWN=1|true, else log the remaining requests and
    exit once none is left. No time limit, as there (the service manager's stop timeout is the limit)."""
    force = os.environ.get("SGL_FORCE_SHUTDOWN", "").strip().lower() in ("1", "true")
    while not state.stop.is_set():
        with state.lock:
            remaining = state.inflight
        if state.life.status is ServerStatus.UnHealthy:
            log.error("Signal SIGTERM received while health check failed. Force exiting.")
            return "unhealthy"
        if force:
            log.error("Signal SIGTERM received while force shutdown flag set. Force exiting.")
            return "force-shutdown"
        rids = [e["rid"] for e in state.life.in_flight()]
        log.info("Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=%r.",
                 remaining, rids)  # fmt: skip
        if remaining == 0:
            return "drained"
        state.stop.wait(state.knobs.drain_poll)
    return "stopped"


def _shutdown_schedulers(state: SimState) -> None:
    """sglang/srt/managers/tokenizer_manager.py `sigterm_watchdog` (0.5.23) after its drain loop, on every way out of
    it (drained, UnHealthy and SGL_FORCE_SHUTDOWN alike: `force_exit_handler` is a no-op, then `break`): it sends
    ShutdownReq to the schedulers and waits up to _SCHEDULER_EXIT_TIMEOUT_SECS (15) for them to exit
    (scheduler.py `handle_shutdown` breaks the event loop; `run_scheduler_process` then releases host resources and
    aborts NCCL), then `kill_process_tree(os.getpid(), include_parent=False, wait_timeout=60)` SIGKILLs what is left
    (instant here) and the server stops. A responsive simulated scheduler takes SGLANG_SIM_SCHEDULER_EXIT seconds
    (default the whole 15 s grace: the bound sglang allows, since the real exit time of a GPU scheduler was never
    measured here); a stalled one never reads the ShutdownReq, so the wait is always the full grace
    (SGLANG_SIM_SHUTDOWN_GRACE, sglang's constant 15; only tests shorten it)."""
    knobs = state.knobs
    grace = knobs.shutdown_grace
    stalled = state.life.stalled()
    wait = grace if stalled else min(knobs.scheduler_exit, grace)
    state.life.shutdown = {"time": time.time(), "seconds": wait, "scheduler_stalled": stalled}
    if wait > 0:
        log.info("Sent ShutdownReq to the scheduler; waiting up to %gs for it to exit", grace)
        time.sleep(wait)  # not state.stop: a SIGINT meanwhile does not shorten sglang's wait either
    if stalled or knobs.scheduler_exit > grace:
        log.warning("Schedulers still alive %gs after ShutdownReq, killing them before they released: [%d]",
                    grace, os.getpid())  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    knobs = load_knobs()
    _configure_logging(args.log_level)
    state = SimState(args, knobs)
    for problem in knobs.problems:
        log.warning("%s", problem)
    if knobs.answers:
        try:
            log.info("answer mode %s: %d questions known", knobs.answers, len(answers.gsm8k_table()))
        except answers.AnswersUnavailable as exc:
            log.error("%s", exc)
            return 1
    log.info("sglang-pd-sim %s (stand-in for sglang %s), pid %d", __version__, SGLANG_VERSION, os.getpid())
    log.info("server_args=ServerArgs(%s)", ", ".join(f"{k}={v!r}" for k, v in sorted(vars(args).items())))
    log.info("sim_knobs=%s", json.dumps(knobs.as_dict(), sort_keys=True))

    # model_dir.py: sglang reads config.json while it resolves its arguments, in the launching process, before any
    # listener starts (launch_server.py run_server -> ServerArgs.resolve_once); the exception is not caught: exit 1
    failure = model_dir.config_failure(args.model_path)
    if failure is not None:
        log.error("%s", failure.traceback())
        state.life.log_exit(state, "config-error")
        return 1

    servers: list[SimHTTPServer] = []

    def serve(srv: SimHTTPServer) -> None:
        servers.append(srv)
        threading.Thread(
            target=srv.serve_forever, kwargs={"poll_interval": 0.2}, name=srv.listener, daemon=True
        ).start()

    def on_sigterm_loading(signum, _frame):
        # sglang installs its SIGTERM handler with the tokenizer manager's event loop, after the load: before
        # that SIGTERM has its default action (the process ends at once, killed by the signal)
        log.warning("Received SIGTERM while loading weights: terminated")
        state.life.log_exit(state, "sigterm-while-loading")
        logging.shutdown()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def on_sigterm(signum, _frame):
        if state.draining.is_set():
            log.info("Received SIGTERM again; still draining")
            return
        # sglang/srt/managers/tokenizer_manager.py SignalHandler.sigterm_handler: set gracefully_exit
        log.warning("Received SIGTERM: draining requests and shutting down...")
        state.life.on_sigterm()
        state.draining.set()

    def on_sigint(signum, _frame):
        log.info("Received %s, shutting down", signal.Signals(signum).name)
        state.stop.set()

    signal.signal(signal.SIGTERM, on_sigterm_loading)
    signal.signal(signal.SIGINT, on_sigint)

    # tokenizer_manager.py init_disaggregation -> disagg_service.py start_disagg_service: a prefill's bootstrap
    # server listens before the schedulers finish loading (Engine._launch_subprocesses waits after it)
    if state.role == "prefill":
        try:
            serve(SimHTTPServer((args.host, args.disaggregation_bootstrap_port), BootstrapHandler, state, "bootstrap"))
        except OSError as exc:
            log.error("cannot bind the bootstrap server: %s", exc)
            return 1
        log.info("bootstrap server on %s:%d", args.host, args.disaggregation_bootstrap_port)

    reason = "sigint"
    if _load_weights(state):
        try:
            http_server = SimHTTPServer((args.host, args.port), WorkerHandler, state, "http")
        except OSError as exc:  # uvicorn fails to bind after the load, as in sglang
            log.error("cannot bind: %s", exc)
            for srv in servers:
                srv.shutdown()
                srv.server_close()
            return 1
        state.ready.set()
        state.life.listening_at = time.time()
        # the scheduler's event loop runs from the end of the load: when it has no batch to run it publishes
        # (scheduler.py on_idle; engine.py idle_tick)
        threading.Thread(target=state.engine.run_idle_loop, args=(state.stop,), name="scheduler-idle",
                         daemon=True).start()  # fmt: skip
        signal.signal(signal.SIGTERM, on_sigterm)
        serve(http_server)
        log.info("role=%s listening on http://%s:%d", state.role, args.host, args.port)
        threading.Thread(target=_wait_and_warmup, args=(state,), name="warmup", daemon=True).start()
        # tokenizer_manager.py sigterm_watchdog: `while not gracefully_exit: await asyncio.sleep(5)`
        while not state.stop.wait(knobs.drain_poll):
            if state.draining.is_set():
                reason = _drain(state)
                if reason != "stopped":
                    _shutdown_schedulers(state)
                break
    state.stop.set()  # ends long polls and simulated waits
    for srv in servers:
        srv.shutdown()
        srv.server_close()
    state.life.log_exit(state, reason)
    log.info("Shutdown complete")
    logging.shutdown()
    return 0
