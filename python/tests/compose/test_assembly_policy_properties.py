"""A lock's assembly policy (``compose.locked_inputs.load_policy``: ``[[record_waiver]]`` and
``[[collision]]`` tables bound to the lock's wheels): any policy written as TOML reads back
as the waivers and collision rules it holds, in order; no file is the empty policy; a rule
naming a wheel the lock does not hold is stale (``CheckFailed`` naming the file and the
rule); a waiver whose sha256 is not the locked wheel's never carries over; an unknown
table, a table with an unknown or a missing key, or a digest of another form is refused
with ``InputError`` naming the file and the table's place. So is a value of another type
(``actual_size = "x"``, ``drop = 5``, ``collision = 1``, ``wheel = [..]``) and a file that is
no UTF-8, which escaped as TypeError/ValueError/UnicodeDecodeError before (finding H2,
/work/notes/hypothesis-findings-3.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.compose.locked_inputs import AssemblyPolicy, load_policy
from sparkflake.compose.python_env import CollisionRule, RecordWaiver
from sparkflake.core import canonical_toml
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.lock.lock_file import load_lock
from sparkflake.lock.pins import WheelPin

pytestmark = pytest.mark.compose

REPO = Path(__file__).resolve().parents[3]
LOCK = load_lock(REPO / "profiles/fixture/fixture.lock")
WHEELS = {pin.filename: pin for pin in LOCK.pins_of(WheelPin)}

_hex = st.text("0123456789abcdef", min_size=64, max_size=64)
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_paths = st.from_regex(r"/opt/venv/lib/python3\.11/site-packages/[a-z_]{1,8}(/[a-z_]{1,8}){0,2}\.py", fullmatch=True)
_wheels = st.sampled_from(sorted(WHEELS))


@st.composite
def _waivers(draw) -> RecordWaiver:
    wheel = draw(_wheels)
    return RecordWaiver(wheel, WHEELS[wheel].sha256, draw(_paths.map(lambda path: path.rsplit("/", 2)[-1])),
                        draw(_hex), draw(st.integers(0, 1 << 40)), draw(_text))


@st.composite
def _collisions(draw) -> CollisionRule:
    named = draw(st.lists(_wheels, min_size=1, max_size=3, unique=True))
    keep = named[0] if draw(st.booleans()) else None
    return CollisionRule(draw(_paths), keep, tuple(named[1:] if keep else named), draw(_text))


def _document(waivers, collisions, *, reasons=True) -> dict:
    def table(fields: dict) -> dict:
        return {key: value for key, value in fields.items() if reasons or key != "reason" or value}

    return {
        "record_waiver": [table({"wheel": w.wheel, "wheel_sha256": w.wheel_sha256, "path": w.path,
                                 "actual_sha256": w.actual_sha256, "actual_size": w.actual_size, "reason": w.reason})
                          for w in waivers],
        "collision": [table({"path": c.path, **({"keep": c.keep} if c.keep else {}), "drop": list(c.drop),
                             "reason": c.reason}) for c in collisions],
    }


def _write(tmp_path_factory, document: dict | str) -> Path:
    path = tmp_path_factory.mktemp("policy") / "fixture.assembly-policy.toml"
    path.write_text(document if isinstance(document, str) else canonical_toml.dumps(document), encoding="utf-8")
    return path


@given(st.lists(_waivers(), max_size=3), st.lists(_collisions(), max_size=3), st.booleans())
def test_a_policy_reads_back_as_written(tmp_path_factory, waivers, collisions, reasons) -> None:
    path = _write(tmp_path_factory, _document(waivers, collisions, reasons=reasons))
    assert load_policy(path, LOCK) == AssemblyPolicy(tuple(waivers), tuple(collisions))
    assert load_policy(path.with_name("absent.toml"), LOCK) == AssemblyPolicy()


@given(st.lists(_collisions(), min_size=1, max_size=3), st.data())
def test_a_rule_naming_a_wheel_outside_the_lock_is_stale(tmp_path_factory, collisions, data) -> None:
    index = data.draw(st.integers(0, len(collisions) - 1))
    gone = data.draw(st.from_regex(r"[a-z]{1,8}-[0-9]\.[0-9]-py3-none-any\.whl", fullmatch=True)
                     .filter(lambda name: name not in WHEELS))
    rule = collisions[index]
    collisions[index] = CollisionRule(rule.path, rule.keep, (*rule.drop, gone), rule.reason)
    path = _write(tmp_path_factory, _document([], collisions))
    with pytest.raises(CheckFailed) as refused:
        load_policy(path, LOCK)
    assert refused.value.check_id == "path-conflict"
    assert str(refused.value).startswith(f"[path-conflict] {path}: collision[{index}]: {gone} not in the lock")


@given(_waivers(), _hex)
def test_a_waiver_never_carries_over_to_other_bytes(tmp_path_factory, waiver, other) -> None:
    moved = RecordWaiver(waiver.wheel, other, waiver.path, waiver.actual_sha256, waiver.actual_size, waiver.reason)
    path = _write(tmp_path_factory, _document([moved], []))
    if other == waiver.wheel_sha256:
        assert load_policy(path, LOCK).waivers == (moved,)
        return
    with pytest.raises(CheckFailed, match=r"a waiver never carries over to other bytes") as refused:
        load_policy(path, LOCK)
    assert str(refused.value).startswith(f"[wheel-record] {path}: record_waiver[0]: {waiver.wheel} is locked")


_KEYS = {"record_waiver": ("wheel", "wheel_sha256", "path", "actual_sha256", "actual_size", "reason"),
         "collision": ("path", "keep", "drop", "reason")}


@given(st.lists(_waivers(), min_size=1, max_size=2), st.lists(_collisions(), min_size=1, max_size=2),
       st.sampled_from(["unknown-table", "unknown-key", "missing-key"]), st.data())
def test_a_policy_of_another_shape_is_refused_naming_file_and_place(tmp_path_factory, waivers, collisions, damage,
                                                                     data) -> None:
    document = _document(waivers, collisions)
    table_name = data.draw(st.sampled_from(sorted(_KEYS)))
    index = data.draw(st.integers(0, len(document[table_name]) - 1))
    table = document[table_name][index]
    if damage == "unknown-table":
        document[data.draw(st.from_regex(r"[a-z_]{1,10}", fullmatch=True).filter(lambda name: name not in _KEYS))] = {}
        place = "unknown tables"
    elif damage == "unknown-key":
        table[data.draw(st.from_regex(r"[a-z_]{1,10}", fullmatch=True).filter(lambda k: k not in _KEYS[table_name]))] = 1
        place = f"{table_name}[{index}]"
    else:
        required = [key for key in _KEYS[table_name] if key not in ("reason", "keep")]
        del table[data.draw(st.sampled_from(required))]
        place = f"{table_name}[{index}]"
    path = _write(tmp_path_factory, document)
    with pytest.raises(InputError) as refused:
        load_policy(path, LOCK)
    assert str(refused.value).startswith(f"{path}: {place}")


@given(_waivers(), st.sampled_from(["wheel_sha256", "actual_sha256"]),
       st.sampled_from(["", "A" * 64, "0" * 63, "0" * 65, "sha256:" + "0" * 64, "g" * 64]) | _text)
def test_a_waiver_digest_of_another_form_is_refused_naming_its_key(tmp_path_factory, waiver, key, value) -> None:
    document = _document([waiver], [])
    document["record_waiver"][0][key] = value
    path = _write(tmp_path_factory, document)
    if len(value) == 64 and set(value) <= set("0123456789abcdef"):
        return  # a well-formed digest (another wheel's: test_a_waiver_never_carries_over_to_other_bytes)
    with pytest.raises(InputError) as refused:
        load_policy(path, LOCK)
    assert str(refused.value) == f"{path}: record_waiver[0].{key}: expected 64 lowercase hex digits"


SHA = "0" * 64
_values = st.recursive(st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                       lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text("ab", max_size=2), inner, max_size=2),
                       max_leaves=4)


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(key)} = {_toml(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(value)


_BASE = {"record_waiver": {"wheel": '"w"', "wheel_sha256": f'"{SHA}"', "path": '"p"', "actual_sha256": f'"{SHA}"',
                           "actual_size": "1"},
         "collision": {"path": '"p"', "drop": "[]"}}


@st.composite
def _policies(draw) -> bytes:
    """A policy with one value of any type: a whole table's, or one key's of a table."""
    table = draw(st.sampled_from(sorted(_BASE)))
    value = _toml(draw(_values))
    key = draw(st.none() | st.sampled_from(sorted(_BASE[table]) + ["keep", "reason"]))
    if key is None:
        return f"{table} = {value}\n".encode()
    fields = {**_BASE[table], key: value}
    return (f"[[{table}]]\n" + "".join(f"{name} = {text}\n" for name, text in fields.items())).encode()


# H2: each of these escaped as TypeError/ValueError/UnicodeDecodeError before
@example(b"collision = 5\n")
@example(b'[[collision]]\npath = "a"\ndrop = 5\n')
@example(b'[[collision]]\npath = "a"\ndrop = "abc"\n')
@example(b'[[record_waiver]]\nwheel = "x"\nwheel_sha256 = "' + SHA.encode() + b'"\npath = "p"\nactual_sha256 = "'
         + SHA.encode() + b'"\nactual_size = "big"\n')
@example(b'[[record_waiver]]\nwheel = "x"\nwheel_sha256 = "' + SHA.encode() + b'"\npath = "p"\nactual_sha256 = "'
         + SHA.encode() + b'"\nactual_size = true\n')
@example(b'[[record_waiver]]\nwheel = [1]\nwheel_sha256 = "' + SHA.encode() + b'"\npath = "p"\nactual_sha256 = "'
         + SHA.encode() + b'"\nactual_size = 1\n')
@example(b"\xff\n")
@given(_policies())
def test_a_policy_value_of_any_type_is_read_or_refused_naming_the_file(tmp_path_factory, text) -> None:
    path = tmp_path_factory.mktemp("policy") / "x.assembly-policy.toml"
    path.write_bytes(text)
    try:
        policy = load_policy(path, LOCK)
    except InputError as refused:
        assert str(refused).startswith(f"{path}: ")
        return
    except CheckFailed as refused:  # a rule naming a wheel the lock does not hold
        assert f"{path}: " in str(refused)
        return
    for waiver in policy.waivers:  # what was read has the types its fields promise
        assert all(isinstance(getattr(waiver, key), str) for key in ("wheel", "wheel_sha256", "path", "actual_sha256", "reason"))
        assert type(waiver.actual_size) is int and waiver.actual_size >= 0
    for rule in policy.collisions:
        assert isinstance(rule.path, str) and isinstance(rule.reason, str) and (rule.keep is None or isinstance(rule.keep, str))
        assert all(isinstance(name, str) for name in rule.drop)
