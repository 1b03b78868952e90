"""The simulator's int-with-suffix flags parse exactly as sglang 0.5.23's `human_readable_int`.

sglang/srt/utils/common.py `human_readable_int` (the type of --context-length, --max-total-tokens,
--max-prefill-tokens, --cuda-graph-prefill-max-context): SI k/M/G/T (decimal, decimals allowed), IEC
Ki/Mi/Gi/Ti (binary, integers only), case-sensitive; anything else is an ArgumentTypeError (exit 2).
In-process, no simulator started.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim.cli import human_readable_int, parse_args


@pytest.mark.parametrize(
    ("text", "value"),
    [("8192", 8192), (" 8192 ", 8192), ("-1", -1),
     ("1k", 1000), ("8k", 8000), ("25.6k", 25600), ("1M", 10**6), ("1.5M", 1_500_000), ("2G", 2 * 10**9),
     ("1T", 10**12), ("0.0015k", 1),  # SI: Decimal arithmetic, truncated toward zero
     ("1Ki", 1024), ("8Ki", 8192), ("1Mi", 2**20), ("3Gi", 3 * 2**30), ("1Ti", 2**40)],
)  # fmt: skip
def test_suffixes_as_sglang(text, value):
    assert human_readable_int(text) == value


@pytest.mark.parametrize("text", ["8K", "8m", "8g", "8t", "8KI", "8ki", "8Kib", "8 k", "k", "1e3", "0x10", "8.0"])
def test_case_sensitive_and_unknown_suffixes_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        human_readable_int(text)
    assert str(exc.value) == (
        f"Invalid integer value: '{text.strip()}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
        "(1Ki, 1Mi). Suffixes are case-sensitive."
    )


def test_decimal_with_iec_suffix_is_refused():
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        human_readable_int("25.6Ki")
    assert str(exc.value) == (
        "Decimals are not allowed with IEC suffixes like 'Ki'. Use an integer IEC value such as '25Ki', "
        "or an SI value such as '25.6K'."
    )


@pytest.mark.parametrize(
    ("flag", "text", "dest", "value"),
    [("--context-length", "8Ki", "context_length", 8192), ("--context-length", "8k", "context_length", 8000),
     ("--max-total-tokens", "1Mi", "max_total_tokens", 2**20),
     ("--max-prefill-tokens", "16k", "max_prefill_tokens", 16000),
     ("--context-bucket", "4Ki", "cuda_graph_prefill_max_context", 4096)],
)  # fmt: skip
def test_flags_use_it(flag, text, dest, value):
    assert getattr(parse_args(["--model-path", "/m", flag, text]), dest) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("8K", "argument --context-length: Invalid integer value: '8K'."),
     ("2.5Mi", "argument --context-length: Decimals are not allowed with IEC suffixes like 'Mi'.")],
)  # fmt: skip
def test_refusal_exits_2_with_argparse_message(capsys, text, message):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model-path", "/m", "--context-length", text])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_chunked_prefill_size_is_a_plain_int(capsys):
    # sglang/srt/arg_groups/fields/schedule.py: chunked_prefill_size is Optional[int], no suffixes
    assert parse_args(["--model-path", "/m", "--chunked-prefill-size", "8192"]).chunked_prefill_size == 8192
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model-path", "/m", "--chunked-prefill-size", "8k"])
    assert exc.value.code == 2
    assert "argument --chunked-prefill-size: invalid int value: '8k'" in capsys.readouterr().err
