"""The simulator's releases: what each version adds over the sglang 0.5.23 flag table, and its default failures.

The sandbox wheelhouse (tests/sandbox/wheelhouse.py) builds one wheel per version of RELEASES, so a deployment's
engine upgrade and its rollback after a failed upgrade can be tested offline:

- 0.1.0: the simulator as it is (the sglang 0.5.23 flags only).
- 0.2.0: "v2", the same plus `--sim-v2-feature`, a flag 0.1.0 refuses as argparse refuses any unknown flag
  (exit 2, "unrecognized arguments"), as an older sglang refuses a flag of a newer one.
- 0.2.1: a broken release: as 0.2.0, but its scheduler stalls once the server is up (a default
  SGLANG_SIM_STALL_AFTER of 0), sglang's own unhealthy state: the process lives and its port takes requests,
  /health answers 503 only after SGLANG_HEALTH_CHECK_TIMEOUT without scheduler output
  (sglang/srt/entrypoints/http_server.py health_generate) and generations hang as well. The environment's
  SGLANG_SIM_STALL_AFTER overrides it.

The running code looks up its own `__version__` here (`current()`); a version not in the table behaves as 0.1.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BASE_VERSION = "0.1.0"

V2_FEATURE = (
    "--sim-v2-feature",
    {
        "action": "store_true",
        "help": "a flag that exists only in the simulator's 0.2.x releases (sglang-pd-sim >= 0.2.0), to test "
        "engine upgrades: older releases refuse it as an unknown flag (exit 2)",
    },
)


@dataclass(frozen=True)
class Release:
    version: str
    # (flag, argparse add_argument keyword arguments), added after the 0.5.23 table's flags
    flags: tuple[tuple[str, dict], ...] = ()
    # SGLANG_SIM_FAIL items the release has by default; the environment's items are added after them
    fail: tuple[str, ...] = ()
    # SGLANG_SIM_STALL_AFTER of the release where the environment sets none (None: never stalls)
    stall_after: float | None = None
    summary: str = field(default="", compare=False)


RELEASES: dict[str, Release] = {
    "0.1.0": Release("0.1.0", summary="the sglang 0.5.23 flag table"),
    "0.2.0": Release("0.2.0", flags=(V2_FEATURE,), summary="v2: 0.1.0 plus --sim-v2-feature"),
    "0.2.1": Release(
        "0.2.1",
        flags=(V2_FEATURE,),
        stall_after=0.0,
        summary="a broken release: 0.2.0 whose scheduler stalls once it is up (sglang's unhealthy state)",
    ),
}


def release(version: str) -> tuple[Release, str | None]:
    """The release of VERSION, and a problem to log when the version is not in the table (it behaves as 0.1.0)."""
    if version in RELEASES:
        return RELEASES[version], None
    return RELEASES[BASE_VERSION], f"sglang-pd-sim {version} is not in the release table; behaving as {BASE_VERSION}"


def current() -> tuple[Release, str | None]:
    from sglang_pd_sim import __version__  # noqa: PLC0415 (read at call time: tests patch it)

    return release(__version__)
