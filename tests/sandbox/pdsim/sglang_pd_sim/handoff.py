"""PD handoff on a decode: wait for the prefill's KV of a bootstrap_room, check both sides agree.

The decode polls the prefill's bootstrap server (GET /sim/kv/<room> at bootstrap_host:bootstrap_port) until
that room is transferred, checks that both sides agree on page size, KV dtype and transfer backend, and
otherwise fails after SGLANG_SIM_HANDOFF_TIMEOUT, as SGLang aborts a request whose KV transfer failed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from sglang_pd_sim import heartbeat, nixl_handoff
from sglang_pd_sim.httpbase import BaseHandler

POLL_INTERVAL = 0.02
# decode talks to a prefill directly, never through an HTTP proxy from the environment
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HandoffError(Exception):
    """The KV of a bootstrap_room never arrived (or arrived incompatible).

    phase: "bootstrap" (never connected, or the two sides disagree: sglang counts
    sglang:num_bootstrap_failed_reqs_total) or "transfer" (the prefill had the room, its KV never
    arrived: sglang:num_transfer_failed_reqs_total), as sglang/srt/disaggregation/decode.py counts them.
    """

    def __init__(self, message: str, phase: str = "bootstrap"):
        super().__init__(message)
        self.phase = phase


class HandoffMixin(BaseHandler):
    def wait_for_kv(self, host, port, room: int, input_tokens: int = 0) -> None:
        """Waits for the room's KV; with the NIXL handoff on (nixl_handoff.py), the room's bytes come through NIXL
        into a slot this decode offered the prefill first, and are checked before the decode generates."""
        self._beat = None  # (bootstrap address, token) once the prefill was reached: the heartbeat watches it
        try:
            self._wait_for_kv(host, port, room, input_tokens)
        except BaseException:
            nixl_handoff.release(self.state.args.disaggregation_transfer_backend, room)
            raise
        finally:
            if self._beat is not None:
                self.state.heartbeat.untrack(self._beat[0])

    def _heartbeat(self, netloc: str, room: int, phase: str) -> None:
        """sglang/srt/disaggregation/common/conn.py: the receiver's room is tied to its prefill's bootstrap address
        (addr_to_rooms_tracker) from its creation (_wait_for_kv) or, for a prefill the decode did not know, from the
        first contact on; when the heartbeat drops that prefill (`_handle_node_failure`, heartbeat.py) the room
        fails: HTTP 500 after about two heartbeat periods."""
        st = self.state
        if self._beat is None:
            self._beat = (netloc, st.heartbeat.track(netloc))
        elif st.heartbeat.failed(*self._beat):
            raise HandoffError(
                f"KVTransferError(bootstrap_room={room}): Lost connection with prefill instance (bootstrap_addr: "
                f"{netloc}) after {st.heartbeat.max_failures} missed heartbeat(s) every {st.heartbeat.interval:g}s",
                "transfer" if phase == "WaitingForInput" else "bootstrap",
            )

    def _wait_for_kv(self, host, port, room: int, input_tokens: int) -> None:
        st = self.state
        backend = st.args.disaggregation_transfer_backend
        timeout = st.knobs.handoff_timeout
        if not host:
            raise HandoffError(f"KVTransferError(bootstrap_room={room}): request {self._rid} has no bootstrap_host")
        port = port if port not in (None, "") else 8998  # a null bootstrap_port: SGLang's default
        netloc = f"[{host}]:{port}" if ":" in str(host) and not str(host).startswith("[") else f"{host}:{port}"
        deadline = time.monotonic() + timeout
        phase, why = "Bootstrapping", "no answer from the prefill bootstrap server"
        beat = st.heartbeat
        if beat.known_now(netloc):
            # sglang/srt/disaggregation/common/conn.py CommonKVReceiver.__init__ (decode.py
            # DecodePreallocQueue.add, when the request arrives): the room joins addr_to_rooms_tracker of a prefill
            # in prefill_info_table at once, so the heartbeat fails it even if that prefill never answers for it
            self._beat = (netloc, beat.track(netloc))
        cycle = beat.ensure_cycle(netloc)  # an unknown prefill: decode.py _ensure_prefill_info's retry cycle
        # sglang's decode sends its KV destination to the prefill's bootstrap server before anything is written
        # (sglang/srt/disaggregation/nixl/conn.py NixlKVReceiver.init): here the NIXL offer, before the first poll
        offer = nixl_handoff.decode_offer(backend, room, input_tokens, st.knobs.kv_bytes_per_token)
        while offer is not None:
            try:
                nixl_handoff.send_offer(DIRECT, netloc, room, offer)
                break
            except OSError as exc:
                if time.monotonic() >= deadline or st.stop.is_set():
                    raise HandoffError(
                        f"KVTransferError(bootstrap_room={room}): NIXL offer not delivered: {exc}"
                    ) from exc
                time.sleep(POLL_INTERVAL)
        while True:
            self.abort_if_client_gone()  # the decode's request waits in its prealloc / transfer queue
            wait = max(0.0, min(1.0, deadline - time.monotonic()))  # long-poll: answered as soon as KV lands
            url = f"http://{netloc}/sim/kv/{room}?wait={wait:.3f}"
            if self._beat is None:
                # a prefill this decode does not know: looked up first, once a second (decode.py
                # _ensure_prefill_info -> common/conn.py try_ensure_parallel_info: GET /route, 200 or a miss; a
                # restarted prefill's bootstrap server answers 503 until its weights are loaded)
                if self._look_up(netloc):
                    self._beat = (netloc, beat.track(netloc))
                else:
                    beat.ensure_missed(netloc, time.monotonic())
                    if beat.ensure_aborted(netloc, cycle):
                        raise HandoffError(
                            f"KVTransferError(bootstrap_room={room}): Could not fetch prefill parallel info from "
                            f"{netloc} after {heartbeat.ENSURE_RETRIES} attempts"
                        )
                    why = f"prefill {netloc} not looked up yet (GET /route)"
                    if time.monotonic() >= deadline:
                        raise HandoffError(
                            f"KVTransferError(bootstrap_room={room}): Request {self._rid} timed out after "
                            f"{timeout:.1f}s in KVPoll.Bootstrapping ({why})"
                        )
                    if st.stop.wait(heartbeat.ENSURE_INTERVAL):
                        raise HandoffError(f"KVTransferError(bootstrap_room={room}): server is shutting down")
                    continue
            self._heartbeat(netloc, room, phase)  # its prefill dropped by the heartbeat: the room fails
            try:
                # a poll its prefill leaves unanswered (frozen) ends half a second after the long-poll, so the
                # heartbeat's verdict ends the room within a second and a half
                with DIRECT.open(url, timeout=wait + 0.5) as resp:
                    data = json.loads(resp.read() or b"{}")
                self._heartbeat(netloc, room, phase)  # reached: from now on the heartbeat watches this prefill
                if data.get("state") == "transferred":
                    self.check_compat(data.get("handoff") or {}, room, netloc)
                    self._note = f"handoff={1000 * (time.monotonic() - deadline + timeout):.0f}ms"
                    try:
                        got = nixl_handoff.decode_verify(backend, room)
                    except nixl_handoff.NixlHandoffError as exc:
                        raise HandoffError(f"KVTransferError(bootstrap_room={room}): {exc}", "transfer") from exc
                    if got is not None:
                        st.nixl_rooms.append({"bootstrap_room": room, **got})
                        self._note += f" nixl={got.get('bytes_verified')}B"
                    return
                phase, why = "WaitingForInput", "prefill has the room but its KV transfer has not completed"
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    self._heartbeat(netloc, room, phase)  # the bootstrap server answered: reached
                    try:
                        self.check_compat((json.loads(exc.read() or b"{}")).get("handoff") or {}, room, netloc)
                    except ValueError:
                        pass
                    phase, why = "Bootstrapping", "prefill has not seen this bootstrap_room"
                else:
                    why = f"bootstrap server answered HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                why = f"cannot reach prefill bootstrap server: {exc}"
            if time.monotonic() >= deadline:
                raise HandoffError(
                    f"KVTransferError(bootstrap_room={room}): Request {self._rid} timed out after {timeout:.1f}s "
                    f"in KVPoll.{phase} (bootstrap server {netloc}: {why})",
                    "transfer" if phase == "WaitingForInput" else "bootstrap",
                )
            if st.stop.is_set():
                raise HandoffError(f"KVTransferError(bootstrap_room={room}): server is shutting down")
            time.sleep(POLL_INTERVAL)

    @staticmethod
    def _look_up(netloc: str) -> bool:
        """common/conn.py try_ensure_parallel_info: the prefill's parallel info from its bootstrap server."""
        url = (f"http://{netloc}/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1"
               "&target_pp_rank=-1")  # fmt: skip
        try:
            with DIRECT.open(url, timeout=heartbeat.ROUTE_TIMEOUT) as resp:
                return resp.status == 200
        except (OSError, ValueError):
            return False

    def check_compat(self, prefill: dict, room: int, netloc: str) -> None:
        st = self.state
        ours = st.handoff_info()
        if prefill.get("disaggregation_mode") not in (None, "prefill"):
            raise HandoffError(
                f"KVTransferError(bootstrap_room={room}): {netloc} is a {prefill.get('disaggregation_mode')} "
                "worker, not a prefill bootstrap server"
            )
        for key in ("page_size", "kv_cache_dtype", "transfer_backend"):
            if key in prefill and prefill[key] != ours[key]:
                raise HandoffError(
                    f"KVTransferError(bootstrap_room={room}): {key} mismatch between prefill ({prefill[key]}) "
                    f"and decode ({ours[key]}); set the same value on both roles"
                )
