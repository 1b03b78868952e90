"""The lean runner (plugins/plugin_utils/lean_module.py, lean_bootstrap.py): which modules run lean and what they
carry, the parameters checked on the controller as AnsibleModule checks them, the program run by a real Python on
temp trees, and - through ansible-playbook on local hosts - the same results, failures and fact as the module run
through AnsiballZ, and no AnsiballZ where it runs lean."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils import host_look
from ansible_collections.disagg.sglang.plugins.plugin_utils import lean_module

REPO = Path(__file__).resolve().parents[2]
MU = lean_module.MODULE_UTILS

# module -> the collection's module_utils its lean program carries (a string: it cannot run lean, and why)
CLOSURES = {
    "host_look": {
        "cluster_rules",
        "host_look",
        "gpu_topology",
        "gpu_topology_nvml",
        "gpu_topology_parse",
        "gpu_topology_smi",
        "gpu_topology_sysfs",
    },
    "deps_state": {"deps_state", "venvs"},
    "service_health": {"service_health", "http_request"},
    "router_workers": {"router_api", "http_request"},
    "address_check": {"cluster_rules", "service_health", "http_request"},
    "unit_actions": {"unit_actions"},
}
# what the stand-in AnsibleModule offers (lean_bootstrap.AnsibleModule)
SHIM_API = {"params", "check_mode", "_diff", "run_command", "get_bin_path", "exit_json", "fail_json"}
# the modules whose action plugin is the lean action
ROUTED = sorted(p.stem for p in (REPO / "plugins" / "action").glob("*.py") if "import LeanAction" in p.read_text())


@pytest.mark.parametrize("name", sorted(CLOSURES))
def test_which_modules_run_lean_and_what_their_program_carries(name):
    expected = CLOSURES[name]
    if isinstance(expected, str):
        with pytest.raises(lean_module.NotLean, match=expected):
            lean_module.closure(name)
        return
    source, sources = lean_module.closure(name)
    assert source == (REPO / "plugins" / "modules" / f"{name}.py").read_text()
    assert set(sources) == {f"{MU}.{util}" for util in expected}
    for dotted, text in sources.items():
        assert text == (REPO / "plugins" / "module_utils" / f"{dotted.rsplit('.', 1)[1]}.py").read_text()


@pytest.mark.parametrize("name", ROUTED)
def test_every_module_routed_to_the_lean_action_can_run_lean(name):
    """Its imports stay lean, its spec is plain data, and it (with the module_utils it carries) asks the stand-in
    AnsibleModule for nothing the stand-in does not offer."""
    assert (REPO / "plugins" / "modules" / f"{name}.py").is_file()
    found = lean_module.described(name)
    assert "not_lean" not in found, found
    assert found["options"].get("supports_check_mode") is True
    used = set()
    for text in [found["source"], *found["sources"].values()]:
        used |= set(re.findall(r"\bmodule\.(\w+)", text))
    assert used <= SHIM_API, f"{name} uses {sorted(used - SHIM_API)}, which the stand-in does not offer"


def test_the_lean_modules_are_those_of_the_hot_paths():
    """The preflight's look, the deps read, the health waits, the router's worker API and canary, the address check,
    the rolling batch and the unit actions."""
    assert ROUTED == sorted(["host_look", "deps_state", "service_health", "router_workers", "router_canary",
                             "address_check", "batch_restart", "unit_actions"])  # fmt: skip


def test_a_module_that_needs_more_than_the_stand_in_is_not_routed():
    """unit_files writes files through AnsibleModule.atomic_move and backup_local: it runs through AnsiballZ."""
    assert "unit_files" not in ROUTED
    assert "atomic_move" in (REPO / "plugins" / "modules" / "unit_files.py").read_text()


def test_a_relative_import_or_another_collection_is_not_lean(tmp_path):
    for line, why in (("from . import x", "a relative import"),
                      ("from ansible.module_utils.urls import open_url", "ansible.module_utils.urls"),
                      ("from ansible_collections.other.c.plugins.module_utils import y", "ansible_collections.other"),
                      ("import ansible.module_utils.six", "ansible.module_utils.six")):  # fmt: skip
        path = tmp_path / "m.py"
        path.write_text(f"def main():\n    {line}\n")
        with pytest.raises(lean_module.NotLean, match=why.replace(".", r"\.")):
            lean_module._local_imports(path)


SPEC = {
    "record_dir": {"type": "path"},
    "exists": {"type": "list", "elements": "path", "default": []},
    "topology": {"type": "dict", "options": {"sysfs_root": {"type": "path", "default": "/"}, "n": {"type": "int"}}},
    "files": {"type": "list", "elements": "dict",
              "options": {"path": {"type": "path"}, "key": {"type": "str", "no_log": True}}},
    "when": {"type": "str", "choices": ["now", "later"], "default": "now"},
}  # fmt: skip


def test_path_values_are_left_for_the_host_to_expand():
    spec, keys = lean_module._paths_as_str(SPEC)
    assert keys == [["record_dir"], ["exists", "*"], ["topology", "sysfs_root"], ["files", "*", "path"]]
    assert spec["record_dir"]["type"] == "str" and spec["exists"]["elements"] == "str"
    assert spec["files"]["options"]["path"]["type"] == "str"
    assert SPEC["record_dir"]["type"] == "path", "the module's own spec is not changed"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"record_dir": "~/r", "topology": {"n": "3"}},
         {"record_dir": "~/r", "exists": [], "topology": {"sysfs_root": "/", "n": 3}, "files": None, "when": "now"}),
        ({"bogus": 1}, "Unsupported parameters for (disagg.sglang.x) module: bogus. Supported parameters include: "
                       "exists, files, record_dir, topology, when."),
        ({"when": "soon"}, "value of when must be one of: now, later, got: soon"),
        ({"topology": {"n": "three"}},
         "argument 'n' is of type str found in 'topology'. and we were unable to convert to int"),
        ({"_ansible_check_mode": True}, {"record_dir": None, "exists": [], "topology": None, "files": None,
                                         "when": "now"}),
    ],
)  # fmt: skip
def test_parameters_are_checked_as_ansiblemodule_checks_them(args, expected):
    params, no_log, third = lean_module.validate("disagg.sglang.x", SPEC, {"supports_check_mode": True}, args)
    if isinstance(expected, str):
        assert params is None and no_log is None
        assert third.startswith(expected), third
    else:
        assert params == expected


def test_no_log_values_are_collected_for_the_result_to_be_masked():
    _params, no_log, _keys = lean_module.validate("x", SPEC, {}, {"files": [{"path": "/a", "key": "s3cret"}]})
    assert no_log == {"s3cret"}


def run_program(name, found, params, tmp_path, *, check_mode=False, env=None):
    spec = found.get("spec") or {}
    _checked, keys = lean_module._paths_as_str(spec)
    program = lean_module.program(name, found, params, keys, check_mode=check_mode)
    proc = subprocess.run([sys.executable], input=program, capture_output=True, cwd=tmp_path, check=False,
                          env={**os.environ, **(env or {})})  # fmt: skip
    return proc.returncode, json.loads(proc.stdout), proc.stderr.decode()


def test_the_program_runs_host_look_as_its_module_would(tmp_path):
    """The module's own code on a temp tree: the same answer as module_utils.host_look, paths expanded on the host
    (its HOME, its environment), the real ansible.module_utils.basic never imported."""
    records = tmp_path / "records"
    records.mkdir()
    (records / "sglang-decode-0.service.json").write_text('{"unit": "sglang-decode-0.service"}')
    (records / "broken.service.json").write_text("{")
    found = lean_module.described("host_look")
    params = {"paths": {"sglang_model_path": str(tmp_path)}, "record_dir": "~/records", "listeners": False,
              "bind": ["127.0.0.1"], "exists": ["$LEAN_DIR/records", "/nonexistent"], "topology": None}  # fmt: skip
    rc, result, stderr = run_program("host_look", found, params, tmp_path,
                                     env={"HOME": str(tmp_path), "LEAN_DIR": str(tmp_path)})  # fmt: skip
    assert rc == 0, stderr
    expected = host_look.look({"sglang_model_path": str(tmp_path)}, str(records), False, ["127.0.0.1"],
                              [str(records), "/nonexistent"])  # fmt: skip
    assert result == {"changed": False, **expected}
    assert result["records"]["broken.service"]["unreadable"]
    assert result["exists"] == {str(records): True, "/nonexistent": False}


SHIM_PROBE = """
import datetime, sys
from ansible.module_utils.basic import AnsibleModule

