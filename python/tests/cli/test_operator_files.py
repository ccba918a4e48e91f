"""Files an operator names (issue 28, class 5) are read through the one bounded reader of
regular files: `--auth-file` and `--ca-file` of publish and verify (sign shares verify's
registry client), `fanout --site`, a lock (`--lock`, `lock validate`), the cache root's
marker. A FIFO is refused without
waiting for a writer, /dev/zero without reading it, a huge sparse file after the bound
(memory measured), nesting deeper than Python's parsers follow with a message naming the
file; each is exit 2 and one line, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fixtures.peak_memory import run_measured

from sparkflake.core.check_result import FAIL
from sparkflake.launch.checks import CACHE_ROOT_MARKER, check_cache_root_dedicated

PEAK_BOUND = 256 << 20


def _hostile(tmp_path: Path, kind: str, nesting: str) -> Path:
    path = tmp_path / f"hostile-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "sparse-10g":
        with open(path, "wb") as handle:
            handle.truncate(10 << 30)
    else:  # nested 10,000 levels deep
        path.write_text(nesting)
    return path


_JSON_NESTING = "[" * 10_000 + "]" * 10_000
_TOML_NESTING = "a = " + "[" * 10_000 + "]" * 10_000 + "\n"
_EXPECTED = {"fifo": "is a FIFO", "dev-zero": "is a character device", "sparse-10g": "is larger than",
             "nested": "nested too deeply"}


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "index.json").write_text("{}")
    public_key = tmp_path / "cosign.pub"
    public_key.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return {
        "publish --auth-file": ["publish", str(out), "127.0.0.1:9/x:v1", "--auth-file"],
        "verify --auth-file": ["verify", "127.0.0.1:9/x:v1", "--key", str(public_key), "--auth-file"],
        "publish --ca-file": ["publish", str(out), "registry.invalid/x:v1", "--ca-file"],
        "fanout --site": ["fanout", str(out / "absent.tar"), "--sha256", "0" * 64, "--site"],
        "audit --lock": ["audit", f"oci:{out}", "--lock"],
        "lock validate": ["lock", "validate"],
    }


@pytest.mark.parametrize("command, kind", [
    (command, kind)
    for command in ("publish --auth-file", "verify --auth-file", "publish --ca-file", "fanout --site", "audit --lock",
                    "lock validate")
    for kind in ("fifo", "dev-zero", "sparse-10g", "nested")
    if (command, kind) != ("publish --ca-file", "nested")  # a PEM file has no nesting
])
def test_hostile_operator_files_are_refused_clearly_and_boundedly(tmp_path, command, kind):
    toml = command in ("fanout --site", "audit --lock", "lock validate")
    hostile = _hostile(tmp_path, kind, _TOML_NESTING if toml else _JSON_NESTING)
    status, output, peak = run_measured(*_commands(tmp_path)[command], str(hostile), timeout=60)
    assert status == 2, output
    assert f"{hostile}: {_EXPECTED[kind]}" in output or f"{hostile}: " in output and _EXPECTED[kind] in output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    assert peak <= PEAK_BOUND, f"{command} of {kind} peaked at {peak >> 20} MiB"


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse-10g", "nested"])
def test_a_hostile_cache_root_marker_fails_the_check_naming_it(tmp_path, kind):
    root = tmp_path / "cache-root"
    root.mkdir()
    marker = _hostile(tmp_path, kind, _JSON_NESTING)
    os.rename(marker, root / CACHE_ROOT_MARKER)
    result = check_cache_root_dedicated(root, {"profile": "p"}, {CACHE_ROOT_MARKER})
    assert result.status == FAIL
    assert f"{root / CACHE_ROOT_MARKER}: " in result.detail and _EXPECTED[kind] in result.detail
