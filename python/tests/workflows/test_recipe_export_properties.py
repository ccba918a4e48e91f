"""``workflows.recipe.export_recipe_file`` (a rank's launch written as a recipe, carrying the
``[recipe]`` table an import kept): for any kept table an operator may have added to (env
variables, fields of any TOML value the writer has a form for) and any modes of the env
file and the fragment, the file written is the canonical TOML of the exported document and
reads back (``read_recipe``) as it; an env variable the launch does not set and a field it
does not own are carried with their values; the file is no more readable than either
source (``0o644`` masked by each source's mode, owner read/write kept). A kept value the
writer has no form for (a date, a time, an array mixing tables and values) is refused with
``InputError`` naming the fragment, and nothing is written. So is a kept ``env`` that is no
table, ``extra_mounts`` no array of tables, ``unmapped_args`` or ``launcher_args`` no array
of strings, naming the fragment and the field: they raised AttributeError/TypeError before
(finding H6, /work/notes/hypothesis-findings-3.md)."""

from __future__ import annotations

import datetime
import stat
import tomllib
from pathlib import Path

import pytest
from fixtures.launch import PROFILES, site_env
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkflake.core import canonical_toml
from sparkflake.core.errors import InputError
from sparkflake.launch.recipe import read_recipe
from sparkflake.workflows.recipe import (
    RecipeExportRequest,
    RecipeImportRequest,
    export_recipe_file,
    import_recipe_files,
)

pytestmark = pytest.mark.workflows

SEED_RECIPE = Path(__file__).parents[1] / "golden" / "launch" / "recipes" / "kindling-2x.recipe.toml"
PROFILE = str(PROFILES / "glm53-dflash7")


def _imported(root: Path) -> tuple[Path, dict]:
    """The seed recipe imported under ``root``, its env file completed for rank 0; and the
    kept [recipe] table."""
    out = root / "out"
    import_recipe_files(RecipeImportRequest(recipe=str(SEED_RECIPE), output_dir=out))
    env_file = out / "runtime.env"
    text = env_file.read_text() + site_env(root, 0)
    env_file.write_text(text.replace("MOE_BACKEND=flashinfer_cutlass", "MOE_BACKEND=b12x"))
    return env_file, tomllib.loads((out / "profile.toml").read_text())


_keys = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_scalars = (st.text(st.characters(blacklist_categories=("Cs",)), max_size=10) | st.integers(-(2**63), 2**63 - 1)
            | st.booleans() | st.floats(allow_nan=False, allow_infinity=False))
_values = st.recursive(_scalars, lambda inner: st.lists(_scalars, max_size=3) | st.dictionaries(_keys, inner, max_size=2),
                       max_leaves=5)
_env_names = st.from_regex(r"SFX_[A-Z0-9_]{1,8}", fullmatch=True)
_modes = st.sampled_from([0o600, 0o640, 0o644, 0o660, 0o604, 0o400])


@settings(max_examples=30)
@given(st.dictionaries(_env_names, st.text(st.characters(blacklist_categories=("Cs",)), max_size=10), max_size=3),
       st.dictionaries(_keys.map(lambda key: f"x_{key}"), _values, max_size=3), _modes, _modes)
def test_an_export_is_its_documents_toml_carrying_the_kept_table(tmp_path_factory, env, fields, env_mode,
                                                                  fragment_mode) -> None:
    root = tmp_path_factory.mktemp("recipe")
    env_file, fragment = _imported(root)
    fragment["recipe"]["env"] = {**fragment["recipe"].get("env", {}), **env}
    fragment["recipe"].update(fields)
    kept = root / "out" / "profile.toml"
    kept.write_text(canonical_toml.dumps(fragment))
    env_file.chmod(env_mode)
    kept.chmod(fragment_mode)
    output = root / "exported.recipe.toml"
    exported = export_recipe_file(RecipeExportRequest(rank=0, env_file=str(env_file), output=output, profile=PROFILE))
    document = exported.export.document
    assert exported.carried_from == kept
    assert output.read_bytes() == canonical_toml.dumps(document).encode()
    assert read_recipe(str(output)) == document
    for name, value in env.items():
        assert document["env"][name] == value
    for key, value in fields.items():
        assert document[key] == value
    assert stat.S_IMODE(output.stat().st_mode) == 0o644 & (env_mode | 0o600) & (fragment_mode | 0o600)


_unwritable = st.one_of(
    st.dates(), st.times(), st.datetimes(),
    st.lists(st.integers(), min_size=1, max_size=2).map(lambda items: [*items, {"a": 1}]),
)


def _toml_literal(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml_literal(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


@settings(max_examples=20)
@given(_keys.map(lambda key: f"x_{key}"), _unwritable)
def test_a_kept_value_without_a_toml_form_is_refused_naming_the_fragment(tmp_path_factory, key, value) -> None:
    root = tmp_path_factory.mktemp("recipe")
    env_file, _ = _imported(root)
    kept = root / "out" / "profile.toml"
    kept.write_text(kept.read_text() + f"{key} = {_toml_literal(value)}\n")
    output = root / "exported.recipe.toml"
    with pytest.raises(InputError) as refused:
        export_recipe_file(RecipeExportRequest(rank=0, env_file=str(env_file), output=output, profile=PROFILE))
    assert str(refused.value).startswith(f"{kept}: a value carried over verbatim has no form in the TOML written")
    assert not output.exists()


_MERGED_SHAPES = {"env": ("a table", lambda value: isinstance(value, dict)),
                  "extra_mounts": ("an array of tables",
                                   lambda value: isinstance(value, list) and all(isinstance(item, dict) for item in value)),
                  "unmapped_args": ("an array of strings",
                                    lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value)),
                  "launcher_args": ("an array of strings",
                                    lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value))}


@settings(max_examples=20)
@example("env", '"x"')  # H6: AttributeError before
@example("extra_mounts", "5")  # H6: TypeError before
@example("unmapped_args", "5")
@example("launcher_args", '["--x", 1]')
@example("env", "{a = 1}")
@given(st.sampled_from(sorted(_MERGED_SHAPES)),
       st.sampled_from(['"x"', "5", "true", "1.5", "[]", "[1, 2]", "{a = 1}", '["--x", 1]', '["--enforce-eager"]',
                        '[{host = "/srv/x", container = "/x"}]']))
def test_a_kept_field_the_export_merges_is_of_its_shape_or_refused_naming_the_fragment(tmp_path_factory, field,
                                                                                       value) -> None:
    root = tmp_path_factory.mktemp("recipe")
    env_file, fragment = _imported(root)
    kept = root / "out" / "profile.toml"
    fragment["recipe"][field] = tomllib.loads(f"v = {value}")["v"]
    kept.write_text(canonical_toml.dumps(fragment))
    expected, fits = _MERGED_SHAPES[field]
    output = root / "exported.recipe.toml"
    request = RecipeExportRequest(rank=0, env_file=str(env_file), output=output, profile=PROFILE)
    if fits(fragment["recipe"][field]):
        exported = export_recipe_file(request)
        assert read_recipe(str(output)) == exported.export.document
        return
    with pytest.raises(InputError) as refused:
        export_recipe_file(request)
    assert str(refused.value).startswith(f"{kept}: recipe.{field}: expected {expected}")
    assert not output.exists()
