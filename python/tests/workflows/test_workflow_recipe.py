"""The recipe workflows (workflows/recipe.py): an import writes both files or neither, an
export carries the [recipe] table an import kept. The mapping itself: tests/launch/test_recipe.py."""

from __future__ import annotations

import os
import stat
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.launch import PROFILES, site_env
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.canonical_toml import dumps as dump_recipe
from sparkflake.core.errors import InputError
from sparkflake.workflows.recipe import (
    RecipeExportRequest,
    RecipeImportRequest,
    export_recipe_file,
    import_recipe_files,
)

SEED_RECIPE = Path(__file__).parents[1] / "golden" / "launch" / "recipes" / "kindling-2x.recipe.toml"
PROFILE = str(PROFILES / "glm53-dflash7")


def _imported_env(tmp_path: Path) -> Path:
    """The seed recipe imported into tmp_path/out, its env file completed with the site's
    values and a MoE backend the profile's image has."""
    out = tmp_path / "out"
    import_recipe_files(RecipeImportRequest(recipe=str(SEED_RECIPE), output_dir=out))
    env_file = out / "runtime.env"
    text = env_file.read_text() + site_env(tmp_path, 0)
    env_file.write_text(text.replace("MOE_BACKEND=flashinfer_cutlass", "MOE_BACKEND=b12x"))
    return env_file


def test_an_import_writes_both_files_or_neither(tmp_path: Path) -> None:
    out = tmp_path / "out"
    imported = import_recipe_files(RecipeImportRequest(recipe=str(SEED_RECIPE), output_dir=out))
    assert sorted(path.name for path in out.iterdir()) == ["profile.toml", "runtime.env"]
    assert imported.runtime and "[recipe]" in (out / "profile.toml").read_text()
    edited = (out / "runtime.env").read_text() + "# the operator's line\n"
    (out / "runtime.env").write_text(edited)
    profile_before = (out / "profile.toml").read_bytes()
    with pytest.raises(InputError, match="runtime.env"):
        import_recipe_files(RecipeImportRequest(recipe=str(SEED_RECIPE), output_dir=out))
    assert (out / "runtime.env").read_text() == edited and (out / "profile.toml").read_bytes() == profile_before
    import_recipe_files(RecipeImportRequest(recipe=str(SEED_RECIPE), output_dir=out, force=True))
    assert "# the operator's line" not in (out / "runtime.env").read_text()


def test_an_export_carries_the_recipe_table_an_import_kept(tmp_path: Path) -> None:
    env_file = _imported_env(tmp_path)
    recipe = tmp_path / "exported.recipe.toml"
    exported = export_recipe_file(RecipeExportRequest(rank=0, env_file=str(env_file), output=recipe, profile=PROFILE))
    assert exported.carried_from == env_file.parent / "profile.toml"
    assert recipe.read_text() == dump_recipe(exported.export.document)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "runtime.env").write_bytes(env_file.read_bytes())
    alone = export_recipe_file(RecipeExportRequest(rank=0, env_file=str(bare / "runtime.env"),
                                                   output=tmp_path / "alone.recipe.toml", profile=PROFILE))
    assert alone.carried_from is None
    # what the import kept under [recipe] is what the carried export has beyond the bare one
    carried, bare_export = tomllib.loads(recipe.read_text()), tomllib.loads((tmp_path / "alone.recipe.toml").read_text())
    assert carried != bare_export


def test_an_export_refuses_a_bad_image_or_a_fragment_without_a_recipe_before_writing(tmp_path: Path) -> None:
    env_file = _imported_env(tmp_path)
    recipe = tmp_path / "exported.recipe.toml"
    with pytest.raises(InputError, match=r"--image 'sha256:x': expected sha256:<64 lowercase hex>"):
        export_recipe_file(RecipeExportRequest(rank=0, env_file=str(env_file), output=recipe, profile=PROFILE,
                                               image="sha256:x"))
    fragment = tmp_path / "fragment.toml"
    fragment.write_text("[runtime]\n")
    with pytest.raises(InputError, match=r"has no \[recipe\] table"):
        export_recipe_file(RecipeExportRequest(rank=0, env_file=str(env_file), output=recipe, profile=PROFILE,
                                               imported=fragment))
    assert not recipe.exists()


