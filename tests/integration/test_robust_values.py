"""Valid but awkward values converge, reach the processes byte for byte, and serve through the router.

One sandbox host (prefill, decode and router on it) is converged with values that systemd, an environment file or
argparse could mangle: secrets with quotes, $, backticks, spaces, backslashes, % and a leading dash; an extra
environment variable and a served model name with the same characters (so both systemd's ExecStart= rules, where
% and $ expand, and its Environment= rules, where only % does, are crossed); a model directory whose path holds
spaces (made on the host first, with the tokenizer files of the sandbox model).

Then, as root inside the guest:
  * /proc/PID/cmdline of each worker holds the model path and the served model name as exact arguments;
  * /proc/PID/environ of each worker holds HF_TOKEN and the extra variable exactly;
  * the router's command line holds no key, and its key works: a request with it answers 200, without it 401;
  * a second run changes nothing (the quoting renders the same units again);
  * requests through the router answer.
"""

import json
import os
import shlex

import pytest
from sandbox_hosts import VENV_BIN, down, one_host, run

SANDBOX = os.environ.get("DISAGG_ROBUST_SANDBOX", "pytest-robust")
HOST = f"{SANDBOX}-1"
SANDBOX_MODEL = "/opt/models/DeepSeek-V4-Flash"
MODEL_PATH = "/opt/models/Deep Seek V4 Flash"
# Everything an environment file, an Exec line, a shell or argparse could take for syntax, and a leading dash.
API_KEY = "-rk $HOME \"dq\" 'sq' `id` \\back %n %% ${X} ~!#&*()[]{}|;:<>?"
HF_TOKEN = "--hf_$(whoami) `x` \\n %i '\"' tail"
NOTE = "a $HOME b ${USER} c %n %% d \"q\" e \\ f `g` 'h' -i"
SERVED = "deep seek \"v4\" $x %n \\ `y` 'z'"
VALUES = {
    "sglang_model_path": MODEL_PATH,
    "sglang_served_model_name": SERVED,
    "sglang_router_api_key": API_KEY,
    "sglang_hf_token": HF_TOKEN,
    "sglang_prefill_extra_env": {"PDSIM_ROBUST_NOTE": NOTE},
    "sglang_decode_extra_env": {"PDSIM_ROBUST_NOTE": NOTE},
}

# Prints, for each worker unit, the command line and environment of its processes that run the server module (read
# from /proc as root), as JSON. (The router sets its process title over its argv and environment: its key is
# proved by requests instead.)
PROCS = r"""
import glob, json, re
out = {}
for cg in glob.glob("/proc/[0-9]*/cgroup"):
    pid = cg.split("/")[2]
    try:
        units = re.findall(r"/(sglang-[^/\n]+)\.service", open(cg).read())
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")[:-1]
    except OSError:
        continue
    if units and b"sglang_pd_sim" in argv:
        out.setdefault(units[-1], []).append({
            "argv": [a.decode("utf-8", "surrogateescape") for a in argv],
            "env": dict(e.decode("utf-8", "surrogateescape").split("=", 1) for e in env if b"=" in e),
        })
print(json.dumps(out))
"""

# One request through the router from inside the guest; the key comes on stdin, never on a command line.
REQUEST = r"""
import json, sys, urllib.error, urllib.request
key = sys.stdin.read()
body = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}).encode()
headers = {"Content-Type": "application/json"}
if key:
    headers["Authorization"] = "Bearer " + key
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(urllib.request.Request("http://127.0.0.1:8000/generate", body, headers), timeout=30) as r:
        print(json.dumps({"status": r.status, "text": json.loads(r.read()).get("text")}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "text": None}))
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    env = one_host(tmp_path_factory, SANDBOX, "robust")
    extra = env["dir"] / "values.json"
    extra.write_text(json.dumps(VALUES))
    env["extra"] = str(extra)
    # The model directory with spaces exists on the host before the run (preflight looks for it).
    on_host(env, f"cp -a {SANDBOX_MODEL} {shlex.quote(MODEL_PATH)} && ls {shlex.quote(MODEL_PATH)}")
    env["first"] = playbook(env)
    yield env
    down(SANDBOX)


def playbook(env, *args, check=True):
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", env["inventory"], "site.yml", "-e", f"@{env['extra']}", *args]
    return run(cmd, check=check)


def on_host(env, command, stdin=None):
    return run(["ssh", "-F", env["ssh_config"], HOST, command], stdin=stdin).stdout


def processes(env):
    return json.loads(on_host(env, f"python3 -c {shlex.quote(PROCS)}").strip().splitlines()[-1])


def request(env, key):
    return json.loads(on_host(env, f"python3 -c {shlex.quote(REQUEST)}", stdin=key).strip().splitlines()[-1])


def test_the_run_converged_and_answered_through_the_router(deployment):
    out = deployment["first"].stdout
    assert deployment["first"].returncode == 0
    assert "Traceback (most recent call last)" not in out
    assert "The capital of France is ->" in out, out[-3000:]
    assert API_KEY not in out and HF_TOKEN not in out, "a secret was printed"


def test_workers_receive_every_value_byte_for_byte(deployment):
    procs = processes(deployment)
    for unit in ("sglang-prefill0", "sglang-decode0"):
        assert procs.get(unit), f"no server process of {unit}: {procs}"
        main = procs[unit][0]
        argv = main["argv"]
        assert argv[argv.index("--model-path") + 1] == MODEL_PATH, argv
        assert argv[argv.index("--served-model-name") + 1] == SERVED, argv
        assert main["env"].get("HF_TOKEN") == HF_TOKEN, f"{unit}: HF_TOKEN differs"
        assert main["env"].get("PDSIM_ROBUST_NOTE") == NOTE, (unit, main["env"].get("PDSIM_ROBUST_NOTE"), NOTE)
        assert API_KEY not in " ".join(argv)


def test_the_router_key_works_and_stays_off_its_command_line(deployment):
    unit = on_host(deployment, "systemctl cat sglang-router; systemctl show -p ExecStart sglang-router")
    assert "--api-key" in unit and API_KEY not in unit and HF_TOKEN not in unit
    # The router loads its tokenizer from the model directory with spaces (else it would not start offline).
    assert on_host(deployment, "systemctl is-active sglang-router").strip() == "active"
    good = request(deployment, API_KEY)
    assert good["status"] == 200 and isinstance(good["text"], str), good
    assert request(deployment, "")["status"] == 401
    assert request(deployment, API_KEY[1:])["status"] == 401


def test_a_second_run_changes_nothing(deployment):
    again = playbook(deployment)
    recap = [line for line in again.stdout.splitlines() if line.startswith(HOST) and "changed=" in line]
    assert recap and "changed=0" in recap[-1], recap
    assert "The capital of France is ->" in again.stdout
    for _unused in range(3):
        assert request(deployment, API_KEY)["status"] == 200
