"""Shared fixtures of the launch tests: small checkpoints with known bytes, the real
profiles' contracts bound to them, env files."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path

from sparkflake.launch.contract import IdentityFile, LaunchContract, contract_from_profile
from sparkflake.lock.profile_locks import load_profile

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"

TARGET_FILES = {
    "config.json": b'{"architectures": ["GlmMoeDsaForCausalLM"], "num_hidden_layers": 4}\n',
    "tokenizer.json": b'{"model": {"type": "BPE"}}\n',
    "tokenizer_config.json": b'{"model_max_length": 1048576}\n',
    "model.safetensors.index.json": b'{"weight_map": {"lm_head.weight": "model-00001.safetensors"}}\n',
}
DRAFT_FILES = {
    "config.json": b'{"architectures": ["DFlashDraftModel"]}\n',
    "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)) * 16,
}


def write_checkpoint(directory: Path, files: Mapping[str, bytes]) -> tuple[IdentityFile, ...]:
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, content in sorted(files.items()):
        (directory / name).write_bytes(content)
        rows.append(IdentityFile(name, hashlib.sha256(content).hexdigest(), len(content)))
    return tuple(rows)


def real_contract(name: str) -> LaunchContract:
    return contract_from_profile(load_profile(PROFILES / name / "profile.toml", check_locks=False))


def bound_contract(name: str, root: Path, image_id: str | None = None, labels=None) -> LaunchContract:
    """The real profile's contract with identity files of fixture checkpoints under ``root``."""
    target = write_checkpoint(root / "target", TARGET_FILES)
    draft = write_checkpoint(root / "draft", DRAFT_FILES)
    contract = real_contract(name)
    contract = dataclasses.replace(contract, target_files=target, draft_files=draft)
    if image_id is not None:
        contract = contract.with_image(image_id, labels)
    return contract


def site_env(root: Path, rank: int = 0, *, draft: bool = True, **extra: str) -> str:
    lines = [
        f"NODE_ADDRESS=10.0.0.{rank + 1}",
        "MASTER_ADDRESS=10.0.0.1",
        f"TARGET_MODEL_PATH={root / 'target'}",
        f"CACHE_ROOT={root / 'cache'}",
    ]
    if draft:
        lines.append(f"DRAFT_MODEL_PATH={root / 'draft'}")
    lines += [f"{key}={value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def write_env(root: Path, text: str, name: str = "runtime.env") -> Path:
    path = root / name
    path.write_text(text)
    return path


def write_bound_profile(directory: Path, name: str, target, draft) -> Path:
    """A copy of the real profile ``name`` whose checkpoints list ``target``/``draft`` files.

    Written with the profile model's own serializer, into ``directory/profiles/<name>/``.
    """
    from sparkflake.profile.model import CheckpointFile, dump_profile

    profile = load_profile(PROFILES / name / "profile.toml", check_locks=False)
    checkpoints = dict(profile.checkpoints)
    for role, rows in (("target", target), ("draft", draft)):
        if role in checkpoints and rows is not None:
            checkpoints[role] = dataclasses.replace(
                checkpoints[role], files=tuple(CheckpointFile(f.path, f.sha256, f.size) for f in rows)
            )
    path = directory / "profiles" / name / "profile.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_profile(dataclasses.replace(profile, checkpoints=checkpoints)))
    return path
