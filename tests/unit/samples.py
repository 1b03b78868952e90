"""The sample PD pair the unit tests render: the 1P1D TP4+TP4 instances of the deployment notes; a loopback HTTP
server (a quiet handler base, a module-scoped fixture) for the tests of the modules that ask a URL."""

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

INSTANCES = {
    "prefill": {"name": "prefill0", "tp": 4, "port": 30000, "bootstrap_port": 8998, "dist_init_port": 30335},
    "decode": {"name": "decode0", "tp": 4, "port": 30001, "bootstrap_port": 8999, "dist_init_port": 30435},
}
# What the worker role passes besides the profile (identity of the model, where workers bind).
SETTINGS = {
    "model_path": "/models/DeepSeek-V4-Flash",
    "served_model_name": "deepseek-v4-flash",
    "host": "127.0.0.1",
    "dist_init_host": "127.0.0.1",
}


# The worker units' inputs besides the instances: the shipped profile, a placement on the 8-GPU host, what the role
# passes (tests/unit/units/test_units.py renders them).
PROFILE = yaml.safe_load((REPO / "profiles" / "deepseek_v4_flash_sm120.yml").read_text())
UNIT_SETTINGS = {
    **SETTINGS,
    "venv": "/opt/sglang/venv",
    "server_module": "sglang.launch_server",
    "numactl_path": "/usr/bin/numactl",
    "unit_prefix": "sglang-",
}
PLACEMENT = [
    {"name": "prefill0", "gpus": [0, 1, 2, 3], "numa_node": 0, "cpus": list(range(32)), "warnings": []},
    {"name": "decode0", "gpus": [4, 5, 6, 7], "numa_node": 1, "cpus": list(range(32, 64)), "warnings": []},
]

# What `nvidia-smi -q` says of the GPU of the lent H200 VM (tests/fixtures/host_readiness/h200-vm-2026-12-04).
H200_VM_GPU = {
    "persistence_mode": "Enabled",
    "bar1_total_mib": 262144,
    "ecc_mode_current": "Enabled",
    "max_sm_clock_mhz": 1980,
    "pcie_gen_current": 5,
    "pcie_width_current": 16,
}

KV_LABELS = 'model_name="m",engine_type="prefill",tp_rank="0",pp_rank="0",moe_ep_rank="0"'


def kv_page(count, speed_sum, latency_sum, failed=0):
    """A prefill's /metrics page of sglang 0.5.23's KV transfer series: COUNT transfers, their sums, FAILED."""
    return "\n".join(
        [
            "# HELP sglang:kv_transfer_speed_gb_s Histogram of KV cache transfer speed in GB/s.",
            "# TYPE sglang:kv_transfer_speed_gb_s histogram",
            f'sglang:kv_transfer_speed_gb_s_bucket{{{KV_LABELS},le="+Inf"}} {count}',
            f"sglang:kv_transfer_speed_gb_s_sum{{{KV_LABELS}}} {speed_sum}",
            f"sglang:kv_transfer_speed_gb_s_count{{{KV_LABELS}}} {count}",
            f"sglang:kv_transfer_latency_ms_sum{{{KV_LABELS}}} {latency_sum}",
            f"sglang:kv_transfer_latency_ms_count{{{KV_LABELS}}} {count}",
            f"sglang:num_transfer_failed_reqs_total{{{KV_LABELS}}} {failed}",
        ]
    )


@contextlib.contextmanager
def loopback_server(handler):
    """HANDLER (a BaseHTTPRequestHandler class) served on 127.0.0.1 at a free port, in a thread; yields the base URL
    and shuts the server down after."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class QuietHandler(BaseHTTPRequestHandler):
    """A loopback handler that answers with one call and logs nothing (pytest shows what a test asserts, not the
    server's access log)."""

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def loopback_fixture(handler):
    """A module-scoped fixture `server`: the base URL of HANDLER served on loopback for the module's tests."""

    @pytest.fixture(scope="module")
    def server():
        with loopback_server(handler) as url:
            yield url

    return server


class Clock:
    """A clock for code that takes (now, sleep): time passes only when the code sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
