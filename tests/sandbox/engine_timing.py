"""How the engine double starts and stops on every sandbox host: the one table of the test bed's engine timing.

sglang 0.5.23 loads its weights with its HTTP port closed (http_server.py binds once the model is loaded), then runs
a warm-up generation while /health answers 503, then serves. The double (tests/sandbox/pdsim) does the same for
SGLANG_SIM_STARTUP_DELAY and SGLANG_SIM_WARMUP_DELAY seconds, 0 by its own default. Every sandbox host starts its
services with LOAD_S and WARMUP_S (render() writes them as systemd's DefaultEnvironment, so every unit of the host
inherits them whatever inventory, playbook or extra vars a scenario uses): together longer than the router's
health-check interval (sglang_router_health_check_interval, 10 s) and several of the run's health polls
(sglang_health_poll 5 s in inventories/sandbox), so the health waits, the router's detection of a loading worker and
the rolling step's timeouts are what a scenario exercises (issue 37). DeepSeek-V4-Flash loads for minutes; the
production budget is sglang_health_timeout 1800 s.

A unit's own environment wins over the default (systemd.exec: Environment= and EnvironmentFile= override
DefaultEnvironment=), so a scenario that needs an instant engine sets SGLANG_SIM_STARTUP_DELAY and
SGLANG_SIM_WARMUP_DELAY to 0 in sglang_<role>_extra_env (INSTANT_ENGINE_ENV) and says why beside it. Programs started
over ssh (the collection's flag check runs the double's parser) do not get it: sshd builds a session's environment
afresh.
"""

from pathlib import Path

LOAD_S, WARMUP_S = 10, 2
ENGINE_START_ENV = {"SGLANG_SIM_STARTUP_DELAY": str(LOAD_S), "SGLANG_SIM_WARMUP_DELAY": str(WARMUP_S)}
INSTANT_ENGINE_ENV = {"SGLANG_SIM_STARTUP_DELAY": "0", "SGLANG_SIM_WARMUP_DELAY": "0"}
DROPIN = "etc/systemd/system.conf.d/50-sandbox-engine-timing.conf"


def render(upper: Path) -> None:
    """The drop-in of the host's service manager (in its overlay upper dir, before boot) that gives every unit
    ENGINE_START_ENV."""
    path = Path(upper) / DROPIN
    path.parent.mkdir(parents=True, exist_ok=True)
    pairs = " ".join(f"{key}={value}" for key, value in ENGINE_START_ENV.items())
    path.write_text(f"# tests/sandbox/engine_timing.py: the engines' weight load and warm-up (issue 37)\n"
                    f"[Manager]\nDefaultEnvironment={pairs}\n")  # fmt: skip
