"""Unit specs and command lines: profile + placement + inventory -> what a unit runs."""

from pathlib import Path

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.plan import kv_rules, router_flag_rules, rules
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.module_utils.units import units
from samples import INSTANCES, PLACEMENT, PROFILE
from samples import UNIT_SETTINGS as SETTINGS

REPO = Path(__file__).resolve().parents[3]
PREFILL = INSTANCES["prefill"]
DECODE = INSTANCES["decode"]


def lines_of(role, instance, **settings):
    return sf.render_lines(sf.worker_flags(PROFILE, role, instance, dict(SETTINGS, **settings)))


def as_dict(lines):
    return {line[0]: line[1:] for line in lines}


@pytest.mark.parametrize(
    ("role", "instance", "expected"),
    [
        (
            "prefill",
            PREFILL,
            {
                "--disaggregation-mode": ["prefill"],
                "--tp-size": ["4"],
                "--port": ["30000"],
                "--disaggregation-bootstrap-port": ["8998"],
                "--dist-init-addr": ["127.0.0.1:30335"],
                "--page-size": ["256"],
                "--kv-cache-dtype": ["fp8_e4m3"],
                "--attention-backend": ["dsv4"],
                "--moe-runner-backend": ["marlin"],
                "--context-length": ["8192"],
                "--chunked-prefill-size": ["8192"],
                "--mem-fraction-static": ["0.7"],
                "--cuda-graph-backend-prefill": ["disabled"],
                "--cuda-graph-backend-decode": ["disabled"],
                "--disaggregation-transfer-backend": ["nixl"],
                "--trust-remote-code": [],
            },
        ),
        (
            "decode",
            DECODE,
            {
                "--disaggregation-mode": ["decode"],
                "--port": ["30001"],
                "--dist-init-addr": ["127.0.0.1:30435"],
                "--mem-fraction-static": ["0.6"],
                "--cuda-graph-max-bs-decode": ["64"],
                "--page-size": ["256"],
                "--kv-cache-dtype": ["fp8_e4m3"],
            },
        ),
    ],
)
def test_profile_renders_each_flag_once_with_its_value(role, instance, expected):
    lines = lines_of(role, instance)
    flags = [line[0] for line in lines]
    assert len(flags) == len(set(flags)), f"a flag appears twice: {flags}"
    rendered = as_dict(lines)
    for flag, values in expected.items():
        assert rendered.get(flag) == values, f"{flag}: {rendered.get(flag)} != {values}"
    assert "--cuda-graph-max-bs" not in rendered, "the ambiguous spelling must never be rendered"
    assert "--disable-cuda-graph" not in rendered, "the deprecated spelling must never be rendered"


def test_decode_keeps_cuda_graphs_and_prefill_chunking_stays_on_prefill():
    decode = as_dict(lines_of("decode", DECODE))
    assert "--cuda-graph-backend-decode" not in decode
    assert "--chunked-prefill-size" not in decode


@pytest.mark.parametrize(
    ("where", "layer", "message"),
    [
        ("extra", {"extra_flags": {"port": 1234}}, "sglang_prefill_extra_flags sets --port"),
        ("instance", {"instance_flags": {"--tp-size": 8}}, "prefill instance prefill0 sets --tp-size"),
        ("model", {"model_path": ""}, "sglang_model_path is empty"),
        ("alias", {"extra_flags": {"tensor-parallel-size": 8}}, r"sets --tp-size \(spelled --tensor-parallel-size\)"),
        ("prefix", {"extra_flags": {"tp": 8}}, r"sets --tp-size \(spelled --tp\)"),
        ("model-alias", {"instance_flags": {"model": "/x"}}, r"sets --model-path \(spelled --model\)"),
    ],
)
def test_identity_flags_have_one_source(where, layer, message):
    instance = dict(PREFILL, flags=layer.pop("instance_flags", None))
    with pytest.raises(sf.FlagError, match=message):
        lines_of("prefill", instance, **layer)


def test_extra_and_instance_flags_override_the_profile_in_order():
    instance = dict(PREFILL, flags={"moe-runner-backend": "triton"})
    lines = lines_of("prefill", instance, extra_flags={"moe-runner-backend": "flashinfer_mxfp4", "log-level": "debug"})
    rendered = as_dict(lines)
    assert rendered["--moe-runner-backend"] == ["triton"]
    assert rendered["--log-level"] == ["debug"]


