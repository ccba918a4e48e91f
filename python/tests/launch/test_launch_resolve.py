"""Typed resolution: every auto rule and every refusal, with file:line in the message."""

from __future__ import annotations

import dataclasses

import pytest
from fixtures.launch import (
    bound_contract,
    launcher_rules,
    launcher_rules_contract,
    real_contract,
    site_env,
)
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.core.status import UNQUALIFIED_CONFIGURATION
from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.qualification import qualify
from sparkflake.launch.resolution import resolve
from sparkflake.profile.settings_catalog import CATALOG, GiB, parse_value, validate_runtime_table

ROOT = "/srv/test"


def run(text: str, profile: str = "glm53-dflash7", rank: int = 0):
    # The launcher's own rules, without the profile's refusals and with no image's
    # capabilities (test_launch_capabilities.py has those; test_a_value_the_profile_refuses_*
    # the profile's)
    return resolve(parse_env_text(text, "r.env"), launcher_rules_contract(profile), rank, "r.env")


def env(rank: int = 0, draft: bool = True, **extra: str) -> str:
    from pathlib import Path

    return site_env(Path(ROOT), rank, draft=draft, **extra)


def refused(text: str, fragment: str, line: int | None = None, **kwargs) -> str:
    with pytest.raises(InputError) as caught:
        run(text, **kwargs)
    message = str(caught.value)
    assert fragment in message, message
    if line is not None:
        assert message.startswith(f"r.env:{line}: "), message
    return message


@pytest.mark.parametrize(
    ("dcp", "interleave", "gather", "gib"),
    [(1, 1, False, 26), (2, 4, True, 30), (4, 4, True, 30)],
)
def test_dcp_auto_rules(dcp, interleave, gather, gib):
    resolution = run(env(DCP=str(dcp)))
    values, origins = resolution.values, resolution.origins
    assert values["CP_KV_INTERLEAVE"] == interleave
    assert values["FULL_CKV_GATHER"] is gather
    assert values["KV_CACHE_GIB"] == gib
    for key in ("CP_KV_INTERLEAVE", "FULL_CKV_GATHER", "KV_CACHE_GIB"):
        assert origins[key].startswith(f"auto: DCP{dcp}")
    assert origins["DCP"] == "env:r.env:6"
    assert origins["MAX_MODEL_LEN"] == "profile:glm53-dflash7"
    assert origins["MAX_NUM_SEQS"] == "default"
    assert values["MAX_MODEL_LEN"] == 1048576
    assert values["MAX_NUM_BATCHED_TOKENS"] == 8192


def origins_of(text: str):
    return run(text).origins


def test_other_auto_rules():
    values = run(env()).values
    assert values["DRAFT_TP"] == 4
    assert values["SPARKCACHE_DRAFT_KV_POLICY"] == "separate"
    assert values["SPARKCACHE_MAX_SPAN_TOKENS"] == 1048576
    assert values["SHM_SIZE"] is None
    assert values["NCCL_IB_GID_INDEX"] == 3  # the seeds' RoCE v2 GID index
    assert values["SERVED_MODEL_NAME"] == "glm-5.3-flash-dflash7"
    assert origins_of(env())["SERVED_MODEL_NAME"] == "auto: the profile's served model name"
    assert run(env(NCCL_IB_GID_INDEX="auto")).values["NCCL_IB_GID_INDEX"] is None
    mtp = run(env(draft=False), profile="glm53-mtp5").values
    assert mtp["SPARKCACHE_DRAFT_KV_POLICY"] == "colocated_target"
    assert mtp["DRAFT_TP"] is None
    assert mtp["SPECULATIVE_ADAPTIVE"] is False  # refused with vLLM 0.33.0: fixed depth
    private = run(env(IPC_MODE="private")).values
    assert private["SHM_SIZE"] == 32 * GiB


def test_explicit_compatible_values_are_kept():
    values = run(env(DCP="2", CP_KV_INTERLEAVE="4", FULL_CKV_GATHER="1", KV_CACHE_GIB="28")).values
    assert (values["CP_KV_INTERLEAVE"], values["FULL_CKV_GATHER"], values["KV_CACHE_GIB"]) == (4, True, 28)


