"""A notification callback of tests/bench/converge_speed.py: writes, as JSON lines to the file named by
BENCH_TIMING_FILE, the wall-clock time (time.time()) of the playbook's start, of each task's start (with its name,
its file:line and its action), of each task result per host (status, action) and of the playbook's end. Enabled only
by that script (ANSIBLE_CALLBACK_PLUGINS + ANSIBLE_CALLBACKS_ENABLED=bench_timing); stdout stays the default's.
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: bench_timing
type: notification
short_description: task start times and results as JSON lines, for tests/bench/converge_speed.py
description: Writes to the file named by the BENCH_TIMING_FILE environment variable; does nothing without it.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "bench_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._path = os.environ.get("BENCH_TIMING_FILE")

    def _write(self, **event):
        if self._path:
            with open(self._path, "a", encoding="utf-8") as out:
                out.write(json.dumps({"t": time.time(), **event}) + "\n")

    def v2_playbook_on_start(self, playbook):
        self._write(event="start")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._write(event="task", name=task.get_name(), path=task.get_path() or "", action=task.action)

    def _result(self, status, result):
        # ansible-core 2.19's public CallbackTaskResult: host, task, result
        self._write(event="result", status=status, host=result.host.get_name(), name=result.task.get_name(),
                    action=result.task.action, changed=bool(result.result.get("changed")))  # fmt: skip

    def v2_runner_on_ok(self, result):
        self._result("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed", result)

    def v2_runner_on_skipped(self, result):
        self._result("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_playbook_on_stats(self, stats):
        self._write(event="end")
