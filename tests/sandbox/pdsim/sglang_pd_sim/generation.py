"""Generation routes of the worker (/generate, /v1/completions, /v1/chat/completions), JSON or SSE.

A prefill records each request's bootstrap_room, marks its KV transferred after SGLANG_SIM_PREFILL_LATENCY
and answers with its first token (as SGLang's prefill does); a decode first waits for that KV (handoff.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid

from sglang_pd_sim import answers, nixl_handoff
from sglang_pd_sim.engine import kv_transfer
from sglang_pd_sim.handoff import HandoffError, HandoffMixin
from sglang_pd_sim.httpbase import ClientGone
from sglang_pd_sim.state import as_room
from sglang_pd_sim.textgen import count_prompt_tokens, fake_tokens, prompt_key

log = logging.getLogger("sglang_pd_sim")

MAX_TOKENS_CAP = 65536
# a decode long-polls GET /sim/kv/<room> for at most 1 s at a time (handoff.py): silent longer = gone
DECODE_ALIVE_S = 2.5
# sglang/srt/environ.py SGLANG_FORCE_STREAM_INTERVAL: how often a request not streamed hears of its new tokens
FORCE_STREAM_INTERVAL = 50


def bootstrap_timeout() -> float:
    """sglang's own SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (sglang/srt/environ.py, EnvInt(300))."""
    try:
        return float(os.environ.get("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT") or 300)
    except ValueError:
        return 300.0


def stop_strings(kind: str, req: dict) -> list[str]:
    """The request's stop strings: sampling_params.stop of /generate, `stop` of an OpenAI request (a string or a
    list; sglang/srt/entrypoints/openai/protocol.py CompletionRequest / ChatCompletionRequest.stop, passed on as
    sampling_params["stop"] by serving_completions.py and serving_chat.py)."""
    if kind == "generate":
        sp = req.get("sampling_params")
        stop = sp.get("stop") if isinstance(sp, dict) else None
    else:
        stop = req.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    return [s for s in stop if isinstance(s, str) and s] if isinstance(stop, list) else []


def cut_at_stop(toks: list, stops: list[str]) -> tuple[list, str | None, str]:
    """(the tokens up to the one that completed a stop string, the string matched or None, the text).

    sglang 0.5.23: Req.check_finished (sglang/srt/managers/schedule_batch.py) ends a request with
    FINISH_MATCHED_STR(matched=S) once S is in the decoded output, keeping the token that completed it (it counts
    in completion_tokens); the detokenizer's trim_matched_stop (managers/detokenizer_manager.py) cuts the text
    before S (no_stop_trim false). The first stop string to appear wins.
    """
    text = ""
    for i, (_token_id, piece) in enumerate(toks):
        text += piece
        hits = [(text.find(s), s) for s in stops if s in text]
        if hits:
            pos, matched = min(hits)
            return toks[: i + 1], matched, text[:pos]
    return toks, None, text


def stream_pieces(toks: list, text: str) -> list[str]:
    """One text delta per token whose concatenation is TEXT (the output trimmed at its stop string)."""
    pieces, shown = [], 0
    full = ""
    for _token_id, piece in toks:
        full += piece
        upto = min(len(full), len(text))
        pieces.append(text[shown:upto])
        shown = upto
    return pieces


def choice(finish, matched, **content) -> dict:
    """One choice of an OpenAI-compatible answer: CONTENT is its text, message or delta (protocol.py)."""
    return {"index": 0, **content, "logprobs": None, "finish_reason": finish, "matched_stop": matched}