@pytest.mark.parametrize(
    ("extra", "fragment", "line"),
    [
        ({"DCP": "2", "CP_KV_INTERLEAVE": "1"}, "CP_KV_INTERLEAVE=1 is incompatible with DCP=2", 7),
        ({"CP_KV_INTERLEAVE": "4"}, "CP_KV_INTERLEAVE=4 is incompatible with DCP=1", 6),
        ({"DCP": "4", "FULL_CKV_GATHER": "0"}, "needs the B12X full-CKV gather", 7),
        ({"FULL_CKV_GATHER": "1"}, "FULL_CKV_GATHER=1 is incompatible with DCP=1", 6),
        ({"TP": "2", "DCP": "4", "NODE_COUNT": "2"}, "TP=2 is not divisible by DCP=4", 6),
        ({"TP": "2"}, "must equal NODE_COUNT=4", 6),
        ({"KV_CACHE_GIB": "10"}, "cannot hold one MAX_MODEL_LEN=1048576", 6),
        ({"KV_RECORD_BYTES_PER_TOKEN": "40000"}, "cannot hold one MAX_MODEL_LEN", 6),
        ({"MAX_MODEL_LEN": "4096", "MAX_NUM_BATCHED_TOKENS": "8192"}, "exceeds MAX_MODEL_LEN=4096", 6),
        ({"MAX_NUM_BATCHED_TOKENS": "16", "MAX_NUM_SEQS": "4"}, "below one decode step", 6),
        ({"SPECULATIVE_METHOD": "mtp"}, "DRAFT_MODEL_PATH is set but SPECULATIVE_METHOD=mtp", 5),
        ({"DRAFT_TP": "3"}, "DRAFT_TP=3 must be 1 or TP=4", 6),
        ({"SPECULATIVE_ADAPTIVE": "1"}, "SPECULATIVE_ADAPTIVE=1 needs the embedded MTP head", 6),
        ({"SPARKCACHE_DRAFT_KV_POLICY": "colocated_target"}, "separate checkpoint", 6),
        ({"SPARKCACHE_MAX_SPAN_TOKENS": "2000000"}, "exceeds MAX_MODEL_LEN", 6),
        ({"SPARKCACHE_MIN_SPAN_TOKENS": "4096", "SPARKCACHE_MAX_SPAN_TOKENS": "2048"}, "exceeds SPARKCACHE_MAX_SPAN_TOKENS", 6),
        ({"PP": "2", "TP": "2", "NODE_COUNT": "4", "SPARKCACHE_ENABLED": "1"}, "PP must be 1 with SPARKCACHE_ENABLED=1", 6),
        ({"KV_CACHE_DTYPE": "bfloat16", "KV_RECORD_BYTES_PER_TOKEN": "24576", "SPARKCACHE_ENABLED": "1"}, "needs SPARKCACHE_ENABLED=0", 6),
        ({"SPARKCACHE_MIN_SPAN_TOKENS": "128", "SPARKCACHE_ENABLED": "1"}, "SparkCache refuses this deployment", 6),
        ({"KV_BLOCK_SIZE": "16", "DCP": "2", "CP_KV_INTERLEAVE": "4", "SPARKCACHE_MIN_SPAN_TOKENS": "1024"}, None, None),
        ({"API_PORT": "29501"}, "API_PORT and MASTER_PORT must differ", 6),
        ({"SHM_SIZE": "1073741824"}, "SHM_SIZE cannot be set with IPC_MODE=host", 6),
        ({"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "4"}, "exceeds NCCL_MAX_NCHANNELS", 6),
        ({"ALL2ALL_BACKEND": "deepep_low_latency"}, "contains no DeepEP", 6),
        ({"CACHE_ROOT": ROOT + "/target/cache"}, "overlaps TARGET_MODEL_PATH", 5),
    ],
)
def test_refusals(extra, fragment, line):
    text = env(**extra)
    if fragment is None:  # a compatible combination among the refusals, as a control
        assert run(text).values["KV_BLOCK_SIZE"] == 16
        return
    if "CACHE_ROOT" in extra:
        text = text.replace(f"CACHE_ROOT={ROOT}/cache\n", "")
    refused(text, fragment, line)


def test_sparkcache_off_keeps_prefix_caching_rules():
    values = run(env(SPARKCACHE_ENABLED="0", KV_CACHE_DTYPE="bfloat16", KV_RECORD_BYTES_PER_TOKEN="24000")).values
    assert values["SPARKCACHE_ENABLED"] is False


def test_rank_address_rules():
    refused(env(rank=0).replace("NODE_ADDRESS=10.0.0.1", "NODE_ADDRESS=10.0.0.9"), "rank 0 is the master", 1)
    refused(env(rank=2).replace("NODE_ADDRESS=10.0.0.3", "NODE_ADDRESS=10.0.0.1"), "has rank 0's address", 1, rank=2)
    with pytest.raises(InputError, match="rank 4 is outside 0..3"):
        run(env(rank=4), rank=4)


def test_missing_required_site_values():
    message = refused("NODE_ADDRESS=10.0.0.1\nMASTER_ADDRESS=10.0.0.1\n", "missing required site value(s)")
    assert "TARGET_MODEL_PATH" in message and "CACHE_ROOT" in message
    refused(env(draft=False), "SPECULATIVE_METHOD=dflash needs DRAFT_MODEL_PATH")


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("KV_CACHE_GIB", "26GiB", "non-negative decimal integer"),
        ("MAX_NUM_SEQS", "-1", "non-negative decimal integer"),
        ("MAX_MODEL_LEN", "0x10", "no sign, unit, exponent or 0x prefix"),
        ("MAX_MODEL_LEN", "1e6", "non-negative decimal integer"),
        ("MAX_MODEL_LEN", "01024", "non-negative decimal integer"),
        ("GPU_MEMORY_UTILIZATION", "86%", "decimal number"),
        ("GPU_MEMORY_UTILIZATION", "1.5", "above the maximum"),
        ("DCP", "3", "expected one of 1, 2, 4"),
        ("SPARKCACHE_ENABLED", "yes", "expected 0 or 1"),
        ("KV_CACHE_DTYPE", "int8", "expected one of"),
        ("API_PORT", "70000", "above the maximum 65535"),
        ("MAX_NUM_SEQS", "auto", "has no auto rule"),
        ("MAX_NUM_SEQS", "", "remove the line to use the default"),
        ("NODE_ADDRESS", "host.example", "IPv4 or IPv6 address"),
        ("CACHE_ROOT", "relative/path", "absolute path"),
        ("CONTAINER_ULIMITS", "memlock=unlimited", "name=soft[:hard]"),
    ],
)
def test_malformed_values(key, value, fragment):
    text = env() + f"{key}={value}\n"
    if key in ("NODE_ADDRESS", "CACHE_ROOT"):
        text = "\n".join(line for line in text.splitlines() if not line.startswith(key + "=")) + f"\n{key}={value}\n"
    with pytest.raises(InputError) as caught:
        run(text)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("r.env:")


