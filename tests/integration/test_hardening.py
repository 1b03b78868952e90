"""Hardened units on a sandbox host: exposure, the service user, secrets, restart policy.

One sandbox host is converged with site.yml and secrets from an ansible-vault file (values with every
character an environment file must escape). The tests then ask systemd and the guest's process table:
`systemd-analyze security` exposure of every sglang-* unit at most 5.0 and equal to what README.md says, every
process of those units runs as the unprivileged service user, the router answers only with its API key, neither
secret shows on a command line, in a unit, in the run's output or in a --check --diff, the environment files are
0600 root, a killed service comes back, and a crash loop is stopped by the start limit.
"""

import json
import re
import time

import pytest
import yaml
from sandbox_hosts import REPO, VENV_BIN, down, one_host, run, wait_until

SANDBOX = "pytest-hardening"
HOST = f"{SANDBOX}-1"
UNITS = ["sglang-prefill0", "sglang-decode0", "sglang-router"]
MAX_EXPOSURE = 5.0
# Secrets with what an environment file must escape (" \ ` $), a quote, a space and a systemd specifier.
API_KEY = "rk-$HOME \"q'uo\\te `x` %n-7f3a"
HF_TOKEN = "hf_s3cr$t-Tok`en"
SECRETS = (API_KEY, HF_TOKEN)
# systemd's RestartSec of every unit: the role's default (production's), not shortened for the crash tests
RESTART_SEC = yaml.safe_load((REPO / "roles" / "sglang" / "defaults" / "main.yml").read_text())["sglang_restart_sec"]
ROUTER = "http://127.0.0.1:8000"


def readme_exposures():
    """{unit: exposure} as README.md documents them ("exposure in the sandbox: 1.7 for the workers, 1.1 for the
    router"): the live values must equal what users read."""
    text = " ".join((REPO / "README.md").read_text().split())
    match = re.search(r"exposure in the sandbox: (\d+\.\d) for the workers, (\d+\.\d) for the router", text)
    assert match, "README.md no longer says the sandbox's exposure values (How the services run)"
    workers, router = float(match.group(1)), float(match.group(2))
    return {"sglang-prefill0": workers, "sglang-decode0": workers, "sglang-router": router}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A sandbox host converged with vaulted secrets; yields paths and the first run's output."""
    env = one_host(tmp_path_factory, SANDBOX, "hardening")
    tmp = env["dir"]
    # The secrets as a user keeps them: `ansible-vault encrypt_string` values (the value on stdin).
    password = tmp / "vault-password"
    password.write_text("hardening-test-vault-password\n")
    vault = tmp / "secrets.yml"
    vault.write_text(
        "".join(
            run(
                [
                    str(VENV_BIN / "ansible-vault"),
                    "encrypt_string",
                    "--vault-password-file",
                    str(password),
                    "--stdin-name",
                    name,
                ],
                stdin=value,
            ).stdout
            for name, value in (("sglang_router_api_key", API_KEY), ("sglang_hf_token", HF_TOKEN))
        )
    )
    assert vault.read_text().count("!vault |") == 2 and not any(s in vault.read_text() for s in SECRETS)
    env["args"] = ["-e", f"@{vault}", "--vault-password-file", str(password)]
    env["converge"] = playbook(env).stdout
    on_host(env, "cat > /root/http_probe.py", stdin=HTTP_PROBE)
    yield env
    down(SANDBOX)


def playbook(sandbox, *args, **kwargs):
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", sandbox["inventory"], "site.yml", *sandbox["args"], *args]
    return run(cmd, **kwargs)


def on_host(sandbox, command, stdin=None, check=True):
    return run(["ssh", "-F", sandbox["ssh_config"], HOST, command], stdin=stdin, check=check).stdout


# Sends one request to the router from inside the guest. The key and the body come on stdin, never argv.
HTTP_PROBE = f"""
import sys, urllib.error, urllib.request
key, body = sys.stdin.readline().rstrip("\\n"), sys.stdin.readline().rstrip("\\n")
request = urllib.request.Request("{ROUTER}" + sys.argv[1], data=body.encode() or None,
                                 headers={{"Content-Type": "application/json"}})
if key:
    request.add_header("Authorization", "Bearer " + key)
try:
    with urllib.request.urlopen(request, timeout=60) as response:
        print(response.status, response.read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode())
except OSError as exc:  # not listening (yet)
    print(0, exc)
"""


