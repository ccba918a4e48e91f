"""`sparkflake recipe import|export`: a TOML launch recipe to a profile fragment and an env
file, and one rank's launch back to a recipe.

- import: ``launch.recipe.import_recipe`` maps the recipe onto the settings catalog;
  ``OUT/profile.toml`` and ``OUT/runtime.env`` are both checked replaceable (what an import
  wrote, unedited, unless ``force``) before either is written;
- export: ``launch.plan.plan_launch`` computes the rank's spec alone (no check, no file of a
  checkpoint read); ``launch.recipe.export_recipe`` writes it as a recipe, carrying the
  ``[recipe]`` table an import kept.

Both write values from the operator's files verbatim (a recipe's ``--api-key``, its env's
``HF_TOKEN``), so what they write is no more readable than those files
(``_carried_mode``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import canonical_toml
from ..core.atomic_write import write_bytes_atomic
from ..core.container_engine import Engine
from ..core.errors import InputError
from ..core.generated_files import check_replaceable_file, marked_text
from ..core.records import read_toml
from ..launch.contract import load_contract
from ..launch.plan import plan_launch
from ..launch.recipe import (
    LAUNCHER_ARGS,
    UNMAPPED_ARGS,
    RecipeExport,
    RecipeImport,
    export_recipe,
    import_recipe,
    read_recipe,
)
from .named_digests import check_named_digest


@dataclass(frozen=True)
class RecipeImportRequest:
    recipe: str  # the recipe file (TOML)
    output_dir: Path  # where profile.toml and runtime.env are written
    force: bool = False  # replace them even when sparkflake did not write them, or they were edited


@dataclass(frozen=True)
class RecipeExportRequest:
    rank: int
    env_file: str  # the rank's runtime.env
    output: Path  # the recipe file written
    profile: str = "glm53-dflash7"  # name or path
    image: str | None = None  # sha256:ID
    imported: Path | None = None  # the profile.toml an import wrote (default: profile.toml beside env_file)


@dataclass(frozen=True)
class ExportedRecipe:
    export: RecipeExport
    carried_from: Path | None  # the profile.toml whose [recipe] table was carried into the export


def import_recipe_files(request: RecipeImportRequest) -> RecipeImport:
    """The recipe mapped, OUT/profile.toml and OUT/runtime.env written."""
    imported = import_recipe(read_recipe(request.recipe), request.recipe)
    out = request.output_dir
    written = {out / "profile.toml": _toml_text(imported.profile_document(), request.recipe),
               out / "runtime.env": imported.env_text(request.recipe)}
    for path in written:  # both checked before either is written
        check_replaceable_file(path, force=request.force)
    mode = _carried_mode(request.recipe)
    for path, text in written.items():
        write_bytes_atomic(path, marked_text(text).encode(), mode)
    return imported


def _carried_mode(*sources: str | os.PathLike[str]) -> int:
    """The mode of a file carrying values from ``sources`` verbatim: group and other may
    read it only where every source lets them, and never write it; its owner (who ran the
    command, and fills in the site values) reads and writes it. Set whatever the umask is
    (write_bytes_atomic chmods to it). A source gone since it was read: owner only."""
    mode = 0o644
    for source in sources:
        try:
            mode &= os.stat(source).st_mode | 0o600
        except OSError:
            mode &= 0o600
    return mode


def _kept_recipe_table(request: RecipeExportRequest) -> tuple[dict[str, Any] | None, Path]:
    """The ``[recipe]`` table an import kept (``--imported``, else beside the env file)."""
    fragment = request.imported if request.imported else Path(request.env_file).parent / "profile.toml"
    recipe_table = None
    if request.imported or fragment.is_file():
        recipe_table = read_toml(fragment).get("recipe")
        if recipe_table is None and request.imported:
            raise InputError(f"--imported {fragment}: has no [recipe] table (not written by `recipe import`)")
        if recipe_table is not None and not isinstance(recipe_table, dict):
            raise InputError(f"{fragment}: recipe: expected a table")
        if recipe_table is not None:
            _check_merged_fields(recipe_table, fragment)
    return recipe_table, fragment


def _check_merged_fields(recipe: dict[str, Any], fragment: Path) -> None:
    """The kept fields ``export_recipe`` merges with the launch's own, of the shapes it
    merges (an operator may have edited the fragment): else refused naming the fragment."""
    env = recipe.get("env")
    if env is not None and not isinstance(env, dict):
        raise InputError(f"{fragment}: recipe.env: expected a table of environment variables")
    mounts = recipe.get("extra_mounts")
    if mounts is not None and (not isinstance(mounts, list) or not all(isinstance(mount, dict) for mount in mounts)):
        raise InputError(f"{fragment}: recipe.extra_mounts: expected an array of tables ([[recipe.extra_mounts]])")
    for field in (UNMAPPED_ARGS, LAUNCHER_ARGS):
        words = recipe.get(field)
        if words is not None and (not isinstance(words, list) or not all(isinstance(word, str) for word in words)):
            raise InputError(f"{fragment}: recipe.{field}: expected an array of strings (serve arguments)")


def _toml_text(document: dict[str, Any], source: str) -> str:
    """The TOML of a document that carries values verbatim from ``source`` (a recipe's
    fields, an imported [recipe] table): one our writer has no form for (a date, null in a
    speculative config, an array mixing tables and values) is refused, nothing written."""
    try:
        return canonical_toml.dumps(document)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{source}: a value carried over verbatim has no form in the TOML written: {exc}; "
                         "nothing was written") from None


def export_recipe_file(request: RecipeExportRequest) -> ExportedRecipe:
    """The rank's launch as a recipe, written to ``output``."""
    if request.image:
        check_named_digest("--image", request.image)
    plan = plan_launch(
        rank=request.rank,
        env_file=request.env_file,
        contract=load_contract(request.profile),
        engine=Engine("podman", "podman"),
        image_id=request.image,
        run_checks=False,
    )
    recipe_table, fragment = _kept_recipe_table(request)
    exported = export_recipe(plan, recipe_table)
    # only a carried [recipe] table holds values the launch did not make
    source = str(fragment) if recipe_table is not None else request.env_file
    mode = _carried_mode(request.env_file, *([fragment] if recipe_table is not None else []))
    write_bytes_atomic(request.output, _toml_text(exported.document, source).encode(), mode)
    return ExportedRecipe(export=exported, carried_from=fragment if recipe_table is not None else None)