def test_unknown_key_suggests_nearest():
    refused(env(MAX_MODEL_LENGTH="4096"), "unknown setting MAX_MODEL_LENGTH; did you mean MAX_MODEL_LEN?", 6)
    refused(env(SPARKCACHE_ENABLE="0"), "did you mean SPARKCACHE_ENABLED?", 6)


def test_qualification(tmp_path):
    # With the image's capabilities, the seeds' qualified configuration (SparkCache on)
    # cannot run at all: this image's SparkCache refuses GLM-5.3
    # (the profile refuses SPARKCACHE_ENABLED=1 with SparkCache's own reasons)
    refused = qualify(run(env()), bound_contract("glm53-dflash7", tmp_path), None)
    assert refused.status == UNQUALIFIED_CONFIGURATION
    assert "qualified configuration not applicable" in refused.differences[0]
    assert "SPARKCACHE_ENABLED=1 is refused by profile glm53-dflash7: SparkCache 0.1.0a2 refuses" in refused.differences[0]
    assert "Mamba" in refused.differences[0] and "2304" in refused.differences[0]
    # the launcher's own rules: the profile's default (off) is not the qualified configuration
    contract = launcher_rules(bound_contract("glm53-dflash7", tmp_path))
    default = qualify(run(env()), contract, None)
    assert default.status == UNQUALIFIED_CONFIGURATION
    assert default.differences == ("SPARKCACHE_ENABLED: qualified 1, resolved 0",)
    qualified = qualify(run(env(SPARKCACHE_ENABLED="1")), contract, None)
    assert qualified.status == "implemented"  # the profile's status: no image binds the claim yet
    assert qualified.differences == ()
    changed = qualify(run(env(MAX_NUM_SEQS="8", SPARKCACHE_ENABLED="1")), contract, None)
    assert changed.status == UNQUALIFIED_CONFIGURATION
    assert changed.differences == ("MAX_NUM_SEQS: qualified 16, resolved 8",)
    assert changed.settings_hash != qualified.settings_hash
    dcp2 = qualify(run(env(DCP="2")), contract, None)
    assert dcp2.status == UNQUALIFIED_CONFIGURATION and any(d.startswith("DCP:") for d in dcp2.differences)
    mtp = qualify(run(env(draft=False), profile="glm53-mtp5"), real_contract("glm53-mtp5"), None)
    assert mtp.status == "research-only"
    # site values never change the claim
    other_site = run(env(SPARKCACHE_ENABLED="1").replace("/srv/test/cache", "/srv/other/cache"))
    assert qualify(other_site, contract, None).settings_hash == qualified.settings_hash


