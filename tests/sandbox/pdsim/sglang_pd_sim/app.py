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

from sglang_pd_sim import SGLANG_VERSION, __version__
from sglang_pd_sim.bootstrap import BootstrapHandler
from sglang_pd_sim.cli import load_knobs, parse_args
from sglang_pd_sim.httpbase import SimHTTPServer
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


def _loader(state: SimState) -> None:
    delay = state.knobs.startup_delay
    if delay:
        log.info("Loading weights (simulated, %.1fs) ...", delay)
        if state.stop.wait(delay):
            return
    if state.knobs.startup_exit:
        log.error("SGLANG_SIM_FAIL startup:exit: simulated failure while loading weights (exit 1)")
        logging.shutdown()
        os._exit(1)
    state.ready.set()
    log.info("The server is fired up and ready to roll! (%.2fs after start)", time.time() - state.started)


def _drain(state: SimState) -> None:
    """sglang/srt/managers/tokenizer_manager.py `sigterm_watchdog` (0.5.23): once SIGTERM set gracefully_exit,
    poll the in-flight requests (every 5 s there; SGLANG_SIM_DRAIN_POLL here) until none is left, then exit 0.
    No time limit, as there (the service manager's stop timeout is the limit); SGL_FORCE_SHUTDOWN=1|true
    skips the wait. SIGINT still stops at once."""
    force = os.environ.get("SGL_FORCE_SHUTDOWN", "").strip().lower() in ("1", "true")
    last = None
    while not state.stop.is_set():
        if force:
            log.error("Signal SIGTERM received while force shutdown flag set. Force exiting.")
            return
        with state.lock:
            remaining = state.inflight
        if remaining != last:
            log.info("Gracefully exiting... Remaining number of requests %d.", remaining)
            last = remaining
        if remaining == 0:
            return
        state.stop.wait(state.knobs.drain_poll)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    knobs = load_knobs()
    _configure_logging(args.log_level)
    state = SimState(args, knobs)
    for problem in knobs.problems:
        log.warning("%s", problem)
    log.info("sglang-pd-sim %s (stand-in for sglang %s), pid %d", __version__, SGLANG_VERSION, os.getpid())
    log.info("server_args=ServerArgs(%s)", ", ".join(f"{k}={v!r}" for k, v in sorted(vars(args).items())))
    log.info("sim_knobs=%s", json.dumps(knobs.as_dict(), sort_keys=True))

    servers: list[SimHTTPServer] = []
    try:
        servers.append(SimHTTPServer((args.host, args.port), WorkerHandler, state, "http"))
        if state.role == "prefill":
            servers.append(
                SimHTTPServer((args.host, args.disaggregation_bootstrap_port), BootstrapHandler, state, "bootstrap")
            )
    except OSError as exc:
        log.error("cannot bind: %s", exc)
        for srv in servers:
            srv.server_close()
        return 1

    def on_sigterm(signum, _frame):
        if state.draining.is_set():
            log.info("Received SIGTERM again; still draining")
            return
        # sglang/srt/managers/tokenizer_manager.py SignalHandler.sigterm_handler: set gracefully_exit
        log.warning("Received SIGTERM: draining requests and shutting down...")
        state.draining.set()

    def on_sigint(signum, _frame):
        log.info("Received %s, shutting down", signal.Signals(signum).name)
        state.stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_sigint)

    for srv in servers:
        threading.Thread(
            target=srv.serve_forever, kwargs={"poll_interval": 0.2}, name=srv.listener, daemon=True
        ).start()
    log.info(
        "role=%s listening on http://%s:%d%s",
        state.role,
        args.host,
        args.port,
        f", bootstrap server on {args.host}:{args.disaggregation_bootstrap_port}" if state.role == "prefill" else "",
    )
    threading.Thread(target=_loader, args=(state,), name="loader", daemon=True).start()

    while not state.stop.wait(min(0.5, knobs.drain_poll)):
        if state.draining.is_set():
            _drain(state)
            break
    state.stop.set()  # ends long polls and simulated waits
    for srv in servers:
        srv.shutdown()
        srv.server_close()
    log.info("Shutdown complete")
    logging.shutdown()
    return 0
