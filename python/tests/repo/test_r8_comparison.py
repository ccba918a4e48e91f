"""The operator guide's comparison with the seeds' R8 launcher cannot drift from the launcher:
every setting its "runtime.env" column names is a key of the settings catalog, a value it
gives is the glm53-dflash7 default today, and every row has a verdict of the stated kinds."""

from __future__ import annotations

import re

from fixtures.doc_blocks import REPO
from fixtures.launch import real_contract

from sparkflake.profile.settings_catalog import CATALOG

GUIDE = REPO / "docs" / "operator-guide.md"
SECTION = "## The seeds' R8 launcher and ours"
HEADER = ["R8 sets (source)", "R8 value", "runtime.env", "emitted", "verdict"]
VERDICTS = ("same", "different", "refused", "to change (issue 26 item ", "to change (issue 27 item ",
            "not emitted", "not supported")
_CODE = re.compile(r"`([^`]+)`")


def _rows() -> list[list[str]]:
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    section = section[: section.index("\n## ", len(SECTION))]
    rows, tables = [], 0
    for line in section.splitlines():
        if not line.startswith("| "):
            continue
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if cells == HEADER:
            tables += 1
        elif set(line) - set("|- "):
            assert len(cells) == len(HEADER), f"{GUIDE.name}: a row of {len(cells)} cells: {line}"
            rows.append(cells)
    assert tables >= 5 and len(rows) >= 90, (tables, len(rows))
    return rows


def test_the_runtime_env_column_names_catalog_keys_at_their_defaults():
    defaults = {key: setting.default for key, setting in CATALOG.items()}
    defaults.update(real_contract("glm53-dflash7").runtime_defaults)
    named = set()
    for row in _rows():
        column = row[2]
        if column == "—":
            continue
        spans = _CODE.findall(column)
        assert spans and _CODE.sub("", column).strip(" ,") == "", f"not only settings: {column!r} ({row[0]})"
        for span in spans:
            key, _, value = span.partition("=")
            assert key in CATALOG, f"{key} ({row[0]}) is not a runtime.env setting of the launcher's catalog"
            if value:
                assert value == defaults[key], f"{span} ({row[0]}): the glm53-dflash7 default is {defaults[key]!r}"
            named.add(key)
    assert {"ATTENTION_BACKEND", "MAX_NUM_SEQS", "NCCL_IB_HCA", "SPARKCACHE_ENABLED"} <= named


def test_every_row_has_a_verdict_and_a_source():
    for row in _rows():
        assert row[4].startswith(VERDICTS), f"{row[0]}: verdict {row[4]!r}"
        assert re.search(r"\((?:L|E|P|S[0-2])(?:, (?:L|E|P|S[0-2]))*\)$", row[0]), f"{row[0]}: no source"