def test_qualified_image_binding(tmp_path):
    image = "sha256:" + "a" * 64
    contract = dataclasses.replace(launcher_rules(bound_contract("glm53-dflash7", tmp_path)), status="qualified",
                                   image_id=image)
    resolution = run(env(SPARKCACHE_ENABLED="1"))
    assert qualify(resolution, contract, image).status == "qualified"
    other = qualify(resolution, contract, "sha256:" + "b" * 64)
    assert other.status == UNQUALIFIED_CONFIGURATION and "not the profile's pinned image" in other.differences[0]


def test_validate_runtime_table_hook():
    assert validate_runtime_table({"DCP": 2, "SPARKCACHE_ENABLED": True, "GPU_MEMORY_UTILIZATION": 0.9}, "p: runtime") == {
        "DCP": 2,
        "SPARKCACHE_ENABLED": True,
        "GPU_MEMORY_UTILIZATION": 0.9,
    }
    with pytest.raises(InputError, match=r"^p: runtime.TP_SIZE: unknown setting TP_SIZE; did you mean"):
        validate_runtime_table({"TP_SIZE": 4}, "p: runtime")
    with pytest.raises(InputError, match=r"^p: runtime.DCP: DCP='3'"):
        validate_runtime_table({"DCP": 3}, "p: runtime")
    # the real profiles use only catalog keys
    for name in ("glm53-dflash7", "glm53-mtp5"):
        real_contract(name)


@given(st.text(max_size=12))
def test_parse_value_never_raises_other_than_valueerror(raw):
    for setting in CATALOG.values():
        try:
            parse_value(setting, raw)
        except ValueError:
            pass


_KEYS = st.sampled_from(sorted(CATALOG) + ["MAX_MODEL_LENGTH", "export", "tp"])
_VALUES = st.one_of(
    st.sampled_from(["auto", "0", "1", "2", "4", "-1", "0x10", "26GiB", "1e3", "0.86", "", "fp8", "dflash", "mtp",
                     "/srv/x", "relative", "10.0.0.1", "::1", "$(id)", "`id`", "a;b", "'quoted value'",
                     "\"dq\"", "é", "nofile=1:2"]),
    st.text(max_size=12),
)


@given(st.lists(st.tuples(_KEYS, _VALUES), max_size=12), st.integers(0, 5))
def test_fuzz_resolution_only_input_errors_naming_the_file(entries, rank):
    import re

    text = env(rank=min(rank, 3)) + "".join(f"{key}={value}\n" for key, value in entries)
    try:
        resolution = run(text, rank=rank)
    except InputError as exc:
        assert re.match(r"(r\.env(:\d+| \(profile [^)]*\))?: |rank \d+ is outside)", str(exc)), str(exc)
    else:
        assert set(resolution.values) == set(CATALOG)
        # every auto rule was applied; "auto" stays only where it is vLLM's own choice (LOAD_FORMAT)
        assert all(value != "auto" or "auto" in CATALOG[key].choices for key, value in resolution.values.items())