def http(sandbox, path, body=None, key=None):
    """(status, text) of a request to the router, sent from the guest."""
    stdin = f"{key or ''}\n{json.dumps(body) if body else ''}\n"
    status, _sep, text = on_host(sandbox, f"python3 /root/http_probe.py {path}", stdin=stdin).strip().partition(" ")
    return int(status), text


def show(sandbox, unit, *props):
    out = on_host(sandbox, f"systemctl show {unit}.service " + " ".join(f"-p {p}" for p in props))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_ready(sandbox, timeout=120):
    """Until the router's /readiness answers 200 (the test fails past TIMEOUT, with its last answer)."""
    answers = []

    def ready():
        answers.append(http(sandbox, "/readiness"))
        return answers[-1][0] == 200

    if not wait_until(ready, timeout):
        status, text = answers[-1] if answers else (None, "")
        pytest.fail(f"the router did not become ready again within {timeout} s: {status} {text[:500]}")


def generate(sandbox, key):
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}}
    return http(sandbox, "/generate", body, key)


def test_every_unit_exposure_is_at_most_5_and_as_the_readme_says(sandbox, capsys):
    exposures = {}
    for unit in UNITS:
        out = on_host(sandbox, f"systemd-analyze security --no-pager {unit}.service")
        match = re.search(rf"Overall exposure level for {re.escape(unit)}\.service: (\d+\.\d+)", out)
        assert match, out[-2000:]
        exposures[unit] = float(match.group(1))
    with capsys.disabled():  # shown in make test's output, not only on failure
        print("\n[hardening] systemd-analyze security exposure:", ", ".join(f"{u} {e}" for u, e in exposures.items()))
    assert all(e <= MAX_EXPOSURE for e in exposures.values()), exposures
    assert exposures == readme_exposures(), f"live exposure {exposures}, README.md says {readme_exposures()}"


def test_every_process_of_the_units_runs_as_the_service_user(sandbox):
    uid = int(on_host(sandbox, "id -u sglang"))
    assert uid != 0
    rows = [line.split(None, 2) for line in on_host(sandbox, "ps -eo uid=,unit=,args=").splitlines()]
    procs = [(int(row[0]), row[1].removesuffix(".service"), row[2]) for row in rows if len(row) == 3]
    for unit in UNITS:
        mine = [p for p in procs if p[1] == unit]
        assert mine, f"no process of {unit} is running"
        assert all(p[0] == uid for p in mine), f"{unit} runs processes as another user: {mine}"
        assert show(sandbox, unit, "User")["User"] == "sglang"
    # The venvs stay root's and read-only to the service user.
    venvs = on_host(sandbox, "ls -d /opt/sglang/venvs/*/").split()
    assert len(venvs) == 2, venvs  # engine-DIGEST and router-DIGEST: the host is prefill, decode and router
    for venv in venvs:
        assert on_host(sandbox, f"stat -c %U {venv} {venv}bin/python").split() == ["root", "root"]
        writable = f"setpriv --reuid sglang --regid sglang --clear-groups test -w {venv}bin && echo writable || true"
        assert on_host(sandbox, writable).strip() == "", venv


def test_the_router_serves_a_request_with_its_api_key_only(sandbox):
    assert re.search(r"The capital of France is -> +\S", sandbox["converge"]), "no answer through the router"
    status, text = generate(sandbox, API_KEY)
    assert status == 200 and json.loads(text)["text"], text[:500]
    assert generate(sandbox, None)[0] == 401
    assert generate(sandbox, "wrong-key")[0] == 401


