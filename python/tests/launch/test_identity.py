"""Runtime identity: every field changes the namespace; SparkCache agrees; quarantine keeps
every byte."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.launch import bound_contract, launcher_rules, site_env
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.identity import (
    IDENTITY_FILE,
    accept_state,
    checkpoint_identity,
    identity_hash,
    namespace,
    runtime_identity,
    sparkcache_identity,
)
from sparkflake.launch.resolution import resolve
from sparkflake.launch.spec import kv_transfer_config

T = "1" * 64
D = "2" * 64


def base_identity(**overrides):
    values = {
        "TP": 4, "PP": 1, "DCP": 1, "CP_KV_INTERLEAVE": 1, "FULL_CKV_GATHER": False, "NODE_COUNT": 4,
        "KV_CACHE_DTYPE": "fp8", "KV_BLOCK_SIZE": 64, "KV_RECORD_BYTES_PER_TOKEN": 24576,
        "SPARKCACHE_NAMESPACE": "manager-pages-v2", "SPARKCACHE_PUBLICATION": "snapshot-v1",
        "SPARKCACHE_MODEL_PROFILE": "glm52-nvfp4", "SPARKCACHE_DRAFT_KV_POLICY": "separate",
        "SPECULATIVE_METHOD": "dflash", "SPECULATIVE_TOKENS": 7, "ATTENTION_BACKEND": "",
        "MOE_BACKEND": "", "LINEAR_BACKEND": "", "NCCL_LIBRARY": "/srv/nccl/libnccl.so.2",
        "NCCL_LIBRARY_SHA256": "5" * 64,
    }
    values.update(overrides)
    return runtime_identity(
        profile="glm53-dflash7", values=values, rank=1, target_checkpoint=T, draft_checkpoint=D,
        components=COMPONENTS,
    )


COMPONENTS = {"vllm_wheel": "wheel vllm 0.33.0 sha256 " + "3" * 64, "vllm_source": "sdist vllm-sdist 0.33.0 sha256 "
              + "4" * 64, "b12x": "wheel b12x 1.5.1 sha256 " + "6" * 64}


def test_identity_names_the_locked_inputs_not_the_claims():
    from fixtures.launch import real_contract

    contract = real_contract("glm53-dflash7")
    inputs = contract.components
    assert inputs["vllm_wheel"].startswith("wheel vllm 0.33.0 sha256 ")
    assert inputs["b12x"].startswith("wheel b12x 1.5.1 sha256 ")
    assert inputs["nccl"].startswith("wheel nvidia-nccl-cu13 2.30.7 sha256 ")
    assert not any("331573d2" in text or "6255090a" in text for text in inputs.values())
    # the seeds' commits stay claims, with their status first
    assert contract.claims["vllm-composition"].startswith("unverified: active vLLM Python composition: rev 331573d2")
    assert contract.claims["nccl-switchless-library"] == (
        "unverified: switchless NCCL library: sha256 5f1c3f10d5ace66d4ba584415bbfe42b6ac1a0a9116a3b81dcbe50516ad924b3")
    assert base_identity()["inputs"] == COMPONENTS
    # the preloaded NCCL build is part of what runs; without NCCL_LIBRARY nothing is named
    assert base_identity(NCCL_LIBRARY="")["options"]["nccl_library_sha256"] is None


def _leaves(document, prefix=()):
    for key, value in document.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value is None:
        return "x"
    return value + "-changed"


def test_every_identity_field_changes_the_namespace():
    identity = base_identity()
    leaves = list(_leaves(identity))
    assert len(leaves) >= 20
    names = {namespace(identity)}
    for path, value in leaves:
        changed = copy.deepcopy(identity)
        target = changed
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = _changed(value)
        names.add(namespace(changed))
    assert len(names) == len(leaves) + 1


@pytest.mark.parametrize(
    ("setting", "value"),
    [("TP", 2), ("DCP", 2), ("CP_KV_INTERLEAVE", 4), ("FULL_CKV_GATHER", True), ("NODE_COUNT", 8), ("PP", 2),
     ("KV_CACHE_DTYPE", "bfloat16"), ("KV_BLOCK_SIZE", 128), ("KV_RECORD_BYTES_PER_TOKEN", 1),
     ("SPECULATIVE_TOKENS", 5), ("SPECULATIVE_METHOD", "mtp"), ("ATTENTION_BACKEND", "B12X"),
     ("MOE_BACKEND", "cutlass"), ("LINEAR_BACKEND", "cutlass")],
)
def test_each_state_changing_setting_changes_the_namespace(setting, value):
    assert namespace(base_identity(**{setting: value})) != namespace(base_identity())


@given(
    st.integers(0, 3), st.sampled_from([1, 2, 4]),
    st.sampled_from(["separate", "colocated_target"]),
    st.binary(min_size=1, max_size=8), st.binary(min_size=1, max_size=8),
)
def test_rank_and_checkpoints_change_the_namespace(rank, dcp, policy, target_seed, draft_seed):
    target = hashlib.sha256(target_seed).hexdigest()
    draft = hashlib.sha256(b"d" + draft_seed).hexdigest()

    def ident(rank=rank, target=target, draft=draft):
        return runtime_identity(
            profile="glm53-dflash7",
            values={**_flat(dcp=dcp, policy=policy)},
            rank=rank, target_checkpoint=target, draft_checkpoint=draft, components={},
        )

    here = namespace(ident())
    assert namespace(ident(rank=(rank + 1) % 4)) != here
    assert namespace(ident(target=hashlib.sha256(b"other" + target_seed).hexdigest())) != here
    assert namespace(ident(draft=hashlib.sha256(b"other" + draft_seed).hexdigest())) != here


def _flat(dcp, policy):
    return {
        "TP": 4, "PP": 1, "DCP": dcp, "CP_KV_INTERLEAVE": 1 if dcp == 1 else 4, "FULL_CKV_GATHER": dcp > 1,
        "NODE_COUNT": 4, "KV_CACHE_DTYPE": "fp8", "KV_BLOCK_SIZE": 64, "KV_RECORD_BYTES_PER_TOKEN": 24576,
        "SPARKCACHE_NAMESPACE": "manager-pages-v2", "SPARKCACHE_PUBLICATION": "snapshot-v1",
        "SPARKCACHE_MODEL_PROFILE": "glm52-nvfp4", "SPARKCACHE_DRAFT_KV_POLICY": policy,
        "SPECULATIVE_METHOD": "dflash", "SPECULATIVE_TOKENS": 7, "ATTENTION_BACKEND": "", "MOE_BACKEND": "", "LINEAR_BACKEND": "",
        "NCCL_LIBRARY": "", "NCCL_LIBRARY_SHA256": "",
    }


def test_identity_is_canonical():
    identity = base_identity()
    reordered = json.loads(json.dumps(identity, sort_keys=False))
    assert identity_hash(reordered) == identity_hash(identity)
    assert len(namespace(identity)) == 24


class _KvTransfer:
    """The two attributes SparkCache's parser reads from vLLM's KVTransferConfig."""

    def __init__(self, document):
        self.kv_load_failure_policy = document["kv_load_failure_policy"]
        self._extra = document["kv_connector_extra_config"]

    def get_from_extra_config(self, key, default):
        return self._extra.get(key, default)


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
@pytest.mark.parametrize("dcp", [1, 2, 4])
@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_sparkcache_agrees_with_our_identity(tmp_path, monkeypatch, profile, dcp, rank):
    """Our kv-transfer-config, parsed by SparkCache's own parser, gives the storage key
    recorded in our runtime identity for every physical rank."""
    from sparkcache.spark_context_cache_config import parse_connector_config

    for name in list(os.environ):
        if name.startswith("SPARK_CONTEXT_CACHE_"):
            monkeypatch.delenv(name)
    dflash = profile == "glm53-dflash7"
    # the launcher's own rules: the profile and its image's capabilities refuse DCP2/DCP4 and
    # SparkCache on
    contract = launcher_rules(bound_contract(profile, tmp_path))
    text = site_env(tmp_path, rank, draft=dflash, DCP=str(dcp))
    resolution = resolve(parse_env_text(text, "r.env"), contract, rank, "r.env")
    values = resolution.values
    target = checkpoint_identity(contract.target_files)
    draft = checkpoint_identity(contract.draft_files) if dflash else None
    ours = runtime_identity(profile=profile, values=values, rank=rank, target_checkpoint=target,
                            draft_checkpoint=draft, components=contract.components)
    kv = kv_transfer_config(values, target, draft, contract.container_cache_root)
    vllm_config = SimpleNamespace(
        cache_config=SimpleNamespace(block_size=values["KV_BLOCK_SIZE"]),
        parallel_config=SimpleNamespace(
            tensor_parallel_size=values["TP"], decode_context_parallel_size=values["DCP"],
            pipeline_parallel_size=values["PP"],
        ),
        model_config=SimpleNamespace(max_model_len=values["MAX_MODEL_LEN"]),
    )
    parsed = parse_connector_config(vllm_config, _KvTransfer(kv), SimpleNamespace(kv_cache_groups=()))
    theirs = parsed.build_identity(rank % values["DCP"], rank)
    assert theirs.storage_key == ours["sparkcache"]["storage_key"]
    assert parsed.root == contract.container_cache_root
    assert parsed.max_span == values["SPARKCACHE_MAX_SPAN_TOKENS"]
    direct = sparkcache_identity(
        model_profile=values["SPARKCACHE_MODEL_PROFILE"], target_checkpoint=target,
        draft_checkpoint=draft or target, draft_kv_policy=values["SPARKCACHE_DRAFT_KV_POLICY"],
        tp=values["TP"], dcp=values["DCP"], physical_rank=rank,
    )
    assert dict(direct.wire) == theirs.to_wire()


# --- stored state ----------------------------------------------------------------------


def _snapshot(root: Path):
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            files[relative] = ("link", os.readlink(path))
        elif path.is_file():
            files[relative] = ("file", path.read_bytes(), path.stat().st_mode & 0o777)
        else:
            files[relative] = ("dir",)
    return files


def test_state_created_reused(tmp_path):
    identity = base_identity()
    state = tmp_path / "state"
    first = accept_state(state, identity, tmp_path / "quarantine")
    assert first.action == "created"
    (state / "entry.bin").write_bytes(b"cached")
    second = accept_state(state, identity, tmp_path / "quarantine")
    assert second.action == "reused"
    assert (state / "entry.bin").read_bytes() == b"cached"
    assert not (tmp_path / "quarantine").exists()


_NAMES = st.text(alphabet="abcdefghijklmnop_-.é", min_size=1, max_size=8).filter(lambda n: n not in (".", ".."))


# top-level names must not collide with the directory and the symlink the test makes itself
_TOP_NAMES = _NAMES.filter(lambda n: n not in ("sub", "link"))


@given(
    st.dictionaries(_TOP_NAMES, st.binary(max_size=200), min_size=1, max_size=6),
    st.dictionaries(_NAMES, st.binary(max_size=50), max_size=3),
    st.sampled_from(["mismatch", "missing", "garbage"]),
)
def test_quarantine_keeps_every_byte(tmp_path_factory, top, nested, how):
    root = tmp_path_factory.mktemp("q")
    state = root / "state"
    state.mkdir()
    for name, content in top.items():
        (state / name).write_bytes(content)
    if nested:
        (state / "sub").mkdir(exist_ok=True)
        for name, content in nested.items():
            if (state / "sub").is_dir():
                (state / "sub" / name).write_bytes(content)
    (state / "link").symlink_to("dangling-target")
    other = base_identity(TP=2)
    if how == "mismatch":
        (state / IDENTITY_FILE).write_text(json.dumps(other))
    elif how == "garbage":
        (state / IDENTITY_FILE).write_bytes(b"\xff{not json")
    elif IDENTITY_FILE in top:
        (state / IDENTITY_FILE).unlink()
    before = _snapshot(state)
    decision = accept_state(state, base_identity(), root / "quarantine")
    assert decision.action == "quarantined"
    moved = Path(decision.quarantine) / "state"
    assert _snapshot(moved) == before
    record = json.loads((Path(decision.quarantine) / "record.json").read_text())
    assert record["moved_from"] == str(state)
    assert record["expected_identity_hash"] == identity_hash(base_identity())
    if how == "mismatch":
        assert record["found_identity"] == other
        assert "topology" in record["reason"]
    # the rank starts cold, with the new identity
    assert sorted(p.name for p in state.iterdir()) == [IDENTITY_FILE]
    assert json.loads((state / IDENTITY_FILE).read_text()) == base_identity()
    # quarantining again never overwrites an earlier quarantine
    (state / IDENTITY_FILE).write_text(json.dumps(other))
    again = accept_state(state, base_identity(), root / "quarantine")
    assert again.quarantine != decision.quarantine
    assert _snapshot(moved) == before