@given(st.sampled_from(sorted(CATALOG)), st.data())
def test_render_parse_round_trip(key, data):
    setting = CATALOG[key]
    candidates = [c for c in setting.choices if c not in setting.refused] or [setting.default or ""]
    if setting.kind in ("int", "bytes") and not setting.choices and setting.minimum is not None:
        candidates.append(str(data.draw(st.integers(int(setting.minimum), int(setting.maximum)))))
    raw = data.draw(st.sampled_from(candidates))
    if raw in ("", "auto") or setting.required:
        return
    value = parse_value(setting, raw)
    from sparkflake.profile.settings_catalog import render_value

    assert parse_value(setting, render_value(value)) == value


# ---- issue 28 class 10: values that cannot work fail the dry run ----------------------


def _with(text: str, key: str, value: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(key + "=")) + f"\n{key}={value}\n"


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("MASTER_ADDRESS", "0.0.0.0", "the unspecified address binds every interface but names no host"),
        ("MASTER_ADDRESS", "::", "the unspecified address"),
        ("MASTER_ADDRESS", "::ffff:0.0.0.0", "the unspecified address"),
        ("MASTER_ADDRESS", "224.0.0.1", "a multicast address is no host's address"),
        ("MASTER_ADDRESS", "ff02::1", "a multicast address"),
        ("MASTER_ADDRESS", "255.255.255.255", "a broadcast or reserved"),
        ("NODE_ADDRESS", "240.0.0.7", "a broadcast or reserved"),
        ("MASTER_ADDRESS", "\"fe80::1%eth0 --enforce-eager\"", "the zone id after '%' is not an interface name"),
        ("NODE_ADDRESS", "fe80::1%this-name-is-too-long", "the zone id"),
        ("CONTAINER_ULIMITS", "bogus=1", "'bogus' is not a ulimit (one of core, cpu"),
        ("CONTAINER_ULIMITS", "nofile=4096:1024", "nofile=4096:1024: the soft limit exceeds the hard limit"),
        ("CONTAINER_ULIMITS", "stack=-1:8388608", "the soft limit exceeds the hard limit"),
        ("CONTAINER_ULIMITS", "nofile=-1", "nofile cannot be unlimited"),
        ("CONTAINER_ULIMITS", "nproc=0", "a nproc limit of 0 lets the container start nothing"),
        ("CONTAINER_ULIMITS", "memlock=99999999999999999999", "a limit is at most 9223372036854775807"),
        ("CONTAINER_ULIMITS", "memlock=-1,memlock=-1", "memlock is given twice"),
    ],
)
def test_values_that_cannot_work_are_refused_with_the_line(key, value, fragment):
    text = _with(env(), key, value)
    message = refused(text, fragment)
    assert message.startswith(f"r.env:{len(text.splitlines())}: "), message


@pytest.mark.parametrize("zone", ["eth0 x", "eth0\n--x", "", "x" * 16])
def test_a_zone_id_with_spaces_or_a_newline_never_parses(zone):
    with pytest.raises(ValueError):
        parse_value(CATALOG["MASTER_ADDRESS"], f"fe80::1%{zone}")


def test_a_loopback_master_or_node_address_is_refused_for_a_rank_other_than_0():
    refused(_with(env(1), "MASTER_ADDRESS", "127.0.0.1"),
            "MASTER_ADDRESS=127.0.0.1 is a loopback address: rank 1 of 4 runs on another host", rank=1)
    refused(_with(env(2), "NODE_ADDRESS", "::1"), "NODE_ADDRESS=::1 is a loopback address: rank 2 of 4", rank=2)
    # rank 0 binds where it is told (a one-host test of the launcher)
    assert run(_with(_with(env(0), "MASTER_ADDRESS", "127.0.0.1"), "NODE_ADDRESS", "127.0.0.1")).values[
        "MASTER_ADDRESS"] == "127.0.0.1"


