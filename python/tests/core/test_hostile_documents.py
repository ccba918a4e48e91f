"""Hostile documents give a clear error (exit 2, the file and place named), never a
traceback or a hang: null lists in a spec, nesting 100,000 deep (JSON and TOML), a
5,000-digit integer in a lock, profile, recipe or env file, a recipe that is not UTF-8,
a rank written with a superscript digit, a FIFO where a file is expected."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.launch import PROFILES, site_env
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.documents import (
    MAX_DOCUMENT_BYTES,
    objects_of_array,
    parse_json,
    parse_json_object,
    read_regular_file,
)
from sparkflake.core.errors import CheckFailed, InputError, SparkflakeError

REPO = Path(__file__).resolve().parents[3]
HUGE = "9" * 5000
DEEP = 100_000


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARKFLAKE_PROFILES_DIR": str(PROFILES)}
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False, env=env, cwd=cwd)


def assert_clear_error(completed: subprocess.CompletedProcess, *needles: str) -> None:
    assert completed.returncode == 2, (completed.returncode, completed.stderr)
    assert "Traceback" not in completed.stderr, completed.stderr
    assert completed.stderr.startswith("sparkflake: error: "), completed.stderr
    for needle in needles:
        assert needle in completed.stderr, (needle, completed.stderr)


def _fixture_lock_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (PROFILES / "fixture" / "fixture.lock").read_text()
    assert old in text
    path = tmp_path / "big.lock"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("key", ["files", "sources"])
def test_null_lists_in_a_spec_are_named(tmp_path, key):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"layers": [{key: None}]}))
    assert_clear_error(cli("image", "build", str(spec), "-o", str(tmp_path / "out")),
                       f"spec.json: layers[0].{key}: expected a list, got null")
    assert not (tmp_path / "out").exists()


def test_deep_nesting_json_spec(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"layers": ' + "[" * DEEP + "]" * DEEP + "}")
    assert_clear_error(cli("image", "build", str(spec), "-o", str(tmp_path / "out")), "spec.json: nested too deeply")


@pytest.mark.parametrize("kind", ["lock", "recipe", "profile"])
def test_deep_nesting_toml(tmp_path, kind):
    deep = "x = " + "[" * DEEP + "]" * DEEP + "\n"
    if kind == "lock":
        path = tmp_path / "deep.lock"
        path.write_text("schema = 1\n" + deep)
        completed = cli("lock", "validate", str(path))
    elif kind == "recipe":
        path = tmp_path / "deep.toml"
        path.write_text(deep)
        completed = cli("recipe", "import", str(path), "-o", str(tmp_path / "out"))
    else:
        path = tmp_path / "deep" / "profile.toml"
        path.parent.mkdir()
        path.write_text(deep)
        completed = cli("profile", "show", str(path))
    assert_clear_error(completed, f"{path}: nested too deeply")


def test_huge_integer_in_a_lock_names_the_line(tmp_path):
    first_size = re.search(r"^size = [0-9]+$", (PROFILES / "fixture" / "fixture.lock").read_text(), re.M)
    path = _fixture_lock_with(tmp_path, first_size.group(0), f"size = {HUGE}")
    line = path.read_text().splitlines().index(f"size = {HUGE}") + 1
    assert_clear_error(cli("lock", "validate", str(path)), f"{path}:{line}: an integer of more than 4300 digits")


def test_huge_integer_in_a_profile(tmp_path):
    path = tmp_path / "p" / "profile.toml"
    path.parent.mkdir()
    path.write_text((PROFILES / "fixture" / "profile.toml").read_text().replace("schema = 1", f"schema = {HUGE}", 1))
    line = path.read_text().splitlines().index(f"schema = {HUGE}") + 1
    assert_clear_error(cli("profile", "show", str(path)), f"{path}:{line}: an integer of more than 4300 digits")


def test_huge_integer_in_a_recipe(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(f'engine = "vllm"\nport = {HUGE}\n')
    assert_clear_error(cli("recipe", "import", str(path), "-o", str(tmp_path / "out")),
                       f"{path}:2: an integer of more than 4300 digits")
    assert not (tmp_path / "out").exists()


def test_huge_integer_in_an_env_file(tmp_path):
    env = tmp_path / "runtime.env"
    env.write_text(site_env(tmp_path, 0, MAX_MODEL_LEN=HUGE))
    line = env.read_text().splitlines().index(f"MAX_MODEL_LEN={HUGE}") + 1
    assert_clear_error(cli("launch-rank", "0", str(env), "--dry-run"),
                       f"{env}:{line}: MAX_MODEL_LEN=", "at most 19 digits")


def test_recipe_not_utf8(tmp_path):
    path = tmp_path / "r.toml"
    path.write_bytes(b'engine = "vllm\xff"\n')
    assert_clear_error(cli("recipe", "import", str(path), "-o", str(tmp_path / "out")), f"{path}: not UTF-8 text")


@pytest.mark.parametrize("command", ["launch-rank", "recipe-export"])
@pytest.mark.parametrize("rank", ["²", "٣", "+1", "01"])
def test_rank_must_be_ascii_decimal(tmp_path, command, rank):
    env = tmp_path / "runtime.env"
    env.write_text(site_env(tmp_path, 0))
    argv = ["launch-rank", rank, str(env), "--dry-run"] if command == "launch-rank" else [
        "recipe", "export", rank, str(env), "-o", str(tmp_path / "r.toml")]
    assert_clear_error(cli(*argv), f"RANK {rank!r}: expected a non-negative decimal integer")


@pytest.mark.parametrize("command", ["launch-rank", "recipe-export", "recipe-import", "spec", "lock"])
def test_fifo_is_refused_not_waited_on(tmp_path, command):
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    argv = {
        "launch-rank": ["launch-rank", "0", str(fifo), "--dry-run"],
        "recipe-export": ["recipe", "export", "0", str(fifo), "-o", str(tmp_path / "r.toml")],
        "recipe-import": ["recipe", "import", str(fifo), "-o", str(tmp_path / "out")],
        "spec": ["image", "build", str(fifo), "-o", str(tmp_path / "out")],
        "lock": ["lock", "validate", str(fifo)],
    }[command]
    completed = cli(*argv)  # a hang would hit the 60 s timeout and fail the test
    assert completed.returncode == 2 and "Traceback" not in completed.stderr, completed.stderr
    assert str(fifo) in completed.stderr and ("FIFO" in completed.stderr or "not a regular file" in completed.stderr)


def test_device_and_oversized_documents(tmp_path):
    with pytest.raises(InputError, match="/dev/zero: is a character device"):
        read_regular_file("/dev/zero", "a spec")
    link = tmp_path / "spec.json"
    link.symlink_to("/dev/urandom")
    with pytest.raises(InputError, match="is a character device"):
        read_regular_file(link, "a spec")
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(MAX_DOCUMENT_BYTES + 1)
    with pytest.raises(InputError, match=f"larger than {MAX_DOCUMENT_BYTES} bytes"):
        read_regular_file(big, "a spec")


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=20),
       st.integers(0, 3000))
def test_parse_json_gives_the_value_or_an_input_error(value, depth):
    text = "[" * depth + json.dumps(value) + "]" * depth
    try:
        parsed = parse_json(text, "doc.json")
    except InputError as exc:
        assert exc.message.startswith("doc.json")
        assert depth > 500  # only the depth limit refuses a valid document
        return
    for _ in range(depth):
        parsed = parsed[0]
    assert parsed == value


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)


@given(_JSON_VALUES, st.sampled_from([None, "registry.manifest"]))
def test_parse_json_object_gives_an_object_or_names_the_document(value, check_id):
    """One reader for every 'JSON document that must be an object': an object comes back as
    parsed; anything else is refused naming the document, as bad input (exit 2) or, for a
    document a check fetched, as that check's failure (exit 1)."""
    refusal = InputError if check_id is None else CheckFailed
    text = json.dumps(value)
    for raw in (text, text.encode(), text[:-1] + "\x00"):
        try:
            parsed = parse_json_object(raw, "doc.json", "a manifest", refusal=refusal, check_id=check_id)
        except SparkflakeError as exc:
            assert type(exc) is refusal and exc.check_id == check_id
            assert exc.message.startswith("doc.json: ")
            assert raw != text or not isinstance(value, dict)
            if raw == text:
                assert exc.message == "doc.json: expected a manifest"
            continue
        assert isinstance(value, dict) and raw != text[:-1] + "\x00" and parsed == value


@given(_JSON_VALUES)
def test_objects_of_array_gives_each_object_with_its_path_or_names_the_first_bad_place(value):
    """An array of objects comes back item by item with each one's path; anything else is
    refused at the array's path or at the first item that is not an object."""
    try:
        items = list(objects_of_array(value, "pins.json", "$.files", "an object with path"))
    except InputError as exc:
        if not isinstance(value, list):
            assert exc.message == "pins.json: $.files: expected an array of objects"
        else:
            first_bad = next(index for index, item in enumerate(value) if not isinstance(item, dict))
            assert exc.message == f"pins.json: $.files[{first_bad}]: expected an object with path"
        return
    assert isinstance(value, list) and all(isinstance(item, dict) for item in value)
    assert items == [(f"$.files[{index}]", item) for index, item in enumerate(value)]
