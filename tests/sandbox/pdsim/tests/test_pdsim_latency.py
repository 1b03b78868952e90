"""The simulator's latency model: TTFT grows with input length and the prefill queue, TPOT with the decode batch.

Formulas as a table (in-process), the prefill queue with the Engine in-process, and the shapes end to end
on one simulator subprocess on 127.0.0.1. Waits and request counts are bounded (a few seconds in all).
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim.cli import Knobs, load_knobs
from sglang_pd_sim.engine import Engine, kv_transfer, prefill_seconds, token_seconds
from sglang_pd_sim.generation import GenerationMixin
from sglang_pd_sim.lifecycle import Lifecycle

from tests.http_client import http, stream


@pytest.mark.parametrize(
    ("knobs", "tokens", "seconds"),
    [({}, 10_000, 0.0),  # defaults: instant
     ({"prefill_latency": 0.5}, 10, 0.5),
     ({"prefill_token_latency": 0.001}, 100, 0.1),
     ({"prefill_latency": 0.1, "prefill_token_latency": 0.001}, 400, 0.5)],
)  # fmt: skip
def test_prefill_time_grows_with_input(knobs, tokens, seconds):
    assert prefill_seconds(Knobs(**knobs), tokens) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("knobs", "batch", "seconds"),
    [({}, 64, 0.0),
     ({"token_latency": 0.01}, 8, 0.01),  # no batch factor: flat, as before the model
     ({"token_latency": 0.01, "decode_batch_factor": 0.5}, 1, 0.01),
     ({"token_latency": 0.01, "decode_batch_factor": 0.5}, 5, 0.03),
     ({"token_latency": 0.02, "decode_batch_factor": 0.1}, 11, 0.04)],
)  # fmt: skip
def test_time_per_output_token_grows_with_batch(knobs, batch, seconds):
    assert token_seconds(Knobs(**knobs), batch) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("knobs", "tokens", "nbytes", "seconds"),
    [({}, 1000, 35_136_000, 35_136_000 / 20e9),  # defaults: 35136 B/token at 20 GB/s
     ({"kv_transfer_gbps": 0}, 1000, 35_136_000, 0.0),  # 0: instant
     ({"kv_bytes_per_token": 1000, "kv_transfer_gbps": 1}, 10, 10_000, 1e-5)],
)  # fmt: skip
def test_kv_transfer_size_and_time(knobs, tokens, nbytes, seconds):
    assert kv_transfer(Knobs(**knobs), tokens) == (nbytes, pytest.approx(seconds))


def test_knobs_from_environment_with_defaults_and_problems():
    default = load_knobs({})
    assert (default.prefill_token_latency, default.prefill_slots, default.decode_batch_factor) == (0.0, 1, 0.0)
    assert (default.kv_transfer_gbps, default.kv_bytes_per_token, default.drain_poll) == (20.0, 35136, 5.0)
    knobs = load_knobs({"SGLANG_SIM_PREFILL_TOKEN_LATENCY": "0.001", "SGLANG_SIM_PREFILL_SLOTS": "0",
                        "SGLANG_SIM_DECODE_BATCH_FACTOR": "0.25", "SGLANG_SIM_KV_TRANSFER_GBPS": "fast"})  # fmt: skip
    assert (knobs.prefill_token_latency, knobs.prefill_slots, knobs.decode_batch_factor) == (0.001, 0, 0.25)
    assert knobs.kv_transfer_gbps == 20.0 and any("SGLANG_SIM_KV_TRANSFER_GBPS" in p for p in knobs.problems)


def test_prefill_queue_first_come_first_served_one_slot():
    engine = Engine(Knobs(prefill_latency=0.1))
    done: dict[int, float] = {}
    t0 = time.monotonic()

    def run(i):
        time.sleep(0.01 * i)  # arrive in order 0, 1, 2
        with engine.prefill(10):
            pass
        done[i] = time.monotonic() - t0
        engine.release(10)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    snap = engine.snapshot()
    assert (snap["num_queue_reqs"], snap["num_running_reqs"], snap["kv_used_tokens"]) == (2, 1, 10)
    for t in threads:
        t.join(5)
    assert done[0] < done[1] < done[2]
    assert done[2] == pytest.approx(0.3, abs=0.08)  # the third waited for two prefills in front of it
    assert engine.snapshot()["kv_used_tokens"] == 0


# --- end to end --------------------------------------------------------------------------------------------


def time_to_first_chunk(url: str, body: dict) -> float:
    t0 = time.monotonic()
    with stream("POST", url, {**body, "stream": True}) as resp:
        while not resp.readline().startswith(b"data: "):
            pass
        first = time.monotonic() - t0
        resp.read()
    return first


def test_ttft_grows_with_input_length_and_prefill_queue(sims):
    sim = sims.start("null", env={"SGLANG_SIM_PREFILL_TOKEN_LATENCY": "0.002"})  # 2 ms per prompt token
    url = sim.url("/generate")

    def body(n):
        return {"text": " ".join(["w"] * n), "sampling_params": {"max_new_tokens": 1}}

    short, long = time_to_first_chunk(url, body(10)), time_to_first_chunk(url, body(200))
    assert 0.38 < long < 1.5 and long > short + 0.3, (short, long)  # 20 ms vs 400 ms of simulated prefill

    with ThreadPoolExecutor(4) as pool:  # 4 x 100 tokens at once: they queue for the one prefill slot
        ttfts = sorted(pool.map(lambda _i: time_to_first_chunk(url, body(100)), range(4)))
    assert ttfts[-1] > 0.7 and ttfts[-1] > ttfts[0] + 0.4, ttfts  # 0.2 s each, the last waits for three


def test_tpot_grows_with_decode_batch(sims):
    env = {"SGLANG_SIM_TOKEN_LATENCY": "0.01", "SGLANG_SIM_DECODE_BATCH_FACTOR": "0.5"}
    sim = sims.start("null", env=env)
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 20}}
    t0 = time.monotonic()
    assert http("POST", sim.url("/generate"), body)[0] == 200
    alone = time.monotonic() - t0  # 20 x 10 ms

    t0 = time.monotonic()
    with ThreadPoolExecutor(5) as pool:  # batch of 5: 10 ms x (1 + 0.5 x 4) = 30 ms per token
        statuses = list(pool.map(lambda _i: http("POST", sim.url("/generate"), body)[0], range(5)))
    batched = time.monotonic() - t0
    assert statuses == [200] * 5
    assert alone > 0.18 and batched > 0.5 and batched > 1.5 * alone, (alone, batched)


class _Heard:
    """What a request's thread tells the tokenizer's metrics (collector.py): its first token and each later output."""

    def __init__(self):
        self.outputs: list[int] = []

    def first_token(self, _seconds, _stream):
        self.outputs.append(1)

    def inter_token(self, _interval, new_tokens):
        self.outputs.append(new_tokens)


def token_outputs(n: int, stream: bool, latency: float) -> tuple[list[int], list[int], float]:
    """(the token indexes token_steps yields, the new tokens of each output the metrics heard of, seconds taken) of
    one decode request of N tokens at LATENCY seconds a token, run in process on a real Engine and Lifecycle."""
    knobs = Knobs(token_latency=latency)
    state = SimpleNamespace(role="decode", engine=Engine(knobs), life=Lifecycle(knobs), metrics=_Heard(),
                            stop=threading.Event())  # fmt: skip
    handler = SimpleNamespace(state=state, abort_if_client_gone=lambda: None)
    t0 = time.monotonic()
    with state.engine.decode(0, 0) as held:
        yielded = list(GenerationMixin.token_steps(handler, n, held, time.time(), stream, 1))
    assert held["tokens"] == n
    return yielded, state.metrics.outputs, time.monotonic() - t0


@pytest.mark.parametrize(
    ("n", "stream", "latency", "yielded", "outputs"),
    [(120, True, 0.002, list(range(120)), [1] * 120),  # a stream hears of every token
     # not streamed: the first token, every 50th (SGLANG_FORCE_STREAM_INTERVAL) and the last, as sglang sends them
     (120, False, 0.002, [0, 49, 99, 119], [1, 49, 50, 20]),
     # ... and never more than engine.MAX_WAIT_S of steps in one wait: 0.25 s at 10 ms is 25 steps
     (120, False, 0.01, [0, 25, 49, 74, 99, 119], [1, 25, 24, 25, 25, 20]),
     (200, False, 0.0, [0, 49, 99, 149, 199], [1, 49, 50, 50, 50])],  # no time a token: the outputs alone
)  # fmt: skip
def test_a_request_not_streamed_hears_of_its_tokens_as_sglang_sends_them(n, stream, latency, yielded, outputs):
    got, heard, seconds = token_outputs(n, stream, latency)
    assert (got, heard) == (yielded, outputs)
    assert seconds >= n * latency * 0.95, seconds  # the same time a token either way
