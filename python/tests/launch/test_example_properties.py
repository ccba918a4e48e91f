"""``launch.example.render_example`` (a profile's runtime.env.example) for any profile
defaults the catalog takes (each setting's value drawn by its kind: numbers in range,
choices, paths with quotes, ``$``, ``#``, blanks and non-ASCII text, tokens, ulimits):
the example is an env file ``parse_env_text`` reads; its live lines are exactly the site
examples (the draft's path only for an external draft); every other catalog key is one
commented ``#KEY=value`` line; and removing the ``#`` of every such line changes nothing:
each value parses to the profile's own default (the module's promise). A path holding a
control character other than a tab (``\\x01``, ``\\r``, ...) is refused by ``parse_value``
naming the key, as the env file refuses it: the catalog took it before and rendered an
example no parser reads (finding H5, /work/notes/hypothesis-findings-3.md)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from fixtures.launch import real_contract
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.example import SITE_EXAMPLES, render_example
from sparkflake.profile.settings_catalog import (
    _FLOAT,
    _IFNAME,
    _MODEL_NAME,
    _TOKEN,
    CATALOG,
    CATALOG_LIST,
    parse_value,
)

pytestmark = pytest.mark.launch

CONTRACTS = {name: real_contract(name) for name in ("glm53-dflash7", "glm53-mtp5")}
_PATH_TEXT = st.text(st.sampled_from(list(" '\"$#\\`~\t;&|<>()*?=%")) | st.characters(blacklist_categories=("Cs", "Cc"),
                    blacklist_characters="\0\n:,"), max_size=12)


def _raw_values(setting, path_text=_PATH_TEXT):
    """Env-file spellings of values ``setting`` may take (some refused later by parse_value)."""
    kind = setting.kind
    drawn = [st.just(setting.default)] if setting.default is not None else []
    if setting.choices:
        drawn.append(st.sampled_from(setting.choices))
    elif kind in ("int", "bytes"):
        drawn.append(st.integers(int(setting.minimum or 0), int(setting.maximum or 10**15)).map(str))
    elif kind == "float":
        drawn.append(st.from_regex(_FLOAT, fullmatch=True))
    elif kind == "bool":
        drawn.append(st.sampled_from(["0", "1"]))
    elif kind == "path":
        drawn = []  # always a drawn path
        drawn.append(st.lists(path_text, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts)))
    elif kind in ("token", "name", "ifname"):
        drawn.append(st.from_regex({"token": _TOKEN, "name": _MODEL_NAME, "ifname": _IFNAME}[kind], fullmatch=True))
    elif kind == "sha256":
        drawn.append(st.text("0123456789abcdef", min_size=64, max_size=64))
    elif kind == "ulimits":
        drawn.append(st.sampled_from(["nofile=1024:4096", "memlock=-1,stack=67108864", "core=0", "nproc=10:-1"]))
    if setting.auto:
        drawn.append(st.just("auto"))
    if setting.allow_empty:
        drawn.append(st.just(""))
    return st.one_of(drawn)


def _parses(setting, raw: str) -> bool:
    try:
        parse_value(setting, raw)
    except ValueError:
        return False
    return True


@st.composite
def _contracts(draw, path_text=_PATH_TEXT):
    contract = CONTRACTS[draw(st.sampled_from(sorted(CONTRACTS)))]
    defaults = dict(contract.runtime_defaults)
    for setting in CATALOG_LIST:
        if setting.key in SITE_EXAMPLES or (setting.kind != "path" and not draw(st.booleans())):
            continue
        raw = draw(_raw_values(setting, path_text))
        if raw in ("", "auto") or _parses(setting, raw):
            defaults[setting.key] = raw
    return dataclasses.replace(contract, runtime_defaults=defaults)


def _typed(key: str, raw: str):
    return raw if raw in ("", "auto") else parse_value(CATALOG[key], raw)


@settings(max_examples=40)
@given(_contracts())
def test_the_example_reads_and_uncommenting_it_changes_nothing(contract) -> None:
    text = render_example(contract)
    live = {assignment.key: assignment.value for assignment in parse_env_text(text, "runtime.env.example")}
    external_draft = contract.runtime_defaults.get("SPECULATIVE_METHOD", "dflash") == "dflash"
    assert live == {key: value for key, value in SITE_EXAMPLES.items() if external_draft or key != "DRAFT_MODEL_PATH"}
    commented = re.findall(r"^#([A-Z][A-Z0-9_]*)=", text, re.M)
    assert sorted(commented) == sorted(set(CATALOG) - set(SITE_EXAMPLES))
    uncommented = re.sub(r"^#([A-Z][A-Z0-9_]*=)", r"\1", text, flags=re.M)
    everything = {assignment.key: assignment.value for assignment in parse_env_text(uncommented, "uncommented")}
    for key in commented:
        setting = CATALOG[key]
        raw = contract.runtime_defaults.get(key, setting.default or "")
        assert _typed(key, everything[key]) == _typed(key, raw), key


@example("/opt/lib\x01nccl.so")  # H5: taken before, and the example it rendered did not read
@example("/opt/lib\rnccl.so")
@example("/opt/lib\x7f\tnccl.so")
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\n:,"), max_size=8)
       .map(lambda text: "/" + text).filter(lambda path: ".." not in path.split("/")))
def test_a_path_default_the_catalog_takes_renders_an_example_that_reads(path) -> None:
    try:
        parse_value(CATALOG["NCCL_LIBRARY"], path)
    except ValueError as refused:  # only a control character (other than a tab) is left to refuse here
        control = [c for c in path if c != "\t" and (ord(c) < 0x20 or ord(c) == 0x7F)]
        assert control and str(refused).startswith("NCCL_LIBRARY=") and f"U+{ord(control[0]):04X}" in str(refused)
        return
    contract = CONTRACTS["glm53-dflash7"]
    contract = dataclasses.replace(contract, runtime_defaults={**contract.runtime_defaults, "NCCL_LIBRARY": path})
    parse_env_text(render_example(contract), "runtime.env.example")