def test_secrets_stay_off_command_lines_units_and_logs(sandbox):
    args = on_host(sandbox, "ps -eo args")
    units = on_host(sandbox, "cat /etc/systemd/system/sglang-*.service")
    props = "".join(on_host(sandbox, f"systemctl show {u}.service -p Environment -p ExecStart") for u in UNITS)
    for secret in SECRETS:
        assert secret not in args, "a secret is on a command line"
        assert secret not in units, "a secret is in a unit file"
        assert secret not in props, "a secret is in a unit's properties"
        assert secret not in sandbox["converge"], "a secret is in the run's output"
    assert on_host(sandbox, "stat -c '%a %U %G' /etc/sglang").strip() == "700 root root"
    for unit in UNITS:
        assert on_host(sandbox, f"stat -c '%a %U %G' /etc/sglang/{unit}.env").strip() == "600 root root"
        assert (
            on_host(
                sandbox, f"setpriv --reuid sglang --regid sglang --clear-groups cat /etc/sglang/{unit}.env", check=False
            )
            == ""
        ), "the service user can read an environment file"

    # systemd hands each process the exact value (every escaped character survived).
    def environ(unit):
        pid = show(sandbox, unit, "MainPID")["MainPID"]
        return on_host(sandbox, f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()

    assert f"SGLANG_ROUTER_API_KEY={API_KEY}" in environ("sglang-router")
    assert f"HF_TOKEN={HF_TOKEN}" in environ("sglang-decode0")
    assert not [line for line in environ("sglang-decode0") if line.startswith("SGLANG_ROUTER_API_KEY=")]


def test_check_diff_of_a_rotated_key_shows_no_secret(sandbox, tmp_path):
    rotated = "rk-rotated-Zq81$"
    extra = tmp_path / "rotated.json"
    extra.write_text(json.dumps({"sglang_router_api_key": rotated}))
    out = playbook(sandbox, "--check", "--diff", "-e", f"@{extra}").stdout
    # One environment file would change (the router's), with no diff (secret files never show one); no unit file, no
    # record and not the user.
    blocks = re.findall(r"^TASK \[disagg\.sglang\.sglang : ([^\]]+)\] \**\n(.*?)(?=^TASK |^PLAY )", out, re.M | re.S)
    writes = [body for name, body in blocks if name.startswith("Write the units' environment files")]
    assert len(writes) == 2 and [w.count("changed: [") for w in writes] == [0, 1], writes  # workers, then the router
    assert "--- before" not in writes[1] and "+++ after" not in writes[1], writes[1]
    assert not [n for n, body in blocks if "changed: [" in body and n.startswith("Create")]
    for secret in (*SECRETS, rotated):
        assert secret not in out, "a secret is in the --check --diff output"


def test_restart_policy(sandbox):
    for unit in UNITS:
        props = show(
            sandbox,
            unit,
            "Restart",
            "RestartUSec",
            "StartLimitBurst",
            "StartLimitIntervalUSec",
            "TimeoutStartUSec",
            "KillMode",
            "TimeoutStopUSec",
        )
        assert props == {
            "Restart": "on-failure",
            "RestartUSec": f"{RESTART_SEC}s",
            "StartLimitBurst": "5",
            "StartLimitIntervalUSec": "10min",
            "TimeoutStartUSec": "5min",  # sglang_health_timeout of the sandbox inventory: 300
            "KillMode": "mixed",
            "TimeoutStopUSec": "1min",
        }, unit


def kill_and_wait(sandbox, unit):
    """kill -9 the unit's main process; returns the unit's state once systemd has acted on it."""
    before = show(sandbox, unit, "MainPID")["MainPID"]
    on_host(sandbox, f"kill -9 {before}")

    def acted():
        state = show(sandbox, unit, "ActiveState", "SubState", "MainPID", "NRestarts", "Result")
        failed = state["ActiveState"] == "failed"
        back = state["ActiveState"] == "active" and state["MainPID"] not in ("0", before)
        return state if failed or back else None

    return wait_until(acted, 60, f"{unit} back or failed after kill -9", interval=0.5)


def test_a_crash_comes_back_and_a_crash_loop_stops(sandbox):
    unit = "sglang-router"
    on_host(sandbox, f"systemctl reset-failed {unit}.service")  # the start-rate counter from zero
    state = kill_and_wait(sandbox, unit)
    assert state["ActiveState"] == "active" and state["NRestarts"] == "1", state
    wait_ready(sandbox)
    assert generate(sandbox, API_KEY)[0] == 200
    # Keep crashing it: restarts 1 to 5 come back within the window; the 6th start is refused.
    kills = 1
    while state["ActiveState"] != "failed":
        assert kills < 10, f"{unit} kept being restarted: {state}"
        state = kill_and_wait(sandbox, unit)
        kills += 1
    journal = on_host(sandbox, f"journalctl -u {unit}.service -n 10 -o cat --no-pager")
    print(f"{unit}: failed after {kills} kills ({state}); journal:\n{journal}")
    assert kills == 6, state
    assert "Start request repeated too quickly" in journal, journal
    time.sleep(RESTART_SEC + 1)
    assert show(sandbox, unit, "ActiveState")["ActiveState"] == "failed", "the crash loop was restarted"
    # An operator (or the next run) clears the limit and it serves again.
    on_host(sandbox, f"systemctl reset-failed {unit}.service && systemctl start {unit}.service")
    wait_ready(sandbox)
    assert generate(sandbox, API_KEY)[0] == 200
