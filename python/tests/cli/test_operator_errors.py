"""Errors a new operator meets first say what to do, and exit with the documented code."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from fixtures.netns_ranks import NetnsRanks
from fixtures.oci import free_port
from fixtures.registry import build_image, start_registry

REPO = Path(__file__).resolve().parents[3]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *argv], capture_output=True, text=True,
                          timeout=300, check=False)


def test_publish_to_a_plain_http_registry_says_insecure(tmp_path: Path) -> None:
    port = free_port()
    registry = start_registry(tmp_path, "127.0.0.1", port)  # the CNCF registry, plain HTTP
    try:
        build_image(tmp_path / "image", seed=16)
        refused = _cli("publish", str(tmp_path / "image" / "out"), f"127.0.0.1:{port}/sparkflake/x:v1")
        assert refused.returncode == 2, refused.stderr
        assert "WRONG_VERSION_NUMBER" in refused.stderr
        assert "speaks plain HTTP: pass --insecure" in refused.stderr
        assert "Traceback" not in refused.stderr
        accepted = _cli("publish", str(tmp_path / "image" / "out"), f"127.0.0.1:{port}/sparkflake/x:v1", "--insecure",
                        "--record", str(tmp_path / "publish.json"))
        assert accepted.returncode == 0, accepted.stderr
    finally:
        registry.terminate()
        registry.wait(timeout=10)


def test_a_bare_hex_digest_names_the_flag() -> None:
    bare = hashlib.sha256(b"sparkflake").hexdigest()
    refused = _cli("hash", "convert", bare, "--to", "sri")
    assert refused.returncode == 2
    assert "name it with --type sha256" in refused.stderr
    named = _cli("hash", "convert", bare, "--to", "sri", "--type", "sha256")
    assert named.returncode == 0 and named.stdout.startswith("sha256-"), named.stderr


def test_an_unreachable_rank_0_exits_1_as_documented(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    guide = (REPO / "docs" / "distribution.md").read_text()
    assert "1 a check failed or a rank could not be\ncompleted" in guide
    site = netns_ranks.write_site(tmp_path / "site.toml")
    netns_ranks.stop_sshd(0)
    try:
        refused = _cli("fanout", "/var/lib/sparkflake/absent.tar", "--site", str(site), "--sha256", "0" * 64)
    finally:
        netns_ranks.start_sshd(0)
    assert refused.returncode == 1, refused.stderr
    assert "cannot reach rank 0" in refused.stderr and "nothing transferred" in refused.stderr
