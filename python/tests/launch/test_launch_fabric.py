"""The rank's fabric as the seeds run it: NCCL over RDMA (devices, IPC_LOCK, unlimited
memlock, NCCL settings), the host's HCAs and interfaces checked before start, the operator's
NCCL build bound by sha256, and the serving surface (parsers, served name)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from fixtures.launch import bound_contract, fabric_host, real_contract, site_env, write_env
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.host_fabric import parse_name_list
from sparkflake.launch.plan import plan_from_assignments, plan_launch
from sparkflake.launch.spec import CONTAINER_NCCL_LIBRARY, JIT_CACHE_VARIABLES
from sparkflake.profile.settings_catalog import (
    CATALOG,
    REASONING_PARSERS,
    TOOL_CALL_PARSERS,
    parse_value,
)

ROOT = Path("/srv/fabric")
SEED_NCCL_SHA256 = "5f1c3f10d5ace66d4ba584415bbfe42b6ac1a0a9116a3b81dcbe50516ad924b3"


def spec_plan(profile: str = "glm53-dflash7", **extra: str):
    contract = dataclasses.replace(real_contract(profile), capabilities=None)
    text = site_env(ROOT, 0, draft=profile == "glm53-dflash7", **extra)
    return plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env",
                                 contract=contract, engine=None, run_checks=False)


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
def test_ib_spec_carries_devices_capability_memlock_and_nccl_settings(profile):
    plan = spec_plan(profile)
    spec, argv = plan.spec, plan.argv
    assert spec.devices == ("/dev/infiniband",) and spec.cap_add == ("IPC_LOCK",)
    assert "/dev/infiniband" in flag_values(argv, "--device")
    assert flag_values(argv, "--cap-add") == ["IPC_LOCK"]
    assert [u for u in flag_values(argv, "--ulimit") if u.startswith("memlock=")] == ["memlock=-1:-1"]
    # the seeds' ring: IB with GID index 3, ring algorithm, cross-NIC, 4 channels; the site's names
    assert {key: spec.env[key] for key in spec.env if key.startswith(("NCCL_", "GLOO_"))} == {
        "NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_NET_PLUGIN": "none", "NCCL_IB_HCA": "rocep1s0f0",
        "NCCL_IB_GID_INDEX": "3", "NCCL_IB_MERGE_NICS": "0", "NCCL_IB_SUBNET_AWARE_ROUTING": "1",
        "NCCL_ALGO": "Ring", "NCCL_CROSS_NIC": "1", "NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4",
        "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
    }
    assert "LD_PRELOAD" not in spec.env and "VLLM_NCCL_SO_PATH" not in spec.env
    record = spec.as_record()
    assert record["devices"] == ["/dev/infiniband"] and record["cap_add"] == ["IPC_LOCK"]


def test_socket_spec_has_no_rdma_and_keeps_the_operators_memlock():
    plan = spec_plan(NCCL_NET="Socket", CONTAINER_ULIMITS="memlock=65536,stack=67108864")
    assert plan.spec.devices == () and plan.spec.cap_add == ()
    assert "--cap-add" not in plan.argv and "/dev/infiniband" not in plan.argv
    assert plan.spec.ulimits == ("memlock=65536", "stack=67108864")
    assert plan.spec.env["NCCL_NET"] == "Socket" and "NCCL_IB_HCA" not in plan.spec.env


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"NCCL_IB_HCA": ""}, "NCCL_NET=IB needs NCCL_IB_HCA:"),
        ({"SOCKET_IFNAME": ""}, "NCCL_NET=IB needs SOCKET_IFNAME:"),
        ({"CONTAINER_ULIMITS": "memlock=65536"}, "unlimited locked memory; CONTAINER_ULIMITS has memlock=65536"),
        ({"NCCL_LIBRARY": "/srv/nccl/libnccl.so.2", "NCCL_LIBRARY_SHA256": ""}, "is not bound"),
        ({"SPARKCACHE_PLACEMENT_LIBRARY": "/srv/sc/libspark_cache_placement.so"}, "reads no placement-library key"),
        ({"AUTO_TOOL_CHOICE": "1", "TOOL_CALL_PARSER": ""}, "AUTO_TOOL_CHOICE=1 needs TOOL_CALL_PARSER"),
        ({"TOOL_CALL_PARSER": "glm99"}, "TOOL_CALL_PARSER='glm99': expected one of"),
        ({"REASONING_PARSER": "glm47x"}, "REASONING_PARSER='glm47x': expected one of"),
        ({"SERVED_MODEL_NAME": "-glm"}, "SERVED_MODEL_NAME='-glm': expected a letter or digit"),
        ({"NCCL_NET": "RoCE"}, "NCCL_NET='RoCE': expected one of IB, Socket"),
    ],
)
def test_fabric_and_serving_refusals_name_the_line(extra, fragment):
    with pytest.raises(InputError) as caught:
        spec_plan(**extra)
    assert fragment in str(caught.value), str(caught.value)
    assert str(caught.value).startswith("r.env:"), str(caught.value)


def test_served_name_and_parsers_reach_the_serve_arguments():
    default = list(spec_plan().spec.serve_args)
    assert flag_values(default, "--served-model-name") == ["glm-5.3-flash-dflash7"]
    assert flag_values(default, "--tool-call-parser") == ["glm47"]
    assert flag_values(default, "--reasoning-parser") == ["glm45"]
    assert "--enable-auto-tool-choice" in default
    assert flag_values(default, "--max-num-seqs") == ["16"]
    compilation = json.loads(flag_values(default, "--compilation-config")[0])
    assert compilation["max_cudagraph_capture_size"] == 128
    named = list(spec_plan(SERVED_MODEL_NAME="zai-org/GLM-5.3", TOOL_CALL_PARSER="", AUTO_TOOL_CHOICE="0",
                           REASONING_PARSER="").spec.serve_args)
    assert flag_values(named, "--served-model-name") == ["zai-org/GLM-5.3"]
    assert not {"--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice"} & set(named)


def test_every_jit_cache_is_under_the_rank_jit_root():
    plan = spec_plan()
    jit_root = plan.contract.container_jit_root
    mounted = {m.target: m for m in plan.spec.mounts}
    assert jit_root in mounted and not mounted[jit_root].read_only
    assert mounted[jit_root].source == str(plan.jit_dir) and plan.namespace in mounted[jit_root].source
    for variable, directory, _reader in JIT_CACHE_VARIABLES:
        assert plan.spec.env[variable] == f"{jit_root}/{directory}", variable
    assert {"B12X_COMPILE_CACHE_DIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
            "FLASHINFER_WORKSPACE_BASE", "CUDA_CACHE_PATH", "VLLM_CACHE_ROOT"} <= {v for v, _, _ in JIT_CACHE_VARIABLES}


def _checks(tmp_path: Path, host: Path, **extra: str):
    contract = bound_contract("glm53-dflash7", tmp_path)
    env_file = write_env(tmp_path, site_env(tmp_path, 0, API_PORT="18471", MASTER_PORT="18472", **extra))
    plan = plan_launch(rank=0, env_file=env_file, contract=contract, engine=None, check_engine=False, host_root=host)
    return plan, {check.id: check for check in plan.checks}


def test_host_with_the_fabric_passes(tmp_path):
    plan, checks = _checks(tmp_path, fabric_host(tmp_path / "host"))
    for check_id in ("fabric.rdma-devices", "fabric.hca", "fabric.interface"):
        assert checks[check_id].status == "pass", checks[check_id]
    assert plan.ok, [c for c in plan.checks if c.status != "pass"]
    # what runs is the identity's inputs; the seeds' commits are reported as claims, with status
    report = plan.report()
    assert report["claims"]["b12x"].startswith("unverified: Local Inference Lab B12X: rev 6255090a")
    assert report["identity"]["inputs"]["b12x"].startswith("wheel b12x 1.5.1 sha256 ")


@pytest.mark.parametrize(
    ("host", "check_id", "fragment"),
    [
        ({"hcas": {}}, "fabric.hca", "rocep1s0f0: no such HCA"),
        ({"hcas": {"rocep1s0f1": "4: ACTIVE"}}, "fabric.hca", "present: rocep1s0f1"),
        ({"hcas": {"rocep1s0f0": "1: DOWN"}}, "fabric.hca", "rocep1s0f0: no active port (port 1: 1: DOWN)"),
        ({"interfaces": ("lo", "enP7s7")}, "fabric.interface", "no interface enp1s0f0np0 on this host"),
        ({"uverbs": False}, "fabric.rdma-devices", "has no uverbs device"),
        ({"gid3": "0000:0000:0000:0000:0000:0000:0000:0000"}, "fabric.hca",
         "rocep1s0f0: GID index 3 has no address on port(s) 1"),
        ({"extra": {"NCCL_IB_GID_INDEX": "5"}}, "fabric.hca", "GID index 5 has no address"),
    ],
)
def test_missing_hca_or_interface_is_a_named_check_failure(tmp_path, host, check_id, fragment):
    host = dict(host)
    extra = host.pop("extra", {})
    plan, checks = _checks(tmp_path, fabric_host(tmp_path / "host", **host), **extra)
    assert checks[check_id].status == "fail"
    assert fragment in checks[check_id].detail, checks[check_id].detail
    assert not plan.ok


def test_socket_network_checks_no_hca(tmp_path):
    _plan, checks = _checks(tmp_path, fabric_host(tmp_path / "host", hcas={}, uverbs=False), NCCL_NET="Socket")
    assert "fabric.hca" not in checks and "fabric.rdma-devices" not in checks
    assert checks["fabric.interface"].status == "pass"


def test_operator_nccl_library_is_bound_by_sha256_before_start(tmp_path):
    library = tmp_path / "libnccl.so.2"
    library.write_bytes(b"\x7fELF operator build of NCCL " * 64)
    good = hashlib.sha256(library.read_bytes()).hexdigest()
    host = fabric_host(tmp_path / "host")
    plan, checks = _checks(tmp_path, host, NCCL_LIBRARY=str(library), NCCL_LIBRARY_SHA256=good)
    assert checks["nccl.library"].status == "pass" and plan.ok
    assert plan.spec.env["LD_PRELOAD"] == plan.spec.env["VLLM_NCCL_SO_PATH"] == CONTAINER_NCCL_LIBRARY
    mount = next(m for m in plan.spec.mounts if m.target == CONTAINER_NCCL_LIBRARY)
    assert mount.source == str(library) and mount.read_only
    assert plan.identity["options"]["nccl_library_sha256"] == good
    # without NCCL_LIBRARY_SHA256 in runtime.env, the profile's binding (the seeds' library) applies
    wrong, checks = _checks(tmp_path, host, NCCL_LIBRARY=str(library))
    assert wrong.resolution.values["NCCL_LIBRARY_SHA256"] == SEED_NCCL_SHA256
    assert checks["nccl.library"].status == "fail" and not wrong.ok
    assert f"has sha256 {good}, NCCL_LIBRARY_SHA256 binds {SEED_NCCL_SHA256}" in checks["nccl.library"].detail
    absent, checks = _checks(tmp_path, host, NCCL_LIBRARY=str(tmp_path / "missing.so"), NCCL_LIBRARY_SHA256=good)
    assert checks["nccl.library"].status == "fail" and "missing.so: cannot read" in checks["nccl.library"].detail
    directory, checks = _checks(tmp_path, host, NCCL_LIBRARY=str(tmp_path), NCCL_LIBRARY_SHA256=good)
    assert checks["nccl.library"].status == "fail" and "is a directory" in checks["nccl.library"].detail


_NAME = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)


@given(st.lists(_NAME, min_size=1, max_size=4), st.sampled_from(["", "^", "="]),
       st.lists(st.one_of(st.none(), st.integers(1, 2)), min_size=4, max_size=4))
def test_name_list_round_trip(names, prefix, ports):
    text = prefix + ",".join(name + (f":{port}" if port else "") for name, port in zip(names, ports, strict=False))
    parsed = parse_name_list(text)
    assert parsed.names == tuple(names)
    assert parsed.exclude == (prefix == "^") and parsed.exact == (prefix == "=")


@given(st.text(max_size=80))
def test_served_name_and_sha256_kinds_accept_exactly_their_grammar(raw):
    import re

    for key, pattern in (("SERVED_MODEL_NAME", r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}"),
                         ("NCCL_LIBRARY_SHA256", r"[0-9a-f]{64}")):
        setting = CATALOG[key]
        if raw in ("", "auto"):
            continue
        if re.fullmatch(pattern, raw):
            assert parse_value(setting, raw) == raw
        else:
            with pytest.raises(ValueError):
                parse_value(setting, raw)


def test_parser_choices_are_vllms():
    # the seeds' parsers are among vLLM 0.33.0's registered names
    assert "glm47" in TOOL_CALL_PARSERS and "glm45" in REASONING_PARSERS
    assert CATALOG["TOOL_CALL_PARSER"].choices == TOOL_CALL_PARSERS


def test_the_runtime_check_judges_the_fabric_variants():
    from sparkflake.launch.conformance import conformance_cases

    cases = {case.name: case for case in conformance_cases(real_contract("glm53-dflash7"))}
    socket_case = cases["glm53-dflash7-nccl_net=Socket"]
    assert socket_case.env["NCCL_NET"] == "Socket" and "NCCL_IB_HCA" not in socket_case.env
    preloaded = cases["glm53-dflash7-nccl_library=/srv/sparkflake-check/nccl/libnccl.so.2"]
    assert preloaded.env["LD_PRELOAD"] == preloaded.env["VLLM_NCCL_SO_PATH"] == CONTAINER_NCCL_LIBRARY
    default = cases["glm53-dflash7-dcp1-sparkcache-off"]
    assert default.env["NCCL_NET"] == "IB" and default.env["NCCL_IB_GID_INDEX"] == "3"
    assert {"--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice"} <= set(default.serve_args)
