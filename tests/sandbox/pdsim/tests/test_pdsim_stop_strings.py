"""Stop strings and /v1/models as sglang 0.5.23 answers them, on every generation route of the simulator.

- a stop string ends the request once it is in the output (sglang/srt/managers/schedule_batch.py check_finished,
  FINISH_MATCHED_STR): the token that completed it counts, the text ends before it (detokenizer_manager.py
  trim_matched_stop); /generate says {"type": "stop", "matched": S}, the OpenAI routes finish_reason "stop" and
  matched_stop S (entrypoints/openai/serving_completions.py, serving_chat.py), streamed or not;
- /v1/models: one card whose id and root are the served model name (entrypoints/http_server.py available_models).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim.generation import cut_at_stop, stop_strings, stream_pieces

from tests.http_client import http, stream

TOKS = [(1, " the"), (2, " kernel"), (3, " page"), (4, " cache")]

# name: (stop strings, tokens) -> (tokens kept, matched, text)
CUTS = {
    "no stop string: everything": ([], 4, None, " the kernel page cache"),
    "a word: cut before it, its token kept": ([" page"], 3, " page", " the kernel"),
    "inside a token": (["ern"], 2, "ern", " the k"),
    "across two tokens": (["l p"], 3, "l p", " the kerne"),
    "the earliest of two wins": ([" cache", "kern"], 2, "kern", " the "),
    "never appears": (["zzz"], 4, None, " the kernel page cache"),
}


@pytest.mark.parametrize("case", CUTS, ids=list(CUTS))
def test_a_stop_string_cuts_the_tokens_after_it_and_the_text_before_it(case):
    stops, kept, matched, text = CUTS[case]
    toks, got_matched, got_text = cut_at_stop(TOKS, stops)
    assert (len(toks), got_matched, got_text) == (kept, matched, text)
    pieces = stream_pieces(toks, got_text)
    assert len(pieces) == len(toks) and "".join(pieces) == got_text


@pytest.mark.parametrize(
    ("kind", "req", "want"),
    [
        ("generate", {"sampling_params": {"stop": "x"}}, ["x"]),
        ("generate", {"sampling_params": {"stop": ["x", "", 3, "y"]}}, ["x", "y"]),
        ("generate", {"stop": "x"}, []),  # /generate reads sampling_params only
        ("completion", {"stop": ["a", "b"]}, ["a", "b"]),
        ("chat", {"stop": "a"}, ["a"]),
        ("chat", {"stop": None}, []),
    ],
)
def test_the_stop_strings_of_each_route(kind, req, want):
    assert stop_strings(kind, req) == want


def sse_events(sim, path, body):
    events = []
    with stream("POST", sim.url(path), body, timeout=10) as resp:
        assert resp.status == 200
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data:"):
                payload = line[len("data:") :].strip()
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_every_route_stops_at_a_stop_string_streamed_or_not(sims):
    sim = sims.start("null")
    plain = http("POST", sim.url("/generate"), {"text": "q", "sampling_params": {"max_new_tokens": 8}})[1]
    words = plain["text"].split()
    stop = " " + words[3]  # the fourth word (with its space) of what the same prompt generates
    want_text = " " + " ".join(words[:3])

    body = {"text": "q", "sampling_params": {"max_new_tokens": 8, "stop": [stop]}}
    status, out = http("POST", sim.url("/generate"), body)
    assert status == 200 and out["text"] == want_text
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["meta_info"]["completion_tokens"] == 4 == len(out["output_ids"])

    status, out = http("POST", sim.url("/v1/completions"), {"prompt": "q", "max_tokens": 8, "stop": stop})
    [choice] = out["choices"]
    assert (status, choice["text"], choice["finish_reason"], choice["matched_stop"]) == (200, want_text, "stop", stop)
    assert out["usage"]["completion_tokens"] == 4

    events = sse_events(sim, "/v1/completions", {"prompt": "q", "max_tokens": 8, "stop": stop, "stream": True})
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == want_text
    assert (events[-2]["choices"][0]["finish_reason"], events[-2]["choices"][0]["matched_stop"]) == ("stop", stop)

    chat = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 8}
    said = http("POST", sim.url("/v1/chat/completions"), chat)[1]["choices"][0]["message"]["content"].split()
    chat_stop = " " + said[2]
    status, out = http("POST", sim.url("/v1/chat/completions"), {**chat, "stop": [chat_stop]})
    [choice] = out["choices"]
    assert (choice["message"]["content"], choice["finish_reason"], choice["matched_stop"]) == (
        " " + " ".join(said[:2]), "stop", chat_stop)  # fmt: skip
    assert out["usage"]["completion_tokens"] == 3

    events = sse_events(sim, "/v1/chat/completions", {**chat, "stop": chat_stop, "stream": True,
                                                      "stream_options": {"include_usage": True}})  # fmt: skip
    chunks = [e for e in events[:-1] if e["choices"]]
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks) == " " + " ".join(said[:2])
    assert (chunks[-1]["choices"][0]["finish_reason"], chunks[-1]["choices"][0]["matched_stop"]) == ("stop", chat_stop)
    assert events[-2]["usage"]["completion_tokens"] == 3 and events[-1] == "[DONE]"


def test_models_lists_the_served_model_name_as_id_and_root(sims):
    sim = sims.start("null", "--served-model-name", "dsv4")
    status, out = http("GET", sim.url("/v1/models"))
    assert status == 200 and out["object"] == "list"
    [card] = out["data"]
    assert (card["id"], card["root"], card["owned_by"], card["object"]) == ("dsv4", "dsv4", "sglang", "model")