def main():
    module = AnsibleModule(argument_spec={})
    rc, out, err = module.run_command(["sh", "-c", "echo out $PROBE; echo err >&2; exit 3"],
                                      environ_update={"PROBE": "x"})
    module.exit_json(changed=False, rc=rc, out=out, err=err, check_mode=module.check_mode, params=module.params,
                     sh=module.get_bin_path("sh"), missing=module.get_bin_path("no-such-program-here"),
                     basic=sys.modules["ansible.module_utils.basic"].__dict__.get("__file__"),
                     plain=[{3}, b"raw", datetime.date(2026, 12, 4)])

if __name__ == "__main__":
    main()
"""


def test_the_stand_in_runs_commands_finds_programs_and_passes_check_mode(tmp_path):
    found = {"source": SHIM_PROBE, "sources": {}}
    rc, result, stderr = run_program("probe", found, {"a": 1}, tmp_path, check_mode=True)
    assert rc == 0, stderr
    assert result["rc"] == 3 and result["out"] == "out x\n" and result["err"] == "err\n"
    assert result["check_mode"] is True and result["params"] == {"a": 1}
    assert result["sh"] and os.path.basename(result["sh"]) == "sh"
    assert result["missing"] is None
    assert result["basic"] is None, "the real ansible.module_utils.basic was imported"
    assert result["plain"] == [[3], "raw", "2026-12-04"], "as AnsibleModule's encoder writes them"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("module.warn('x')", "AttributeError: 'AnsibleModule' object has no attribute 'warn'"),
        ("module.fail_json(msg='no', extra=1)", "no"),
        ("module.run_command(['/no/such/program'])", "No such file or directory"),
        ("pass", "probe.py ended without exit_json or fail_json"),
        ("import ansible.module_utils.urls", "ModuleNotFoundError: No module named 'ansible.module_utils.urls'"),
    ],
)
def test_what_the_stand_in_does_not_offer_fails_loudly(tmp_path, body, message):
    source = ("from ansible.module_utils.basic import AnsibleModule\n"
              f"module = AnsibleModule(argument_spec={{}})\n{body}\n")  # fmt: skip
    rc, result, _stderr = run_program("probe", {"source": source, "sources": {}}, {}, tmp_path)
    assert rc == 1
    assert result["failed"] is True
    assert message in result["msg"], result


def playbook(tmp_path, tasks, pipelining, extra_env=None):
    """Runs TASKS on two local hosts (one interpreter set, one discovered); returns (rc, stdout, results by host)."""
    hosts = {"set": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
             "found": {"ansible_connection": "local"}}  # fmt: skip
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": hosts}}))
    out = tmp_path / f"out-{pipelining}"
    out.mkdir()
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        *tasks,
        {"name": "Keep the results", "ansible.builtin.copy": {
            "content": "{{ {'results': results, 'fact': ansible_facts.discovered_interpreter_python | default(none)}"
                       " | to_json }}",
            "dest": f"{out}/{{{{ inventory_hostname }}}}.json"}, "delegate_to": "localhost"},
    ]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PIPELINING=str(pipelining), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               # the discovery of the second host finds the system's python3 (not a shim of a version manager)
               PATH="/usr/local/bin:/usr/bin:/bin", **(extra_env or {}))  # fmt: skip
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-vvv", "-i",
                           str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, cwd=REPO)  # fmt: skip
    kept = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    return proc.returncode, proc.stdout, kept


def test_lean_and_ansiballz_give_the_same_results_failures_and_interpreter_fact(tmp_path):
    """The modules that run lean, through Ansible, with pipelining (lean) and without (AnsiballZ): the same
    results, the same refusal of a bad parameter, the discovered interpreter kept as the host's fact in both."""
    records = tmp_path / "records"
    records.mkdir()
    (records / "sglang-prefill-0.service.json").write_text('{"unit": "sglang-prefill-0.service", "n": 1}')
    tasks = [
        {"name": "look", "disagg.sglang.host_look": {"paths": {"p": str(records)}, "record_dir": str(records),
                                                     "bind": ["127.0.0.1"], "exists": ["/nonexistent"]},
         "register": "look"},
        {"name": "deps", "disagg.sglang.deps_state": {"venvs": [], "os_packages": ["sh"], "venvs_dir": str(tmp_path),
                                                      "record_dir": str(records)},
         "register": "deps"},
        {"name": "bad", "disagg.sglang.host_look": {"bogus": 1}, "register": "bad", "ignore_errors": True},
        {"name": "check mode", "disagg.sglang.host_look": {"listeners": False}, "check_mode": True,
         "register": "checked"},
        {"name": "gather", "ansible.builtin.set_fact": {"results": "{{ [look, deps, bad, checked] }}"}},
    ]  # fmt: skip
    runs = {}
    for pipelining in (True, False):
        rc, stdout, kept = playbook(tmp_path, tasks, pipelining)
        assert rc == 0, stdout[-3000:]
        assert set(kept) == {"set", "found"}, stdout[-3000:]
        ansiballz = stdout.count("AnsiballZ_host_look") + stdout.count("AnsiballZ_deps_state")
        assert (ansiballz == 0) == pipelining, f"pipelining={pipelining}: {ansiballz} AnsiballZ mentions"
        runs[pipelining] = kept
    for host in ("set", "found"):
        lean, zipped = runs[True][host], runs[False][host]
        for result in lean["results"] + zipped["results"]:
            result.pop("invocation", None)
            result.pop("warnings", None)
        assert lean["results"] == zipped["results"], host
        look, deps, bad, checked = lean["results"]
        assert look["records"] == {"sglang-prefill-0.service": {"unit": "sglang-prefill-0.service", "n": 1}}
        assert look["bind"] == {"127.0.0.1": "ok"} and look["exists"] == {"/nonexistent": False}
        assert deps["os_missing"] is not None and deps["venvs"] == {}
        assert bad["failed"] is True
        assert bad["msg"].startswith("Unsupported parameters for (disagg.sglang.host_look) module: bogus."), bad
        assert checked["listeners"] == {} and not checked.get("failed")
    assert runs[True]["set"]["fact"] is None, "no discovery where the interpreter is set"
    assert runs[True]["found"]["fact"] and runs[True]["found"]["fact"] == runs[False]["found"]["fact"]


def test_an_async_task_runs_as_ansible_runs_it(tmp_path):
    """async is never pipelined: the module goes through AnsiballZ and the async wrapper, and its result is the
    module's."""
    tasks = [
        {"name": "look", "disagg.sglang.host_look": {"bind": ["127.0.0.1"], "listeners": False}, "async": 30,
         "poll": 1, "register": "look"},
        {"name": "gather", "ansible.builtin.set_fact": {"results": "{{ [look] }}"}},
    ]  # fmt: skip
    rc, stdout, kept = playbook(tmp_path, tasks, pipelining=True)
    assert rc == 0, stdout[-3000:]
    assert "async_wrapper" in stdout and "AnsiballZ_host_look" in stdout
    for host in ("set", "found"):
        (look,) = kept[host]["results"]
        assert look["bind"] == {"127.0.0.1": "ok"} and look["finished"] == 1, look
