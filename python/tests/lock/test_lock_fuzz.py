"""Fuzz the lock reader: mutated files give a Lock or an InputError, never a traceback."""

from __future__ import annotations

import copy
import tomllib

import pytest
from fixtures.lock_strategies import locks
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core import canonical_toml
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.lock.lock_file import dump_lock, parse_lock
from sparkflake.lock.pins import Lock, WheelPin
from sparkflake.lock.pylock import read_pylock
from sparkflake.lock.resolve import python_pins
from sparkflake.lock.target import InstallTarget

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SHOWN = "fuzz.lock"


def _parse_or_refuse(text: str | bytes) -> None:
    try:
        parsed = parse_lock(text, SHOWN)
    except InputError as error:
        message = str(error)
        assert message.startswith(f"{SHOWN}: "), message
        assert "Traceback" not in message
        return
    assert isinstance(parsed, Lock)
    # whatever was accepted is itself canonical-dumpable and stable
    assert parse_lock(dump_lock(parsed), SHOWN) == parsed


text_mutations = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10_000)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.integers(1, 40)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.text(max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.sampled_from(['"', "[", "]", "=", "\n", "'''", "{", "#"])),
    st.tuples(st.just("swap-lines"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate-line"), st.integers(0, 10_000)),
    st.tuples(st.just("flip-byte"), st.integers(0, 10_000), st.integers(1, 255)),
)


def _mutate_text(text: str, mutation: tuple) -> str | bytes:
    kind = mutation[0]
    if kind == "truncate":
        return text[: mutation[1] % (len(text) + 1)]
    if kind == "delete":
        start = mutation[1] % (len(text) + 1)
        return text[:start] + text[start + mutation[2] :]
    if kind == "insert":
        at = mutation[1] % (len(text) + 1)
        return text[:at] + mutation[2] + text[at:]
    lines = text.split("\n")
    if kind == "swap-lines":
        first, second = mutation[1] % len(lines), mutation[2] % len(lines)
        lines[first], lines[second] = lines[second], lines[first]
        return "\n".join(lines)
    if kind == "duplicate-line":
        at = mutation[1] % len(lines)
        lines.insert(at, lines[at])
        return "\n".join(lines)
    raw = bytearray(text.encode("utf-8"))
    if raw:
        at = mutation[1] % len(raw)
        raw[at] ^= mutation[2]
    return bytes(raw)


@given(locks, st.lists(text_mutations, min_size=1, max_size=4))
def test_text_mutations_never_escape_as_tracebacks(lock: Lock, mutations: list) -> None:
    text: str | bytes = dump_lock(lock)
    for mutation in mutations:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        text = _mutate_text(text, mutation)
    _parse_or_refuse(text)


# Structural mutations: replace any value in the parsed document with a value of another
# type or shape, or add/remove keys, then write it back out and read it.

strange_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=10),
    st.lists(st.integers(0, 3), max_size=2),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
    st.lists(st.dictionaries(st.sampled_from(["kind", "name", "x"]), st.text(max_size=3), max_size=2), min_size=1, max_size=2),
)


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_paths(value, (*prefix, index)))
    return found


@given(locks, st.data())
def test_structural_mutations_give_input_errors(lock: Lock, data: st.DataObject) -> None:
    document = tomllib.loads(dump_lock(lock))
    mutated = copy.deepcopy(document)
    paths = _paths(mutated)
    path = data.draw(st.sampled_from(paths))
    parent = mutated
    for step in path[:-1]:
        parent = parent[step]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    value = data.draw(strange_values)
    if action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(min_size=1, max_size=8))] = value if value is not None else 1
    elif value is not None:
        parent[path[-1]] = value
    try:
        text = canonical_toml.dumps(mutated)
    except TypeError:
        return  # the mutation made a document TOML cannot hold (e.g. mixed array)
    _parse_or_refuse(text)


@given(st.binary(max_size=300))
def test_random_bytes_never_escape(raw: bytes) -> None:
    _parse_or_refuse(raw)


def _pylock_text(lock: Lock) -> str:
    """A pylock.toml of the lock's wheels, one package each."""
    packages = [
        {"name": pin.name, "version": pin.version,
         "wheels": [{"url": pin.urls[0], "size": pin.size, "hashes": {"sha256": pin.sha256}}]}
        for pin in lock.inputs if isinstance(pin, WheelPin)
    ]
    return canonical_toml.dumps({"lock-version": "1.0", "created-by": "fuzz", "packages": packages})


@given(lock=locks, data=st.data())
def test_pylock_reader_survives_mutations(tmp_path_factory, lock: Lock, data: st.DataObject) -> None:
    # a pylock made of the generated lock's wheels and sdists, then cut or corrupted
    text = _pylock_text(lock)
    mutation = data.draw(text_mutations)
    mutated = _mutate_text(text, mutation)
    path = tmp_path_factory.mktemp("pylock") / "pylock.toml"
    path.write_bytes(mutated if isinstance(mutated, bytes) else mutated.encode("utf-8"))
    try:
        read_pylock(path)
    except InputError as error:
        assert str(error).startswith(f"{path}: ")


@given(lock=locks, data=st.data())
def test_resolution_reader_survives_mutations(lock: Lock, data: st.DataObject) -> None:
    # uv's pylock text as `sparkflake lock` reads it: pins whose fields are the document's,
    # or an error that names uv's pylock and the place in it, never a traceback
    text = _pylock_text(lock)
    mutated = _mutate_text(text, data.draw(text_mutations))
    if isinstance(mutated, bytes):
        mutated = mutated.decode("utf-8", "replace")
    try:
        pins = python_pins(mutated, InstallTarget(), ())
    except (InputError, CheckFailed) as error:
        assert str(error).removeprefix("[python-resolve] ").startswith("uv's pylock.toml: "), str(error)
        return
    written = {
        (p["name"], wheel["size"], wheel["hashes"]["sha256"])
        for p in tomllib.loads(mutated)["packages"] for wheel in p["wheels"]
    }
    assert {(pin.name, pin.size, pin.sha256) for pin in pins} <= written
