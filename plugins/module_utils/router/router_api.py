# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""The router's worker API, the one place the collection talks to it (the router_workers module): which workers
the router lists, adding and removing them, and waiting until the listing shows the change.

Used by the rolling restart (a batch out, then back in), by the retirement of instances the inventory no longer
has, and by the router play (the running router's list made the planned one, without a restart), each call reaching
every router of a host at once (converge_all; a deployment of several routers), and by the run's end check
(consistency_problems: every router lists exactly the planned workers, each healthy). Pure decisions
(changes, settled) plus one loop whose HTTP calls, sleep and clock are injected, so every outcome is tested
without a router (tests/unit/router/test_router_api.py).

sglang-router 0.3.2 (the sglang_router package's Rust server, src/server.rs and src/routers/http/pd_router.rs):
GET /workers answers {"workers": [{"id", "url", "worker_type", "is_healthy", ...}], ...}; POST /workers with
{"url", "worker_type", "bootstrap_port", "api_key"} and DELETE /workers/{id} answer at once (200/202) and take
effect in the background, so every change is waited for in the listing. A worker the router lists but has not
health-checked yet is listed with is_healthy false.

SMG 1.13 (smg-project/smg model_gateway/src/, checked against the smg 1.13.0 binary in the sandbox): the same
routes; GET /workers lists each worker with a `status` (pending, ready, not_ready, failed, draining) beside
is_healthy; POST /workers answers 202 and registers in the background, 409 while a worker of that URL is known or
being added; DELETE /workers/{id} answers 202, lists the worker as draining for a fixed settle time (5 s), then
drops it. A worker counts as healthy only when it is ready: a draining one is on its way out.
"""

import json
import time
from http.client import HTTPException
from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.disagg.sglang.plugins.module_utils.units.service_health import DIRECT

HTTP_TIMEOUT = 10  # seconds for one call
STATES = ("present", "absent", "exact")


class RouterApiError(Exception):
    """The router did not answer a worker-API call as expected."""


class RouterNotAnswering(RouterApiError):
    """Nothing answered at the router's address (not started yet, or down)."""


def desired_workers(workers):
    """The desired workers as {url, worker_type, bootstrap_port}: each as given, or a unit spec of the plan (its
    `role` is the worker type)."""
    return [
        {
            "url": w.get("url"),
            "worker_type": w.get("worker_type") or w.get("role"),
            "bootstrap_port": w.get("bootstrap_port"),
        }
        if isinstance(w, dict)
        else w
        for w in workers or []
    ]


def worker_problems(workers):
    """What is wrong with a desired worker list (desired_workers'), one message per worker: each needs a url and a
    worker_type of prefill or decode, and a prefill its bootstrap_port."""
    problems = []
    for i, worker in enumerate(workers or []):
        if not isinstance(worker, dict) or not str(worker.get("url") or "").startswith(("http://", "https://")):
            problems.append(f"workers[{i}]: a url (http://host:port) is needed, got {worker!r}")
        elif worker.get("worker_type") not in ("prefill", "decode"):
            problems.append(f"workers[{i}] ({worker['url']}): worker_type must be prefill or decode, got "
                            f"{worker.get('worker_type')!r}")  # fmt: skip
        elif worker["worker_type"] == "prefill" and worker.get("bootstrap_port") is None:
            problems.append(f"workers[{i}] ({worker['url']}): a prefill needs its bootstrap_port")
    return problems


def listed(answer, ready_statuses=None):
    """[{id, url, worker_type, healthy}] from the router's GET /workers answer (a dict). READY_STATUSES: where the
    router lists a status (SMG), a worker is healthy only with one of them."""
    workers = answer.get("workers") if isinstance(answer, dict) else None
    if not isinstance(workers, list):
        raise RouterApiError(f"GET /workers answered without a worker list: {str(answer)[:300]}")
    return [
        {
            "id": str(w.get("id", "")),
            "url": str(w.get("url", "")),
            "worker_type": str(w.get("worker_type", "")),
            "healthy": bool(w.get("is_healthy")) and (ready_statuses is None or w.get("status") in ready_statuses),
        }
        for w in workers
        if isinstance(w, dict)
    ]


def changes(current, desired, state, removable=None):
    """(to_add, to_remove): the desired workers ({url, worker_type, ...}) the router does not list yet, and the
    listed workers ({id, url, ...}) to take out, for STATE:
    present: add what is missing, take nothing out; absent: take the desired ones out; exact: both, and take out
    every listed worker that is not desired (the listing becomes exactly the desired set) - only those whose URL is
    in REMOVABLE where it is given (the workers the collection handed that router: a worker someone else added is
    left for the end check to name)."""
    if state not in STATES:
        raise RouterApiError(f"state {state!r}: one of {', '.join(STATES)}")
    wanted = {w["url"] for w in desired}
    have = {w["url"] for w in current}
    if state == "absent":
        return [], [w for w in current if w["url"] in wanted]
    to_add = [w for w in desired if w["url"] not in have]
    to_remove = (
        [w for w in current if w["url"] not in wanted and (removable is None or w["url"] in removable)]
        if state == "exact"
        else []
    )
    return to_add, to_remove


def settled(current, desired, state, removable=None):
    """Whether the listing shows STATE reached: present: every desired worker listed and healthy; absent: none of
    them listed; exact: the listed URLs are the desired ones, each healthy - where REMOVABLE is given, a listed
    worker outside it is not waited for (changes leaves it, for the end check to name)."""
    wanted = {w["url"] for w in desired}
    healthy = {w["url"] for w in current if w["healthy"]}
    if state == "absent":
        return not wanted & {w["url"] for w in current}
    if state == "exact":
        listed = {w["url"] for w in current}
        if removable is not None:
            listed = {u for u in listed if u in wanted or u in removable}
        return listed == wanted and wanted <= healthy
    return wanted <= healthy


def describe(current):
    """One line for a message: each listed worker with its type and health."""
    return ", ".join(f"{w['worker_type']} {w['url']} ({'healthy' if w['healthy'] else 'not healthy'})"
                     for w in current) or "no worker"  # fmt: skip


def add_body(worker, worker_api_key):
    """POST /workers body for one desired worker ({url, worker_type, bootstrap_port})."""
    body = {"url": worker["url"], "worker_type": worker["worker_type"]}
    if worker["worker_type"] == "prefill" and worker.get("bootstrap_port") is not None:
        body["bootstrap_port"] = int(worker["bootstrap_port"])
    if worker_api_key:
        body["api_key"] = worker_api_key
    return body


class SglangRouter:
    """sglang-router 0.3.2's worker API over HTTP. call(method, path, body) -> (status, parsed JSON or text)."""

    name = "sglang_router"
    ready_statuses = None  # sglang-router lists no status per worker

    def __init__(self, url, api_key="", timeout=HTTP_TIMEOUT, opener=open_url):
        self.url = url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout
        self.opener = opener

    def call(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        try:
            with self.opener(f"{self.url}{path}", method=method, data=data, headers=self.headers,
                             timeout=self.timeout, **DIRECT) as resp:  # fmt: skip
                status, text = resp.status, resp.read(1 << 20).decode("utf-8", "replace")
        except HTTPError as exc:
            status, text = exc.code, exc.read(2000).decode("utf-8", "replace")
        except (URLError, OSError, HTTPException, UrlsConnectionError) as exc:
            raise RouterNotAnswering(f"{method} {self.url}{path}: no answer ({getattr(exc, 'reason', exc)})") from exc
        try:
            return status, json.loads(text) if text else {}
        except ValueError:
            return status, text

    def workers(self):
        status, answer = self.call("GET", "/workers")
        if status != 200:
            raise RouterApiError(f"GET {self.url}/workers answered {status}: {str(answer)[:300]}")
        return listed(answer, self.ready_statuses)

    def add(self, worker, worker_api_key):
        status, answer = self.call("POST", "/workers", add_body(worker, worker_api_key))
        if status not in (200, 201, 202):
            raise RouterApiError(f"POST {self.url}/workers ({worker['url']}) answered {status}: {str(answer)[:300]}")

    def remove(self, worker):
        status, answer = self.call("DELETE", f"/workers/{worker['id']}")
        if status not in (200, 202, 204, 404):
            raise RouterApiError(f"DELETE {self.url}/workers/{worker['id']} ({worker['url']}) answered {status}: "
                                 f"{str(answer)[:300]}")  # fmt: skip


class SmgRouter(SglangRouter):
    """SMG 1.13's worker API: as sglang-router's, with a status per worker and 409 for a URL it already has."""

    name = "smg"
    ready_statuses = ("ready",)

    def add(self, worker, worker_api_key):
        status, answer = self.call("POST", "/workers", add_body(worker, worker_api_key))
        # 409: SMG has the URL already, or is registering it (a POST of an earlier reading): the listing decides
        if status not in (200, 201, 202, 409):
            raise RouterApiError(f"POST {self.url}/workers ({worker['url']}) answered {status}: {str(answer)[:300]}")


IMPLEMENTATIONS = {SglangRouter.name: SglangRouter, SmgRouter.name: SmgRouter}


def converge(api, desired, state, options, *, sleep=time.sleep, clock=time.monotonic):
    """Make the router's listing reach STATE for DESIRED and wait until it shows it.

    options: {worker_api_key, timeout (seconds to wait for the listing), poll (seconds between readings),
    check_mode, removable (changes' REMOVABLE; None: any)}. Returns {changed, added, removed, workers (the last
    listing), settled, waited}; a listing that does not settle within the timeout returns settled False (the
    caller fails, naming what the router lists).
    """
    started = clock()
    deadline = started + float(options.get("timeout", 60))
    while True:  # a router started a moment ago answers once it listens: wait for it, within the timeout
        try:
            current = api.workers()
            break
        except RouterNotAnswering:
            if clock() >= deadline:
                raise
            sleep(float(options.get("poll", 0.25)))
    removable = options.get("removable")
    to_add, to_remove = changes(current, desired, state, None if removable is None else set(removable))
    result = {
        "changed": bool(to_add or to_remove),
        "added": [w["url"] for w in to_add],
        "removed": [w["url"] for w in to_remove],
    }
    if options.get("check_mode"):
        return {**result, "workers": current, "settled": not result["changed"], "waited": 0.0}
    for worker in to_remove:
        api.remove(worker)
    for worker in to_add:
        api.add(worker, options.get("worker_api_key") or "")
    if result["changed"]:
        current = api.workers()
    while not settled(current, desired, state, removable):
        if clock() >= deadline:
            return {**result, "workers": current, "settled": False, "waited": round(clock() - started, 1)}
        sleep(float(options.get("poll", 0.25)))
        current = api.workers()
    return {**result, "workers": current, "settled": True, "waited": round(clock() - started, 1)}


def _first_reading(api, deadline, options, sleep, clock):
    """The router's listing, waiting (within the deadline) for a router that does not answer yet."""
    while True:  # a router started a moment ago answers once it listens: wait for it, within the timeout
        try:
            return api.workers()
        except RouterNotAnswering:
            if clock() >= deadline:
                raise
            sleep(float(options.get("poll", 0.25)))


def converge_all(apis, desired, state, options, *, sleep=time.sleep, clock=time.monotonic):
    """converge for every router of APIS ({name: api}) at once: each router's changes are made first, then every
    listing is read until each shows STATE, so N routers cost one wait, not N (SMG keeps a removed worker draining
    for its settle time, 5 s).

    options: converge's, and removable (changes' REMOVABLE). Returns {changed, added, removed (URLs, over all
    routers), settled (every router), waited, routers: [{name, url, added, removed, workers, settled}]}."""
    started = clock()
    deadline = started + float(options.get("timeout", 60))
    removable = options.get("removable")
    routers = []
    for name, api in apis.items():
        current = _first_reading(api, deadline, options, sleep, clock)
        to_add, to_remove = changes(current, desired, state, None if removable is None else set(removable))
        routers.append({"name": name, "url": getattr(api, "url", ""), "api": api, "workers": current,
                        "added": [w["url"] for w in to_add], "removed": [w["url"] for w in to_remove],
                        "to_add": to_add, "to_remove": to_remove})  # fmt: skip
    if not options.get("check_mode"):
        for router in routers:
            for worker in router["to_remove"]:
                router["api"].remove(worker)
            for worker in router["to_add"]:
                router["api"].add(worker, options.get("worker_api_key") or "")
            if router["to_add"] or router["to_remove"]:
                router["workers"] = router["api"].workers()
        while True:
            waiting = [r for r in routers if not settled(r["workers"], desired, state, removable)]
            if not waiting or clock() >= deadline:
                break
            sleep(float(options.get("poll", 0.25)))
            for router in waiting:
                router["workers"] = router["api"].workers()
    for router in routers:
        changed = bool(router["added"] or router["removed"])
        router["settled"] = (
            not changed if options.get("check_mode") else settled(router["workers"], desired, state, removable)
        )
        for key in ("api", "to_add", "to_remove"):
            del router[key]
    return {
        "changed": any(r["added"] or r["removed"] for r in routers),
        "added": sorted({u for r in routers for u in r["added"]}),
        "removed": sorted({u for r in routers for u in r["removed"]}),
        "settled": all(r["settled"] for r in routers),
        "waited": 0.0 if options.get("check_mode") else round(clock() - started, 1),
        "routers": routers,
    }


def consistency_problems(router, current, desired):
    """The end check of a run on one router's listing: {foreign: [message], pending: [message]}. foreign: each
    worker the router lists that the plan does not have (it would get requests the plan does not know of: the run
    fails at once, naming router and worker); pending: each planned worker the router does not list, or lists
    unhealthy (waited for, within the check's bound). ROUTER names the router (its unit and host)."""
    wanted = {w["url"]: w for w in desired}
    have = {w["url"]: w for w in current}
    foreign = [
        f"router {router} lists {w['worker_type'] or 'worker'} {w['url']} (id {w['id'] or '?'}), which the plan "
        "does not have: take it out of that router (DELETE /workers/{id}) or declare its instance in the inventory"
        for w in current
        if w["url"] not in wanted
    ]
    pending = [f"router {router} does not list {w['worker_type']} {url}" for url, w in wanted.items()
               if url not in have]  # fmt: skip
    pending += [f"router {router} lists {w['worker_type']} {url} not healthy" for url, w in wanted.items()
                if url in have and not have[url]["healthy"]]  # fmt: skip
    return {"foreign": foreign, "pending": pending}


def check_all(apis, desired, options, *, sleep=time.sleep, clock=time.monotonic):
    """The end check over every router of APIS ({name: api}): read each listing until every router lists exactly
    DESIRED, each healthy, for at most options' timeout; a worker a router lists that DESIRED does not have ends the
    check at once. Changes nothing. Returns {problems (foreign first; empty when consistent), waited,
    routers: [{name, url, workers}]}."""
    started = clock()
    deadline = started + float(options.get("timeout", 60))
    listings = {name: _first_reading(api, deadline, options, sleep, clock) for name, api in apis.items()}
    while True:
        found = {name: consistency_problems(name, listing, desired) for name, listing in listings.items()}
        foreign = [m for f in found.values() for m in f["foreign"]]
        pending = [m for f in found.values() for m in f["pending"]]
        if foreign or not pending or clock() >= deadline:
            break
        sleep(float(options.get("poll", 0.25)))
        listings = {name: apis[name].workers() if found[name]["pending"] else listing
                    for name, listing in listings.items()}  # fmt: skip
    return {
        "problems": foreign + pending,
        "waited": round(clock() - started, 1),
        "routers": [
            {"name": name, "url": getattr(apis[name], "url", ""), "workers": listing}
            for name, listing in listings.items()
        ],
    }