def test_false_and_null_leave_a_flag_out():
    lines = lines_of("prefill", PREFILL, extra_flags={"trust-remote-code": False, "enable-metrics": None})
    rendered = as_dict(lines)
    assert "--trust-remote-code" not in rendered
    assert "--enable-metrics" not in rendered


def test_worker_units_carry_the_placement_and_one_numa_owner():
    specs = units.worker_units([PREFILL], PLACEMENT, PROFILE, "prefill", SETTINGS) + units.worker_units(
        [DECODE], PLACEMENT, PROFILE, "decode", SETTINGS
    )
    prefill, decode = specs
    assert prefill["unit"] == "sglang-prefill0"
    assert prefill["exec"][:3] == ["/usr/bin/numactl", "--cpunodebind=0", "--membind=0"]
    assert decode["exec"][:3] == ["/usr/bin/numactl", "--cpunodebind=1", "--membind=1"]
    assert prefill["exec"][3:] == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    assert prefill["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert decode["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert decode["cpus"] == "32-63"
    for spec in specs:
        assert spec["env"]["SGLANG_AUTO_NUMA_BIND"] == "0"
        assert spec["env"]["SGLANG_DISAGGREGATION_NIXL_BACKEND"] == "UCX"
    assert prefill["health_url"] == "http://127.0.0.1:30000/health"


def test_unknown_numa_binds_cpus_and_nothing_known_leaves_sglang_alone():
    cpus_only = [{"name": "prefill0", "gpus": [0], "numa_node": None, "cpus": [0, 1, 2, 5], "warnings": ["x"]}]
    spec = units.worker_units([dict(PREFILL, tp=1)], cpus_only, PROFILE, "prefill", SETTINGS)[0]
    assert spec["exec"][:2] == ["/usr/bin/numactl", "--physcpubind=0-2,5"]
    assert spec["warnings"] == ["x"]
    nothing = [{"name": "prefill0", "gpus": [0], "numa_node": None, "cpus": [], "warnings": []}]
    spec = units.worker_units([dict(PREFILL, tp=1)], nothing, PROFILE, "prefill", SETTINGS)[0]
    assert spec["exec"][0] == "/opt/sglang/venv/bin/python"
    assert "SGLANG_AUTO_NUMA_BIND" not in spec["env"]


def test_an_instance_without_placement_is_an_error():
    with pytest.raises(sf.FlagError, match="prefill instance prefill9 has no placement"):
        units.worker_units([dict(PREFILL, name="prefill9")], PLACEMENT, PROFILE, "prefill", SETTINGS)


@pytest.mark.parametrize(
    ("advertise", "urls"),
    [
        ("127.0.0.1", ["http://127.0.0.1:30000", "http://127.0.0.1:30010", "http://127.0.0.1:30001"]),
        ("10.0.0.1", ["http://10.0.0.1:30000", "http://10.0.0.1:30010", "http://10.0.0.1:30001"]),
    ],
)
def test_router_dials_every_worker_at_the_url_of_its_spec(advertise, urls):
    settings = dict(SETTINGS, advertise_address=advertise)
    placement = [*PLACEMENT, {"name": "p1", "gpus": [8], "numa_node": 1, "cpus": [1], "warnings": []}]
    second = dict(PREFILL, name="p1", tp=1, port=30010, bootstrap_port=9008)
    prefills = units.worker_units([PREFILL, second], placement, PROFILE, "prefill", settings)
    decodes = units.worker_units([DECODE], PLACEMENT, PROFILE, "decode", settings)
    assert [w["url"] for w in prefills + decodes] == urls
    spec = units.router_unit(prefills, decodes, {"venv": "/v", "flags": {"host": "0.0.0.0", "port": 8000}})
    assert spec["lines"][:4] == [
        ["--pd-disaggregation"],
        ["--prefill", urls[0], "8998"],
        ["--prefill", urls[1], "9008"],
        ["--decode", urls[2]],
    ]
    assert ["--host", "0.0.0.0"] in spec["lines"]
    assert spec["health_url"] == "http://127.0.0.1:8000/readiness"
    assert spec["expected_workers"] == 3
    assert spec["workers"] == ["sglang-prefill0", "sglang-p1", "sglang-decode0"]


def test_router_refuses_a_prefill_without_bootstrap_port():
    with pytest.raises(sf.FlagError, match="has no bootstrap_port"):
        units.router_unit(
            [{"url": "http://h:1", "bootstrap_port": None}], [{"url": "http://h:2"}], {"venv": "/v", "flags": {}}
        )


# the quoting of ExecStart= and Environment= tokens: test_rules.QUOTING


def test_cpu_list_is_the_kernel_format():
    assert units.cpu_list([3, 0, 1, 2, 8, 10, 9, 12]) == "0-3,8-10,12"
    assert units.cpu_list([]) == ""


def _contract(unit, role, host, **values):
    base = {
        "page-size": "256",
        "kv-cache-dtype": "fp8_e4m3",
        "disaggregation-transfer-backend": "nixl",
        "speculative-algorithm": None,
    }
    return {"unit": unit, "role": role, "host": host, "values": base | values}


def test_kv_contract_reads_the_merged_flags():
    spec = units.worker_units([DECODE], PLACEMENT, PROFILE, "decode", {**SETTINGS, "engine": "sglang 0.5.23"})[0]
    assert units.kv_contract(spec)["values"] == {
        "page-size": "256",
        "kv-cache-dtype": "fp8_e4m3",
        "disaggregation-transfer-backend": "nixl",
        "speculative-algorithm": None,
        "engine": "sglang 0.5.23",
    }
    assert units.record(spec, "/etc/systemd/system")["kv_contract"] == units.kv_contract(spec)["values"]


@pytest.mark.parametrize(
    ("decode_values", "expected"),
    [
        ({}, []),
        (
            {"page-size": "128"},
            ["--page-size differs between PD workers: 256 on sglang-prefill0@a; 128 on sglang-decode0@b"],
        ),
        (
            {"kv-cache-dtype": "bfloat16", "speculative-algorithm": "EAGLE"},
            [
                "--kv-cache-dtype differs between PD workers: fp8_e4m3 on sglang-prefill0@a; "
                "bfloat16 on sglang-decode0@b",
                "--speculative-algorithm differs between PD workers: unset on sglang-prefill0@a; "
                "EAGLE on sglang-decode0@b",
            ],
        ),
    ],
)
def test_kv_mismatches_name_the_flag_and_the_units(decode_values, expected):
    contracts = [
        _contract("sglang-prefill0", "prefill", "a"),
        _contract("sglang-decode0", "decode", "b", **decode_values),
    ]
    assert kv_rules.kv_mismatches(contracts, units.KV_CONTRACT) == expected


@pytest.mark.parametrize("flag", ["prefill", "--decode", "pd-disaggregation", "worker-urls"])
def test_router_extra_flags_cannot_rewire_the_workers(flag):
    with pytest.raises(sf.FlagError, match=f"sglang_router_extra_flags sets --{flag.lstrip('-')}"):
        units.router_unit(
            [{"url": "http://h:1", "bootstrap_port": 8998}],
            [{"url": "http://h:2"}],
            {"venv": "/v", "flags": {flag: "http://x:1"}},
        )


@pytest.mark.parametrize(
    ("role", "instances", "expected"),
    [
        ("prefill", [PREFILL], []),
        ("decode", [DECODE], []),
        ("decode", [{k: v for k, v in DECODE.items() if k != "bootstrap_port"}], []),
        (
            "prefill",
            [{k: v for k, v in PREFILL.items() if k != "bootstrap_port"}],
            ["sglang_prefill_instances[0] (prefill0): bootstrap_port is missing (a port in 1-65535)"],
        ),
        (
            "prefill",
            [dict(PREFILL, gpus=[0, 1])],
            [
                "sglang_prefill_instances[0] (prefill0): tp 4 but 2 gpus listed [0, 1]: make tp the number of gpus, "
                "or give only one of them"
            ],
        ),
        (
            "decode",
            [dict(DECODE, port=70000)],
            ["sglang_decode_instances[0] (decode0): port 70000 is not a port in 1-65535"],
        ),
        (
            "decode",
            [DECODE, DECODE],
            [
                "sglang_decode_instances has duplicate names (decode0): each instance becomes unit "
                "sglang-<name>.service, so names must differ"
            ],
        ),
        (
            "decode",
            [{"name": "Decode 0", "port": 1, "dist_init_port": 2}],
            [
                "sglang_decode_instances[0] (Decode 0): name must be lowercase letters, digits, - or _ "
                "(it becomes sglang-<name>.service)",
                "sglang_decode_instances[0] (Decode 0): give tp (the topology role picks the GPUs) "
                "or gpus (explicit indices)",
            ],
        ),
        ("decode", "decode0", ["sglang_decode_instances must be a list of instances, got str"]),
    ],
)
def test_instance_problems_name_the_entry_and_the_fix(role, instances, expected):
    assert rules.instance_problems(instances, role) == expected


def test_the_router_api_key_reaches_the_process_through_its_environment_only():
    spec = units.router_unit(
        [{"url": "http://h:1", "bootstrap_port": 8998}],
        [{"url": "http://h:2"}],
        {"venv": "/v", "flags": {"port": 8000}, "api_key_set": True},
    )
    assert spec["secret_env"] == {"SGLANG_ROUTER_API_KEY": "sglang_router_api_key"}
    assert spec["exec"][:2] == ["/v/bin/python", "-c"]
    assert "os.environ.pop(v)" in spec["exec"][2] and "sglang_router.launch_router" in spec["exec"][2]
    assert not any("--api-key" in line for line in spec["lines"])
    assert spec["python"] == "/v/bin/python" and spec["module"] == "sglang_router.launch_router"


@pytest.mark.parametrize(("kind", "present", "absent"), [
    ("gpu", ["DevicePolicy", "LimitMEMLOCK"], ["PrivateDevices", "MemoryDenyWriteExecute"]),
    ("service", ["PrivateDevices", "MemoryDenyWriteExecute", "PrivateUsers"], ["DevicePolicy", "LimitMEMLOCK"]),
])  # fmt: skip
def test_hardening_by_kind(kind, present, absent):
    settings = {"state_dir": "/var/lib/sglang", "device_allow": ["char-nvidia rw"]}
    keys = [key for key, _value in units.hardening(kind, settings)]
    assert {"NoNewPrivileges", "ProtectSystem", "ReadWritePaths", "ProtectHome"} <= set(keys)
    assert set(present) <= set(keys)
    assert not set(absent) & set(keys)


def test_every_router_flag_the_collection_sets_has_one_variable_and_is_refused_as_an_extra_flag():
    """One table (router_flags.ROUTER_FLAGS) sets the router's own flags and is the list extra flags may not set."""
    values = {variable: f"v-{flag}" for flag, variable in rf.ROUTER_FLAGS.items()}
    assert rf.router_flags(values) == {flag: f"v-{flag}" for flag in rf.ROUTER_FLAGS}
    assert rf.router_flags(values, {"log-level": "debug"})["log-level"] == "debug"
    for flag, variable in rf.ROUTER_FLAGS.items():
        [message] = router_flag_rules.router_flag_problems({flag: 1})
        assert f"sets --{flag}, which the collection owns: use {variable} instead" in message
    with pytest.raises(sf.FlagError, match="no value for sglang_router_port"):
        rf.router_flags({k: v for k, v in values.items() if k != "sglang_router_port"})


def test_smg_writes_out_its_routing_settings_and_a_switch_set_false_renders_its_off_spelling():
    """ROUTER_IMPLS: SMG takes ROUTER_FLAGS and its own SMG_FLAGS, each from one variable; protection off is written as
    --disable-worker-overload-protection, so both states stand on the command line."""
    table = rf.router_impl("smg")["flags"]
    values = {variable: 7 for variable in table.values()}
    flags = rf.router_flags({**values, "sglang_router_smg_overload_protection": True}, impl="smg")
    assert flags["worker-wedge-secs"] == 7 and flags["worker-overload-protection"] is True
    off = rf.router_flags({**values, "sglang_router_smg_overload_protection": False}, impl="smg")
    assert off["disable-worker-overload-protection"] is True and "worker-overload-protection" not in off
    assert ["--disable-worker-overload-protection"] in sf.render_lines(off)
    # sglang-router's table has none of them, and neither program's flags may come in as extra flags
    assert not set(rf.SMG_FLAGS) & set(rf.router_impl("sglang_router")["flags"])
    for flag in [*rf.SMG_FLAGS, "disable-worker-overload-protection"]:
        [message] = router_flag_rules.router_flag_problems({flag: 1})
        assert "which the collection owns: use sglang_router_smg_" in message, message
    with pytest.raises(sf.FlagError, match="sglang_router_impl 'amg' is not a router this collection runs"):
        rf.router_impl("amg")


@pytest.mark.parametrize(
    ("record", "planned", "want"),
    [
        pytest.param(None, "smg", "smg", id="no-record-the-plan"),
        pytest.param({"impl": "smg", "module": "smg.launch_router"}, "sglang_router", "smg", id="recorded-impl"),
        pytest.param({"module": "sglang_router.launch_router"}, "smg", "sglang_router", id="older-record-by-module"),
        pytest.param({"module": "other.router"}, "smg", "smg", id="unknown-module-the-plan"),
    ],
)
def test_the_running_router_program_is_read_from_its_record(record, planned, want):
    assert rf.running_impl(record, planned) == want


def test_the_router_unit_runs_the_chosen_programs_module_and_the_switch_changes_its_restart_key():
    one = _router([{"url": "http://a:1", "bootstrap_port": 8998}], [{"url": "http://b:2"}])
    settings = {"venv": "/v", "flags": dict(one["flags"]), "impl": "smg"}
    two = units.router_unit([{"url": "http://a:1", "bootstrap_port": 8998}], [{"url": "http://b:2"}], settings)
    assert one["module"] == "sglang_router.launch_router" and two["module"] == "smg.launch_router"
    assert (one["impl"], two["impl"]) == ("sglang_router", "smg") and "smg.launch_router" in two["exec"]
    assert one["restart_key"] != two["restart_key"], "a switch of program must restart the router"
    assert units.record(two, "/etc/systemd/system")["impl"] == "smg"


def _router(prefills, decodes, flags=None):
    return units.router_unit(
        prefills, decodes, {"venv": "/v", "flags": {"host": "0.0.0.0", "port": 8000, **(flags or {})}}
    )


def test_the_router_restart_key_ignores_its_worker_list_and_nothing_else():
    placement = [*PLACEMENT, {"name": "p1", "gpus": [8], "numa_node": 1, "cpus": [1], "warnings": []}]
    second = dict(PREFILL, name="p1", tp=1, port=30010, bootstrap_port=9008)
    prefills = units.worker_units([PREFILL, second], placement, PROFILE, "prefill", SETTINGS)
    decodes = units.worker_units([DECODE], PLACEMENT, PROFILE, "decode", SETTINGS)
    both, one = _router(prefills, decodes), _router(prefills[:1], decodes)
    assert both["lines"] != one["lines"] and both["description"] != one["description"]
    assert both["restart_key"] == one["restart_key"]  # scale-in or out: the running router takes it by its API
    # the quoted form of the command line (systemd_text) is not in it: a router deployed before it came keeps its key
    assert units.restart_key({k: v for k, v in both.items() if k != "systemd"}) == both["restart_key"]
    assert _router(prefills, decodes, {"policy": "random"})["restart_key"] != both["restart_key"]
    assert _router(prefills, decodes, {"port": 8001})["restart_key"] != both["restart_key"]
    assert (
        units.restart_key(dict(both, environment={**both["environment"], "RUST_LOG": "debug"})) != both["restart_key"]
    )


def test_a_record_holds_what_the_next_run_needs_of_a_unit_and_no_secret():
    spec = units.worker_units([DECODE], PLACEMENT, PROFILE, "decode", dict(SETTINGS, worker_api_key_set=True))[0]
    record = units.record(spec, "/etc/systemd/system")
    assert record["unit_file"] == f"/etc/systemd/system/{spec['unit']}.service"
    for key in ("unit", "role", "url", "health_url", "metrics_url", "python", "environment_file", "gpus"):
        assert record[key] == spec[key], key
    assert "flags" not in record and "lines" not in record and "secret_env" not in record
    router = units.record(_router(units.worker_units([PREFILL], PLACEMENT, PROFILE, "prefill", SETTINGS), [spec]), "/u")
    assert router["restart_key"] and router["worker_urls"] == [router["worker_urls"][0], spec["url"]]
    assert router["expected_workers"] == 2
