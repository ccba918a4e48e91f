"""Limits read from the source that no other test keeps (issue 30's acceptance): no module
of the package over 600 lines, and JSON written with ``sort_keys=True`` only by
``core/canonical_json`` and three places that cannot use it, each named with why; and no
test that skips or is expected to fail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SOURCE = Path(__file__).resolve().parents[2] / "src" / "sparkflake"
MAX_MODULE_LINES = 600
CANONICAL_JSON = "core/canonical_json.py"
SORTED_KEYS_ELSEWHERE = {
    # runs inside the image, where the package is not importable
    "runtime/in_image/probe.py",
    # the collision rules' identity: the composition records its bytes, so another form
    # would change the image's digests
    "compose/assembly.py",
    # the CLI's readable stdout: readable_json_bytes would change its ASCII escaping
    "cli/_output.py",
}


def long_modules(root: Path, limit: int) -> list[str]:
    return [f"{path.relative_to(root)}: {lines} lines" for path in sorted(root.rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > limit]


def sorted_keys_calls(root: Path) -> list[str]:
    """Every call given ``sort_keys=True``, as ``file:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and any(
                keyword.arg == "sort_keys" and isinstance(keyword.value, ast.Constant) and keyword.value.value is True
                for keyword in node.keywords
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_module_of_the_package_is_over_600_lines() -> None:
    assert long_modules(SOURCE, MAX_MODULE_LINES) == []


def test_json_is_sorted_by_canonical_json_and_three_named_places_only() -> None:
    elsewhere = [call for call in sorted_keys_calls(SOURCE) if not call.startswith(f"{CANONICAL_JSON}:")]
    assert {call.rpartition(":")[0] for call in elsewhere} <= SORTED_KEYS_ELSEWHERE, elsewhere
    assert len(elsewhere) <= len(SORTED_KEYS_ELSEWHERE), elsewhere


def test_the_rules_find_what_they_are_about(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "short.py").write_text(
        "import json\njson.dumps({}, sort_keys=True)\njson.dumps({}, sort_keys=False)\njson.dumps({})\n"
    )
    assert long_modules(tmp_path, MAX_MODULE_LINES) == ["long.py: 601 lines"]
    assert sorted_keys_calls(tmp_path) == ["short.py:2"]


TESTS = Path(__file__).resolve().parents[1]
# a skipped test checks nothing ("install the tool"), an expected failure hides one
_SKIPPING = ("skip", "skipif", "xfail", "importorskip")


def skipping_calls(root: Path) -> list[str]:
    """Every ``pytest.skip``/``importorskip``/``xfail`` call and ``mark.skip``/``skipif``/
    ``xfail`` marker below ``root``, as ``file:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
                       if isinstance(node, ast.Attribute) and node.attr in _SKIPPING and (
                           isinstance(node.value, ast.Name) and node.value.id == "pytest"
                           or isinstance(node.value, ast.Attribute) and node.value.attr == "mark"))
        found += [f"{path.relative_to(root)}:{line}" for line in lines]
    return found


def test_no_test_skips_or_is_expected_to_fail() -> None:
    assert skipping_calls(TESTS) == []


def test_the_skip_finder_finds_each_form(tmp_path: Path) -> None:
    # the sample's markers are put together here, so that a text search of python/ for a
    # skip marker finds none in this file
    skip, mark = "skip", "pytest.mark."
    (tmp_path / "t.py").write_text(
        f"import pytest\n@{mark}{skip}if(True, reason='x')\ndef a(): pytest.{skip}('y')\n"
        f"b = pytest.importor{skip}('z')\nc = {mark}xfail\n")
    assert skipping_calls(tmp_path) == ["t.py:2", "t.py:3", "t.py:4", "t.py:5"]
