"""nix/fetch-locked.nix: a lock record becomes a builtin:fetchurl fixed-output derivation, which
Nix builds offline from a file:// URL when the sha256 is right and refuses when it is wrong; a
record with several URLs is fetched by fetchLocked.tryingEvery, which tries each in order."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[3]
FETCH_LOCKED = REPO / "nix" / "fetch-locked.nix"
NIX_ENV = {
    **os.environ,
    "NIX_CONFIG": "experimental-features = nix-command flakes\nsubstituters =\ndownload-attempts = 1",
}


@pytest.fixture
def served_dir() -> Iterator[Path]:
    """A directory the build user can read: Nix runs builtin:fetchurl as its build user (nixbld),
    which cannot enter pytest's root-only tmp_path."""
    directory = Path(tempfile.mkdtemp(prefix="sparkflake-fetch-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def serve(directory: Path, name: str, content: bytes) -> Path:
    artifact = directory / name
    artifact.write_bytes(content)
    artifact.chmod(0o644)
    return artifact


def fetch(url: str, sha256: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """nix-build of the fetch; url and hash reach Nix as strings (--argstr), never as code."""
    return subprocess.run(
        [
            "nix-build",
            "--no-out-link",
            "--expr",
            f"{{ url, sha256 }}: import {FETCH_LOCKED} {{ urls = [ url ]; inherit sha256; }}",
            "--argstr",
            "url",
            url,
            "--argstr",
            "sha256",
            sha256,
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
        env=NIX_ENV,
    )


def test_lock_record_evaluates_to_a_builtin_fixed_output_derivation() -> None:
    sha256 = "5f1c3f10d5ace66d4ba584415bbfe42b6ac1a0a9116a3b81dcbe50516ad924b3"
    url = "https://files.example/wheels/torch-2.9.1%2Bcpu-cp311-cp311-manylinux_2_28_aarch64.whl"
    expression = (
        f'let d = import {FETCH_LOCKED} {{ urls = [ {json.dumps(url)} ];'
        f' sha256 = "{sha256}"; size = 12; kind = "wheel"; }};'
        " in { inherit (d) name system builder url outputHash outputHashAlgo outputHashMode; }"
    )
    completed = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "--expr", expression],
        capture_output=True,
        text=True,
        check=True,
        env=NIX_ENV,
    )
    assert json.loads(completed.stdout) == {
        "name": "torch-2.9.1+cpu-cp311-cp311-manylinux_2_28_aarch64.whl",
        "system": "builtin",
        "builder": "builtin:fetchurl",
        "url": url,
        "outputHash": sha256,
        "outputHashAlgo": "sha256",
        "outputHashMode": "flat",
    }


def test_file_url_with_the_right_hash_is_fetched_into_the_store(served_dir: Path) -> None:
    artifact = serve(served_dir, "nccl-switchless+gb10.so", os.urandom(4096))
    sha256 = hashlib.sha256(artifact.read_bytes()).hexdigest()
    completed = fetch(artifact.as_uri().replace("+", "%2B"), sha256)
    assert completed.returncode == 0, completed.stderr
    store_path = Path(completed.stdout.strip())
    assert store_path.name.endswith("-nccl-switchless+gb10.so")
    assert store_path.read_bytes() == artifact.read_bytes()


def test_sri_form_of_the_hash_is_accepted(served_dir: Path) -> None:
    artifact = serve(served_dir, "blob.bin", os.urandom(1024))
    sri = "sha256-" + base64.b64encode(hashlib.sha256(artifact.read_bytes()).digest()).decode()
    completed = fetch(artifact.as_uri(), sri)
    assert completed.returncode == 0, completed.stderr
    assert Path(completed.stdout.strip()).read_bytes() == artifact.read_bytes()


def test_a_wrong_hash_is_refused_and_nothing_is_stored(served_dir: Path) -> None:
    artifact = serve(served_dir, "tampered.whl", os.urandom(2048))
    actual = hashlib.sha256(artifact.read_bytes()).hexdigest()
    expected = hashlib.sha256(os.urandom(32)).hexdigest()
    completed = fetch(artifact.as_uri(), expected)
    assert completed.returncode != 0
    assert "hash mismatch" in completed.stderr
    # Nix names both hashes; the expected one is the lock's, the other what the bytes hash to.
    actual_sri = "sha256-" + base64.b64encode(bytes.fromhex(actual)).decode()
    assert actual_sri in completed.stderr
    wanted_path = subprocess.run(
        [
            "nix-instantiate",
            "--expr",
            f"{{ url, sha256 }}: import {FETCH_LOCKED} {{ urls = [ url ]; inherit sha256; }}",
            "--argstr",
            "url",
            artifact.as_uri(),
            "--argstr",
            "sha256",
            expected,
        ],
        capture_output=True,
        text=True,
        check=True,
        env=NIX_ENV,
    )
    derivation = json.loads(
        subprocess.run(
            ["nix", "show-derivation", wanted_path.stdout.strip()],
            capture_output=True,
            text=True,
            check=True,
            env=NIX_ENV,
        ).stdout
    )
    (output_path,) = [d["outputs"]["out"]["path"] for d in derivation.values()]
    assert not Path(output_path).exists()


def test_a_missing_file_is_an_error_naming_the_url(served_dir: Path) -> None:
    missing = served_dir / "absent.tar.gz"
    completed = fetch(missing.as_uri(), hashlib.sha256(b"").hexdigest())
    assert completed.returncode != 0
    assert "absent.tar.gz" in completed.stderr


@settings(max_examples=5)
@given(content=st.binary(min_size=0, max_size=2048), salt=st.binary(min_size=16, max_size=16))
def test_fetch_returns_exactly_the_bytes_whose_hash_was_locked(
    served_dir: Path, content: bytes, salt: bytes
) -> None:
    # The salt makes every example a new store path, so each one is really fetched.
    artifact = serve(served_dir, "artifact", salt + content)
    completed = fetch(artifact.as_uri(), hashlib.sha256(salt + content).hexdigest())
    assert completed.returncode == 0, completed.stderr
    assert Path(completed.stdout.strip()).read_bytes() == salt + content


STAND_IN_PYTHON = (
    f"(import {REPO}/nix/offline-nixpkgs/pkgs.nix {{ lib = import {REPO}/nix/offline-nixpkgs/lib.nix;"
    " system = builtins.currentSystem; }).python3"
)


def fetch_trying_every(urls: list[str], sha256: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nix-build", "--no-out-link", "--expr",
         f"{{ urls, sha256 }}: (import {FETCH_LOCKED}).tryingEvery {STAND_IN_PYTHON}"
         " { urls = builtins.fromJSON urls; inherit sha256; }",
         "--argstr", "urls", json.dumps(urls), "--argstr", "sha256", sha256],
        capture_output=True, text=True, check=False, env=NIX_ENV,
    )


def test_every_url_is_tried_in_order_until_one_has_the_locked_bytes(served_dir: Path) -> None:
    content = os.urandom(4096)
    good = serve(served_dir, "libfoo_1.0_arm64.deb", content)
    wrong = serve(served_dir, "wrong.deb", os.urandom(4096))
    urls = [
        (served_dir / "absent.deb").as_uri(),
        "http://127.0.0.1:9/libfoo_1.0_arm64.deb",  # discard port: nothing answers
        wrong.as_uri(),
        good.as_uri(),
    ]
    completed = fetch_trying_every(urls, hashlib.sha256(content).hexdigest())
    assert completed.returncode == 0, completed.stderr
    store_path = Path(completed.stdout.strip())
    assert store_path.name.endswith("-absent.deb")  # the store name comes from the first URL
    assert store_path.read_bytes() == content
    assert f"fetched from {good.as_uri()}" in completed.stderr


def test_a_locked_input_no_url_answers_for_fails_naming_it_and_every_url(served_dir: Path) -> None:
    wrong = serve(served_dir, "wrong.deb", os.urandom(512))
    urls = [(served_dir / "libbar_2.0_arm64.deb").as_uri(), wrong.as_uri()]
    completed = fetch_trying_every(urls, hashlib.sha256(b"the locked bytes").hexdigest())
    assert completed.returncode != 0
    assert "libbar_2.0_arm64.deb: no URL of the lock answered with its bytes" in completed.stderr
    assert f"{wrong.as_uri()}: sha256 " in completed.stderr
    assert urls[0] in completed.stderr


def test_plain_fetch_of_a_record_with_several_urls_is_refused() -> None:
    completed = subprocess.run(
        ["nix-instantiate", "--eval", "--expr",
         f'(import {FETCH_LOCKED} {{ urls = [ "https://a.invalid/x.deb" "https://b.invalid/x.deb" ];'
         f' sha256 = "{"0" * 64}"; }}).outPath'],
        capture_output=True, text=True, check=False, env=NIX_ENV,
    )
    assert completed.returncode != 0
    assert "locked input x.deb has 2 URLs: fetch it with fetchLocked.tryingEvery" in completed.stderr