@pytest.mark.parametrize(("recipe_text", "named"), [
    ("when = 1979-05-27\n", "recipe.when: unsupported TOML value of type date"),
    ("mods = [1, {a = 1}]\n", "recipe.mods: arrays mixing tables and values"),
    ('args = ["--speculative-config", "{\\"method\\":\\"dflash\\",\\"x\\":null}"]\n', "None has no TOML form"),
    ('args = ["--speculative-config", "{\\"\\\\ud800\\":1}"]\n', "lone surrogate U+D800"),
])
def test_a_recipe_value_the_profile_cannot_hold_is_refused_with_nothing_written(tmp_path: Path, capsys,
                                                                                 recipe_text: str, named: str) -> None:
    """What an import keeps verbatim under [recipe] went to the TOML writer unchecked: a
    date, an array mixing tables and values, a null or a lone surrogate in the speculative
    config raised TypeError/ValueError out of `recipe import` (a traceback)."""
    from sparkflake.cli import main

    recipe = tmp_path / "odd.recipe.toml"
    recipe.write_text(recipe_text)
    out = tmp_path / "out"
    assert main(["recipe", "import", str(recipe), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{recipe}: a value carried over verbatim" in err and named in err, err
    assert not out.exists() or not any(out.iterdir())


def test_an_export_refuses_a_kept_table_the_toml_cannot_hold(tmp_path: Path) -> None:
    env_file = _imported_env(tmp_path)
    fragment = tmp_path / "fragment.toml"
    fragment.write_text("[recipe]\nwhen = 1979-05-27\n")  # an operator's edit: TOML reads a date
    recipe = tmp_path / "exported.recipe.toml"
    with pytest.raises(InputError, match=r"fragment\.toml: a value carried over verbatim .* when: unsupported TOML"):
        export_recipe_file(RecipeExportRequest(rank=0, env_file=str(env_file), output=recipe, profile=PROFILE,
                                               imported=fragment))
    assert not recipe.exists()


# ------------------------------------------- credentials a recipe carries: kept, not shown, not opened

API_KEY, HF_TOKEN = "sk-APIKEY-SEKRET-111", "hf_ENVTOKEN_SEKRET_222"


def _secret_recipe(directory: Path, mode: int) -> Path:
    """The seed recipe with an --api-key among its serve arguments and an HF_TOKEN in its
    env, readable as ``mode`` says."""
    text = SEED_RECIPE.read_text()
    assert text.count('    "--trust-remote-code",\n') == 1 and text.count("[env]\n") == 1
    text = text.replace('    "--trust-remote-code",\n', f'    "--trust-remote-code",\n    "--api-key", "{API_KEY}",\n')
    text = text.replace("[env]\n", f'[env]\nHF_TOKEN = "{HF_TOKEN}"\n')
    recipe = directory / "secret.recipe.toml"
    recipe.write_text(text)
    recipe.chmod(mode)
    return recipe


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def test_recipe_commands_keep_credentials_in_files_as_closed_as_the_recipe(tmp_path: Path, capsys, umask: int) -> None:
    """The secrets hunt's report: `recipe import` of a 0600 recipe holding --api-key and
    HF_TOKEN printed the key ("unmapped arguments (kept under [recipe]): --trust-remote-code,
    --api-key, sk-…", and in --json) and wrote both into 0644 files, whatever the umask. The
    files keep the values (the recipe is carried) with the recipe's permissions; nothing
    printed holds them; the export carries them back, as closed."""
    from sparkflake.cli import main

    recipe = _secret_recipe(tmp_path, 0o600)
    out = tmp_path / "imported"
    assert main(["recipe", "import", str(recipe), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "unmapped arguments (kept under [recipe]): " in printed and "--api-key, ***" in printed, printed
    assert main(["recipe", "import", str(recipe), "-o", str(out), "--json"]) == 0  # unchanged: replaced
    printed += capsys.readouterr().out
    assert "SEKRET" not in printed, printed
    for name in ("profile.toml", "runtime.env"):
        assert _mode(out / name) == 0o600, name
    kept = tomllib.loads((out / "profile.toml").read_text())["recipe"]
    assert kept["unmapped_args"][kept["unmapped_args"].index("--api-key") + 1] == API_KEY
    assert kept["env"]["HF_TOKEN"] == HF_TOKEN

    env_file = out / "runtime.env"
    env_file.write_text((env_file.read_text() + site_env(tmp_path, 0))
                        .replace("MOE_BACKEND=flashinfer_cutlass", "MOE_BACKEND=b12x"))
    exported_path = tmp_path / "back.recipe.toml"
    assert main(["recipe", "export", "0", str(env_file), "--profile", PROFILE, "-o", str(exported_path)]) == 0
    printed = capsys.readouterr().out
    assert f"carried [recipe] of {out / 'profile.toml'}" in printed and "SEKRET" not in printed, printed
    assert _mode(exported_path) == 0o600
    exported = tomllib.loads(exported_path.read_text())
    assert exported["args"][exported["args"].index("--api-key") + 1] == API_KEY
    assert exported["env"]["HF_TOKEN"] == HF_TOKEN


@given(mode=st.integers(0, 0o777).map(lambda mode: mode | 0o400))
def test_imported_files_are_no_more_open_than_the_recipe(tmp_path: Path, mode: int) -> None:
    """Group and other may read what an import wrote only where they may read the recipe,
    and write it never; the owner (who fills in the site values) reads and writes it."""
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    recipe = _secret_recipe(directory, mode)
    import_recipe_files(RecipeImportRequest(recipe=str(recipe), output_dir=directory / "out"))
    for name in ("profile.toml", "runtime.env"):
        assert _mode(directory / "out" / name) == 0o600 | (mode & 0o044), (oct(mode), name)


@pytest.mark.parametrize(("env_mode", "fragment_mode", "expected"), [
    (0o600, 0o644, 0o600),  # the env file closed: so is the recipe of its launch
    (0o644, 0o600, 0o600),  # the carried [recipe] closed (an imported 0600 recipe)
    (0o644, 0o640, 0o640),
    (0o604, 0o640, 0o600),  # readable by no one both let read
    (0o666, 0o666, 0o644),  # never writable by group or other
    (0o640, None, 0o640),   # nothing carried: the env file alone
])
def test_an_export_is_no_more_open_than_what_it_carries(tmp_path: Path, env_mode: int, fragment_mode: int | None,
                                                        expected: int) -> None:
    env_file = _imported_env(tmp_path)
    if fragment_mode is None:
        (env_file.parent / "profile.toml").unlink()
    else:
        (env_file.parent / "profile.toml").chmod(fragment_mode)
    env_file.chmod(env_mode)
    recipe = tmp_path / "exported.recipe.toml"
    exported = export_recipe_file(RecipeExportRequest(rank=0, env_file=str(env_file), output=recipe, profile=PROFILE))
    assert (exported.carried_from is None) == (fragment_mode is None)
    assert _mode(recipe) == expected, oct(_mode(recipe))