class GenerationMixin(HandoffMixin):
    # --- generation ---
    def error(self, kind: str, status: int, message: str) -> None:
        if kind == "generate":
            body = {"error": {"message": message}}
        else:
            etype = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
                status, "InternalServerError"
            )
            body = {"object": "error", "message": message, "type": etype, "param": None, "code": status}
        self.send_json(status, body)

    def generation(self, kind: str) -> None:
        st = self.state
        raw = self.read_body()
        try:
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            self.error(kind, 400, f"Invalid request body: {exc}")
            return
        rid = req.get("rid")
        self._rid = rid if isinstance(rid, str) else uuid.uuid4().hex
        room = req.get("bootstrap_room")
        self._room = room
        if st.knobs.fail_generate is not None:
            self._note = "simulated-failure"
            self.error(kind, st.knobs.fail_generate, "Simulated failure (SGLANG_SIM_FAIL)")
            self.after_generation()
            return

        prompt, max_tokens, stream = self.gen_params(kind, req)
        if max_tokens is None:
            max_tokens = st.knobs.default_max_tokens
        try:
            max_tokens = max(0, min(int(max_tokens), MAX_TOKENS_CAP))
        except (TypeError, ValueError):
            self.error(kind, 400, f"max tokens must be an integer, got {max_tokens!r}")
            return
        n = self.sample_count(kind, req)
        host, port = req.get("bootstrap_host"), req.get("bootstrap_port")
        rooms = room if isinstance(room, list) else [room]
        if n > 1 and st.role in ("prefill", "decode"):
            # Parallel sampling in PD, as sglang 0.5.23 does it: GenerateReqInput._normalize_bootstrap_params
            # (sglang/srt/managers/io_struct.py) expands the fields, then TokenizerManager._handle_batch_request
            # (sglang/srt/managers/tokenizer_manager.py) sends a prefix warmup and every one of the n samples
            # as copies of obj[0]: all of them carry bootstrap_room[0] (host[0], port[0]); the router's other
            # rooms are never used. See parallel_samples() for what that does to the transfer.
            rooms = rooms[:1]
            host = host[0] if isinstance(host, list) and host else host
            port = port[0] if isinstance(port, list) and port else port
        if st.role in ("prefill", "decode") and any(as_room(r) is None for r in rooms):
            # sglang/srt/managers/scheduler.py (handle_generate_request): a disaggregated worker refuses a
            # request without a room (unless the transfer backend is "fake") with prepare_abort(..., 400);
            # TokenizerManager._handle_abort_finish_reason raises ValueError -> HTTP 400, on both roles.
            self.error(
                kind,
                400,
                f"Invalid request: Disaggregated request received without bootstrap room id. req.rid={self._rid!r}",
            )
            return

        batch = self.is_batch(kind, prompt)
        prompts = prompt if batch else [prompt]
        input_tokens = sum(count_prompt_tokens(p) for p in prompts)
        with st.lock:
            st.inflight += 1
        t0 = time.time()
        self.start_client_checks()
        held = 0  # null mode: KV tokens its prefill left in the pool for the decode steps
        try:
            st.life.wait_scheduler(st.stop)  # lifecycle.py: a stalled scheduler takes nothing in
            if st.role in ("prefill", "null"):
                if st.role == "prefill":
                    for r in rooms:
                        st.kv_seen(as_room(r), self._rid)
                    try:
                        self.wait_bootstrapped([as_room(r) for r in rooms])
                    except HandoffError as exc:
                        self.handoff_failed(kind, exc, input_tokens, t0, stream)
                        return
                pd_prefill = st.role == "prefill"
                with st.engine.prefill(input_tokens, st.stop, self.abort_if_client_gone, pd_prefill) as queued:
                    st.metrics.queued(queued)
                st.life.wait_scheduler(st.stop)  # a prefill that ran into a stall sends nothing
                if st.role == "prefill":
                    try:
                        self.hand_off([as_room(r) for r in rooms], input_tokens)
                        if n > 1 and st.role == "prefill":
                            self.parallel_samples(as_room(rooms[0]), "Bootstrapping")
                    except HandoffError as exc:
                        self.handoff_failed(kind, exc, input_tokens, t0, stream)
                        return
                    max_tokens = min(max_tokens, 1)  # a prefill worker answers after its first token
                else:
                    held = input_tokens
            else:
                try:
                    with st.engine.awaiting():
                        for r in rooms:
                            self.wait_for_kv(host, port, as_room(r), input_tokens)
                        if n > 1:
                            self.parallel_samples(as_room(rooms[0]), "WaitingForInput")
                except HandoffError as exc:
                    self.handoff_failed(kind, exc, input_tokens, t0, stream)
                    return
            self.respond(kind, req, prompts, batch, max_tokens=max_tokens, stream=stream, t0=t0, held=held)
        except ClientGone:
            if not self._finished:  # sglang aborts a request whose client went away, and counts it
                st.metrics.aborted()
            raise
        finally:
            with st.lock:
                st.inflight -= 1
            self.after_generation()

    def handoff_failed(self, kind: str, exc: HandoffError, input_tokens: int, t0: float, stream: bool) -> None:
        st = self.state
        st.metrics.handoff_failed(exc.phase)
        st.metrics.finished(prompt_tokens=input_tokens, completion_tokens=0, e2e=time.time() - t0, stream=stream)
        self._note = "handoff-failed"
        log.warning("%s", exc)
        self.error(kind, 500, str(exc))

    @staticmethod
    def sample_count(kind: str, req: dict) -> int:
        """n (parallel sampling): `n` of an OpenAI request, sampling_params.n of /generate."""
        if kind == "generate":
            sp = req.get("sampling_params")
            n = sp.get("n") if isinstance(sp, dict) else None
        else:
            n = req.get("n")
        try:
            return max(1, int(n)) if n is not None else 1
        except (TypeError, ValueError):
            return 1

    def parallel_samples(self, room: int, phase: str) -> None:
        """n > 1 in PD: the warmup and every sample share one bootstrap_room, so the samples never get KV.

        sglang 0.5.23 TokenizerManager._handle_batch_request (sglang/srt/managers/tokenizer_manager.py) sends
        the prefix warmup (max_new_tokens=0) and the n samples with the same bootstrap_room on both roles.
        The room's one transfer is consumed by the first pairing; the decode's samples then wait in
        KVPoll.WaitingForInput for a transfer that never comes, the prefill's in KVPoll.Bootstrapping for a
        decode that already finished with the room, until SGLANG_DISAGGREGATION_WAITING_TIMEOUT /
        SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (300 s; here SGLANG_SIM_HANDOFF_TIMEOUT) abort them with a
        KVTransferError: HTTP 500 (upstream: sgl-project/sglang pull requests 26486 and 40297, NIXL decode
        HTTP 500 for n > 1; not fixed in 0.5.23's tokenizer_manager.py, which reuses objs[i]).
        """
        st = self.state
        timeout = st.knobs.handoff_timeout
        st.stop.wait(timeout)
        raise HandoffError(
            f"KVTransferError(bootstrap_room={room}): Request {self._rid} timed out after {timeout:.1f}s in "
            f"KVPoll.{phase} (parallel sampling: the warmup and all samples share bootstrap_room {room}, "
            "as sglang 0.5.23 sends them)",
            "transfer" if phase == "WaitingForInput" else "bootstrap",
        )

    def wait_bootstrapped(self, rooms: list[int]) -> None:
        """Prefill: wait until the decode has connected for every room before computing its KV.

        sglang/srt/disaggregation/prefill.py PrefillBootstrapQueue.pop_bootstrapped: with the default
        --optimistic-prefill-attempts 0 a request leaves the bootstrap queue (and gets KV pages) only once its
        sender polls KVPoll.WaitingForInput, i.e. the decode sent its KV indices. Until then it holds no KV;
        CommonKVSender._check_bootstrap_timeout (sglang/srt/disaggregation/common/conn.py, every backend)
        fails it after SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT seconds (300; honoured here) in
        KVPoll.Bootstrapping, and the scheduler answers HTTP 500 (prefill.py handle_bootstrap_failure).
        With NIXL the decode's one message of KV indices and agent metadata is that connection: sglang's bootstrap
        thread (sglang/srt/disaggregation/nixl/conn.py `_start_bootstrap_thread`) stores it in transfer_infos and
        sets the room WaitingForInput at once, so a room whose NIXL offer is in (nixl_handoff.offered) is
        connected even if its decode died before it polled: the WRITE then finds the death (hand_off).
        """
        st = self.state
        timeout = bootstrap_timeout()
        start = time.time()
        deadline = time.monotonic() + timeout

        # while it waits the request is in the bootstrap queue, whose length sglang reports as
        # sglang:num_prefill_bootstrap_queue_reqs (scheduler_components/metrics_reporter.py): a request waiting here
        # for a decode that never comes is in flight, and its failure is counted only at the timeout
        def connected(room):
            return (st.kv.get(room) or {}).get("connected_at") or nixl_handoff.offered([room])

        with st.engine.bootstrap(), st.lock:
            while True:
                if all(connected(r) for r in rooms):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0 or st.stop.is_set():
                    break
                self.abort_if_client_gone()
                st.kv_changed.wait(min(remaining, 0.5))
        room = next(r for r in rooms if not connected(r))
        raise HandoffError(
            f"KVTransferError(bootstrap_room={room}): Request {room} timed out after {time.time() - start:.1f}s "
            "in KVPoll.Bootstrapping (no decode connected for this bootstrap_room)",
            "bootstrap",
        )

    def decode_alive(self, rooms: list[int]) -> bool:
        """Has the decode of every room polled recently (its long-poll is at most 1 s)?"""
        st = self.state
        now = time.time()
        with st.lock:
            return all(now - (st.kv.get(r) or {}).get("polled_at", 0) <= DECODE_ALIVE_S for r in rooms)

    def hand_off(self, rooms: list[int], input_tokens: int) -> None:
        """Prefill: move the KV to decode (simulated time and size), then mark the rooms transferred."""
        st = self.state
        # prefill.py process_batch_result_disagg_prefill: the batch's requests go to the in-flight queue, then
        # report_prefill_stats writes the gauges (engine.py report_prefill)
        st.engine.report_prefill(len(rooms))
        try:
            if st.knobs.handoff_drop:
                for room in rooms:
                    nixl_handoff.drop_offer(room)
                st.metrics.handoff_failed("transfer")
                return
            if not self.decode_alive(rooms) and not nixl_handoff.offered(rooms):
                self.dead_decode(rooms, input_tokens)  # raises: the room fails and its KV is freed below
            # with the NIXL handoff on, a decode that died after its offer is found by the real WRITE, as in
            # sglang: NIXL raises NIXL_ERR_REMOTE_DISCONNECT (nixl_handoff.PrefillKV.write), the room fails
            nbytes, seconds = kv_transfer(st.knobs, input_tokens)
            with st.engine.transfer():
                # with the NIXL handoff on, the room's bytes really go into the decode's offered slot
                # (nixl_handoff.py); the simulated transfer time is what is left of the latency model's
                try:
                    real = nixl_handoff.prefill_write(st.args.disaggregation_transfer_backend, rooms)
                except nixl_handoff.NixlHandoffError as exc:
                    raise HandoffError(f"KVTransferError(bootstrap_room={rooms[0]}): {exc}", "transfer") from exc
                left = max(0.0, seconds - (real["seconds"] if real else 0.0))
                if left > 0:
                    st.stop.wait(left)
            st.metrics.kv_transfer(nbytes, seconds)
            for room in rooms:
                st.kv_done(room)
        except BaseException:
            st.engine.release(input_tokens)
            raise
        else:
            st.engine.release(input_tokens)  # the prefill's KV leaves its pool once sent

    def dead_decode(self, rooms: list[int], input_tokens: int) -> None:
        """The decode sent its KV indices for the room (the prefill computed its KV), then died before the transfer.

        Every backend fails the room at once, the prefill frees its KV (prefill.py
        process_disagg_prefill_inflight_queue -> handle_inflight_transfer_failure) and the request gets HTTP 500:
        mooncake: the transfer to the dead session fails (sglang/srt/disaggregation/mooncake/conn.py
        transfer_worker: "Decode instance could be dead, remote mooncake session ... is not alive").
        nixl: the WRITE towards the dead decode raises nixlRemoteDisconnectError (NIXL_ERR_REMOTE_DISCONNECT) when
        it is posted, and a WRITE already in flight reports it from check_xfer_state within about 0.1 s: observed
        with the real nixl 1.5.1 / UCX, sglang's agent settings (UCX error mode `peer`, NIXL's default, which
        sglang keeps), host memory, UCX over TCP and over shared memory
        (tests/hardware/nixl_peer_death.py, tests/fixtures/kv_transport/nixl-peer-death-2026-12-04.md).
        sglang/srt/disaggregation/nixl/conn.py _post_xfer raises _NixlPostError("KVSender failed to post
        transfer: ...") and transfer_worker concludes the room Failed (conclude_failure, or update_status Failed
        when a handle's state cannot be read): no room is left waiting ("stranded") for a dead decode.
        """
        room = rooms[0]
        if self.state.args.disaggregation_transfer_backend == "nixl":
            raise HandoffError(
                f"KVTransferError(bootstrap_room={room}): KVSender failed to post transfer: NIXL_ERR_REMOTE_DISCONNECT",
                "transfer",
            )
        raise HandoffError(
            f"KVTransferError(bootstrap_room={room}): Failed to send kv chunk of {room}: Decode instance could be "
            "dead, remote session is not alive",
            "transfer",
        )

    def after_generation(self) -> None:
        st = self.state
        with st.lock:
            st.generations += 1
            count = st.generations
        if st.knobs.crash_after is not None and count >= st.knobs.crash_after:
            log.error("SGLANG_SIM_FAIL crash-after:%d reached: simulated crash (exit 1)", st.knobs.crash_after)
            logging.shutdown()
            os._exit(1)

    @staticmethod
    def gen_params(kind: str, req: dict):
        if kind == "generate":
            prompt = req.get("text")
            if prompt is None:
                prompt = req.get("input_ids")
            sp = req.get("sampling_params") or {}
            max_tokens = sp.get("max_new_tokens") if isinstance(sp, dict) else None
        elif kind == "completion":
            prompt = req.get("prompt")
            max_tokens = req.get("max_tokens")
        else:
            prompt = [
                {"role": m.get("role"), "content": m.get("content")}
                for m in (req.get("messages") or [])
                if isinstance(m, dict)
            ]
            max_tokens = req.get("max_completion_tokens")
            if max_tokens is None:
                max_tokens = req.get("max_tokens")
        return prompt, max_tokens, bool(req.get("stream"))

    @staticmethod
    def is_batch(kind: str, prompt) -> bool:
        """/generate with a list of prompts (not a list of token ids) answers a list."""
        return bool(
            kind == "generate" and isinstance(prompt, list) and prompt and not all(isinstance(x, int) for x in prompt)
        )

    def token_steps(self, n: int, held: dict, t0: float, stream: bool, items: int):
        """Yield the index of the last token of each output the tokenizer hears of; observe time to first token and
        inter-token latency per item, as TokenizerManager.collect_metrics (sglang/srt/managers/tokenizer_manager.py)
        does for each output it receives.

        A stream hears of every token (stream_interval 1). A request not streamed hears of its first token, then of
        every SGLANG_FORCE_STREAM_INTERVAL-th (sglang/srt/environ.py, 50) and of its last (the scheduler's
        stream_output_generation: `len(req.output_ids) % DEFAULT_FORCE_STREAM_INTERVAL == 0` when not req.stream),
        so its thread sleeps through the steps between at once (Engine.step: at most engine.MAX_WAIT_S)."""
        st = self.state
        last = None
        done = 0
        while done < n:
            st.life.wait_scheduler(st.stop)  # lifecycle.py: no step while the scheduler is stalled
            self.abort_if_client_gone()
            steps = 1 if stream or done == 0 else min(n - done, FORCE_STREAM_INTERVAL - done % FORCE_STREAM_INTERVAL)
            if st.role != "prefill":
                steps = st.engine.step(held, items, steps)
            done += steps
            st.life.scheduler_output()  # tokenizer_manager.py handle_loop: last_receive_tstamp
            now = time.time()
            for _item in range(items):
                if last is None:
                    st.metrics.first_token(now - t0, stream)
                else:
                    st.metrics.inter_token(now - last, steps)
            if last is None:
                self._first_token_at = now
            last = now
            yield done - 1

    def finish_metrics(self, outputs, t0: float, stream: bool) -> float:
        st = self.state
        now = time.time()
        self._finished = True
        first = self._first_token_at
        for _prompt, toks, prompt_tokens in outputs:
            st.metrics.finished(
                prompt_tokens=prompt_tokens,
                completion_tokens=len(toks),
                e2e=now - t0,
                stream=stream,
                decode_s=(now - first) if first is not None else None,
            )
        return now - t0

    def respond(self, kind: str, req: dict, prompts: list, batch: bool, *, max_tokens: int, stream: bool, t0: float,
                held: int) -> None:  # fmt: skip
        st = self.state
        stops = stop_strings(kind, req) if st.role != "prefill" else []
        cuts = [cut_at_stop(self.output_tokens(p, max_tokens), stops) for p in prompts]
        self._stops = [(matched, text) for _toks, matched, text in cuts]
        outputs = [(p, toks, count_prompt_tokens(p)) for p, (toks, _matched, _text) in zip(prompts, cuts, strict=True)]
        if st.role == "prefill":  # one token, no decode batch, no KV kept
            decoding = contextlib.nullcontext({"tokens": 0})
        else:  # a decode's KV arrives now; null mode's is in the pool since its prefill
            decoding = st.engine.decode(held, 0 if held else sum(o[2] for o in outputs))
        with decoding as slot:
            self.send_outputs(kind, req, outputs, batch, stream=stream, t0=t0, slot=slot, max_tokens=max_tokens)

    def output_tokens(self, prompt, max_tokens: int) -> list[tuple[int, str]]:
        """The test-only answer mode's answer where it knows the question (answers.py), else fake tokens."""
        knobs = self.state.knobs
        if knobs.answers and self.state.role != "prefill":
            text = answers.answer_text(knobs.answers, knobs.answer_error_rate, prompt)
            if text is not None:
                return answers.tokens(text, max_tokens)
        return fake_tokens(prompt_key(prompt), max_tokens)

    def send_outputs(self, kind: str, req: dict, outputs: list, batch: bool, *, stream: bool, t0: float,
                     slot: dict, max_tokens: int) -> None:  # fmt: skip
        st = self.state
        prompt_tokens = outputs[0][2]
        toks = outputs[0][1]
        self._note = (self._note + f" prompt_tokens={prompt_tokens} completion_tokens={len(toks)}").strip()
        model = req.get("model") or st.model_name
        created = int(time.time())
        matched, text = self._stops[0]
        # a stop string ended it (matched_stop: the string), or an answer that ended before max_tokens stopped by
        # itself (the answer mode's); else the length cut it
        finish = "stop" if matched is not None or len(toks) < max_tokens else "length"

        if not stream:
            for _step in self.token_steps(len(toks), slot, t0, stream, len(outputs)):
                pass
            e2e = self.finish_metrics(outputs, t0, stream)
            if kind == "generate":
                items = [self.generate_item(toks_, pt, e2e, done=True, stop=stop)
                         for (_prompt, toks_, pt), stop in zip(outputs, self._stops, strict=True)]  # fmt: skip
                self.send_json(200, items if batch else items[0])
            else:
                usage = self.usage(prompt_tokens, len(toks))
                content = {"text": text} if kind == "completion" else {"message": {
                    "role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}}  # fmt: skip
                obj = "text_completion" if kind == "completion" else "chat.completion"
                self.send_json(200, self.openai_body(obj, created, model, [choice(finish, matched, **content)], usage))
            return

        # streaming (SSE over chunked transfer encoding)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        include_usage = (
            bool((req.get("stream_options") or {}).get("include_usage"))
            if isinstance(req.get("stream_options"), dict)
            else False
        )
        if kind == "chat":
            self.sse(self.chat_chunk(model, created, {"role": "assistant", "content": ""}, None))
        pieces = stream_pieces(toks, text)
        for i in self.token_steps(len(toks), slot, t0, stream, len(outputs)):
            last = i == len(toks) - 1
            if kind == "generate":
                so_far = "".join(pieces[: i + 1])
                self.sse(self.generate_item(toks[: i + 1], prompt_tokens, time.time() - t0, done=last,
                                            stop=(matched, so_far) if last else (None, so_far)))  # fmt: skip
            elif kind == "completion":
                ended = choice(finish if last else None, matched if last else None, text=pieces[i])
                self.sse(self.openai_body("text_completion", created, model, [ended], None))
            else:
                self.sse(self.chat_chunk(model, created, {"role": None, "content": pieces[i]}, None))
        if kind == "generate" and not toks:
            self.sse(self.generate_item([], prompt_tokens, time.time() - t0, done=True))
        if kind == "chat":
            self.sse(self.chat_chunk(model, created, {"role": None, "content": None}, finish, matched))
        if kind != "generate" and include_usage:
            obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
            self.sse(self.openai_body(obj, created, model, [], self.usage(prompt_tokens, len(toks))))
        self.finish_metrics(outputs, t0, stream)
        self.write_chunk(b"data: [DONE]\n\n")
        self.write_chunk(b"")

    def generate_item(self, toks, prompt_tokens: int, e2e: float, done: bool, stop=(None, None)) -> dict:
        """sglang's /generate item; a matched stop string is the finish reason (schedule_batch.py
        FINISH_MATCHED_STR: {"type": "stop", "matched": S}) and the text ends before it."""
        n = len(toks)
        matched, text = stop
        if not done:
            reason = None
        elif matched is not None:
            reason = {"type": "stop", "matched": matched}
        else:
            reason = {"type": "length", "length": n}
        return {
            "text": "".join(p for _token_id, p in toks) if text is None else text,
            "output_ids": [t for t, _piece in toks],
            "meta_info": {
                "id": self._rid,
                "finish_reason": reason,
                "prompt_tokens": prompt_tokens,
                "weight_version": self.state.args.weight_version,
                "total_retractions": 0,
                "completion_tokens": n,
                "cached_tokens": 0,
                "e2e_latency": round(e2e, 6),
            },
        }

    def openai_body(self, obj, created, model, choices, usage) -> dict:
        """The body of an OpenAI-compatible answer or stream chunk (sglang/srt/entrypoints/openai/protocol.py)."""
        return {"id": self._rid, "object": obj, "created": created, "model": model, "choices": choices, "usage": usage}

    def chat_chunk(self, model, created, delta, finish, matched=None) -> dict:
        delta = {**delta, "reasoning_content": None, "tool_calls": None}
        return self.openai_body("chat.completion.chunk", created, model, [choice(finish, matched, delta=delta)], None)

    @staticmethod
    def usage(prompt_tokens: int, completion_tokens: int) -> dict:
        return {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }

    def sse(self, obj) -> None:
        self.write_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError as exc:
            raise ClientGone() from exc
