# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""The worker guard: turns a worker that is alive but silent into a crash systemd restarts (verdict.py decides,
roles/sglang_worker/files/sglang_guard.py runs it on each worker host)."""
