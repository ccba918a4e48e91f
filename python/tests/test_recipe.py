"""Recipes: the seed's TOML recipe imports without dropping anything; export round-trips."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from launch_fixtures import PROFILES, site_env

from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.recipe import dump_recipe, import_recipe
from sparkflake.launch.settings import render_value

SEED_RECIPE = Path(__file__).parent / "golden" / "launch" / "recipes" / "kindling-2x.recipe.toml"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_seed_recipe_import(tmp_path):
    completed = cli("recipe", "import", str(SEED_RECIPE), "-o", str(tmp_path / "out"), "--json")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["runtime"]["TP"] == "2" and report["runtime"]["NODE_COUNT"] == "2"
    assert report["runtime"]["MAX_MODEL_LEN"] == "163840"
    assert report["runtime"]["KV_CACHE_GIB"] == "8"  # --kv-cache-memory 8589934592
    assert report["runtime"]["SPECULATIVE_METHOD"] == "dflash" and report["runtime"]["SPECULATIVE_TOKENS"] == "7"
    assert report["runtime"]["SPARKCACHE_ENABLED"] == "0"
    assert report["served_model_name"] == "glm53"
    assert report["unknown_fields"] == ["docker_image_dir"]
    assert "--chat-template" in report["unmapped_args"] and "--block-size" in report["unmapped_args"]
    profile = tomllib.loads((tmp_path / "out" / "profile.toml").read_text())
    source = tomllib.loads(SEED_RECIPE.read_text())
    recipe = profile["recipe"]
    # nothing is dropped: every field is mapped or kept verbatim
    for key in ("docker_image", "docker_image_dir", "entrypoint", "model", "env", "extra_mounts", "mods"):
        assert recipe[key] == source[key], key
    assert recipe["env"]["VLLM_DENSE_W4"] == source["env"]["VLLM_DENSE_W4"]
    assert recipe["speculative_config_extra"]["num_speculative_tokens_per_batch_size"][0] == [1, 1, 7]
    # the env file parses as data and only holds catalog keys
    env = parse_env_text((tmp_path / "out" / "runtime.env").read_text(), "runtime.env")
    assert {a.key: a.value for a in env} == profile["runtime"]


def test_export_then_import_round_trips_settings(tmp_path):
    env_file = tmp_path / "r.env"
    # DCP1: the profile's image refuses DCP2/DCP4 (no full-CKV gather switch it reads)
    env_file.write_text(site_env(tmp_path, 0, DCP="1", MAX_NUM_SEQS="8", SPECULATIVE_TOKENS="5"))
    out = tmp_path / "exported.recipe.toml"
    completed = cli("recipe", "export", "0", str(env_file), "--profile", str(PROFILES / "glm53-dflash7"), "-o", str(out))
    assert completed.returncode == 0, completed.stderr
    imported = import_recipe(tomllib.loads(out.read_text()), str(out))
    runtime = imported.runtime
    assert runtime["DCP"] == "1" and runtime["CP_KV_INTERLEAVE"] == "1"
    assert runtime["MAX_NUM_SEQS"] == "8" and runtime["SPECULATIVE_TOKENS"] == "5"
    assert runtime["KV_CACHE_GIB"] == "26" and runtime["SPARKCACHE_ENABLED"] == "0"
    assert imported.served_model_name == "glm-5.3-flash-dflash7"
    assert imported.unknown_fields == ()


def test_unknown_fields_are_reported_not_dropped(tmp_path):
    document = tomllib.loads(SEED_RECIPE.read_text())
    document["future_field"] = {"x": [1, 2]}
    imported = import_recipe(document, "r.toml")
    assert "future_field" in imported.unknown_fields
    assert imported.profile_document()["recipe"]["future_field"] == {"x": [1, 2]}


def test_bad_recipe_is_input_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("engine = \n")
    completed = cli("recipe", "import", str(bad), "-o", str(tmp_path / "o"))
    assert completed.returncode == 2 and "not valid TOML" in completed.stderr
    bad.write_text('args = ["--speculative-config", "{not json"]\n')
    completed = cli("recipe", "import", str(bad), "-o", str(tmp_path / "o"))
    assert completed.returncode == 2 and "args[0] --speculative-config: not JSON" in completed.stderr


@given(st.lists(st.sampled_from(["--max-model-len", "4096", "--x", "--block-size", "64", "auto", "--trust-remote-code",
                                  "--speculative-config", '{"method":"mtp"}', "-1", "0x10"]), max_size=12))
def test_import_never_drops_an_argument(args):
    try:
        imported = import_recipe({"args": args}, "r.toml")
    except Exception as exc:  # only our input error is acceptable
        from sparkflake.errors import InputError

        assert isinstance(exc, InputError)
        return
    accounted = set(imported.unmapped_args) | {a for a in args if a.startswith("--")}
    assert all(a in accounted or any(a in n for n in imported.notes) or a in imported.runtime.values()
               or a.startswith("{") for a in args)


@given(
    st.sampled_from([1, 2, 4]),
    st.booleans(),
    st.integers(1, 64),
    st.integers(1, 8),
    st.sampled_from(["fastsafetensors", "safetensors"]),
)
def test_export_import_round_trip_property(dcp, sparkcache, seqs, depth, load_format):
    import dataclasses
    import hashlib

    from launch_fixtures import DRAFT_FILES, TARGET_FILES, real_contract

    from sparkflake.launch.contract import IdentityFile
    from sparkflake.launch.engine import Engine
    from sparkflake.launch.plan import plan_from_assignments
    from sparkflake.launch.recipe import export_recipe

    def rows(files):
        return tuple(IdentityFile(n, hashlib.sha256(c).hexdigest(), len(c)) for n, c in sorted(files.items()))

    # the launcher's own rules (the image's capabilities would refuse DCP2/DCP4, SparkCache on)
    contract = dataclasses.replace(real_contract("glm53-dflash7"), target_files=rows(TARGET_FILES),
                                   draft_files=rows(DRAFT_FILES), capabilities=None)
    text = site_env(Path("/srv/p"), 0, DCP=str(dcp), SPARKCACHE_ENABLED=str(int(sparkcache)), MAX_NUM_SEQS=str(seqs),
                    SPECULATIVE_TOKENS=str(depth), MAX_NUM_BATCHED_TOKENS="8192", LOAD_FORMAT=load_format)
    plan = plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env", contract=contract,
                                 engine=Engine("podman", "podman"), image_id="sha256:" + "7" * 64, run_checks=False)
    document = tomllib.loads(dump_recipe(export_recipe(plan)))
    imported = import_recipe(document, "exported.toml")
    values = plan.resolution.values
    for key, raw in imported.runtime.items():
        assert raw == render_value(values[key]), key
    for key in ("DCP", "MAX_NUM_SEQS", "SPECULATIVE_TOKENS", "SPARKCACHE_ENABLED", "LOAD_FORMAT", "KV_CACHE_GIB"):
        assert key in imported.runtime, key