@given(st.ip_addresses())
def test_an_accepted_address_is_a_unicast_host_address_in_its_canonical_form(address):
    try:
        parsed = parse_value(CATALOG["MASTER_ADDRESS"], str(address))
    except ValueError as refusal:
        plain = getattr(address, "ipv4_mapped", None) or address
        assert plain.is_unspecified or plain.is_multicast or plain.is_reserved, refusal
        return
    assert parsed == str(address)
    assert not (address.is_unspecified or address.is_multicast)


@given(st.from_regex(r"[A-Za-z0-9_.-]{1,15}", fullmatch=True) | st.text(max_size=20))
def test_a_zone_id_is_an_interface_name_or_nothing(zone):
    import re

    raw = f"fe80::1%{zone}"
    try:
        parsed = parse_value(CATALOG["NODE_ADDRESS"], raw)
    except ValueError:
        assert not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", zone)
        return
    assert parsed == raw and re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", zone)


_limit = st.one_of(st.just("-1"), st.integers(0, 2**63 - 1).map(str))


@given(st.sampled_from(sorted(["core", "cpu", "memlock", "nofile", "nproc", "stack", "rtprio"])), _limit, _limit)
def test_an_accepted_ulimit_has_soft_at_most_hard(name, soft, hard):
    try:
        parse_value(CATALOG["CONTAINER_ULIMITS"], f"{name}={soft}:{hard}")
    except ValueError:
        return
    infinite = 2**63 - 1

    def limit(text):
        return infinite if text == "-1" else int(text)

    assert limit(soft) <= limit(hard)
    assert not (name == "nofile" and limit(hard) == infinite)


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
@pytest.mark.parametrize(("extra", "setting"), [
    ({"DCP": "2"}, "DCP=2"), ({"DCP": "4"}, "DCP=4"), ({"KV_CACHE_DTYPE": "bfloat16", "SPARKCACHE_ENABLED": "0"},
                                                      "KV_CACHE_DTYPE=bfloat16"),
    ({"ATTENTION_BACKEND": "B12X"}, "ATTENTION_BACKEND=B12X"), ({"ATTENTION_BACKEND": "TRITON_MLA"},
                                                                "ATTENTION_BACKEND=TRITON_MLA"),
    ({"MOE_BACKEND": "triton"}, "MOE_BACKEND=triton"),
    ({"SPARKCACHE_ENABLED": "1"}, "SPARKCACHE_ENABLED=1"),
])
def test_a_value_the_profile_refuses_is_refused_with_vllms_reason_and_the_line(profile, extra, setting):
    """The profile's [refused]: what vLLM 0.33.0 in its image refuses at engine start on GB10
    (the runtime check's verdicts, quoted), refused before anything starts."""
    contract = dataclasses.replace(real_contract(profile), capabilities=None)
    text = env(draft=profile == "glm53-dflash7", **extra)
    with pytest.raises(InputError) as caught:
        resolve(parse_env_text(text, "r.env"), contract, 0, "r.env")
    message = str(caught.value)
    line = 6 if profile == "glm53-dflash7" else 5  # the env file's first line after the site's
    assert message.startswith(f"r.env:{line}: ") and f"{setting} is refused by profile {profile}: " in message and ("vLLM 0.33.0" in message or "SparkCache 0.1.0a2" in message)
    # the default launch is not refused, and vLLM's block size is its own
    values = resolve(parse_env_text(env(draft=profile == "glm53-dflash7"), "r.env"), contract, 0, "r.env").values
    assert values["KV_BLOCK_SIZE"] == 2304 and values["DCP"] == 1


def test_a_refused_table_is_checked_against_the_catalog():
    from sparkflake.profile.settings_catalog import refused_values

    assert refused_values({"DCP": {"2": "r"}, "SPARKCACHE_ENABLED": {"1": "s"}}, "p: refused") == {
        "DCP": {2: "r"}, "SPARKCACHE_ENABLED": {True: "s"}}
    with pytest.raises(InputError, match=r"^p: refused.DCP_SIZE: unknown setting DCP_SIZE"):
        refused_values({"DCP_SIZE": {"2": "r"}}, "p: refused")
    # a value the setting cannot take would refuse nothing: named
    with pytest.raises(InputError, match=r"^p: refused.DCP.two: "):
        refused_values({"DCP": {"two": "r"}}, "p: refused")
