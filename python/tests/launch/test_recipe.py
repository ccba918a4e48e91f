"""Recipes: the seed's TOML recipe imports without dropping anything; export round-trips."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from fixtures.launch import PROFILES, site_env
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.canonical_toml import dumps as dump_recipe
from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.recipe import import_recipe
from sparkflake.profile.settings_catalog import render_value

SEED_RECIPE = Path(__file__).parents[1] / "golden" / "launch" / "recipes" / "kindling-2x.recipe.toml"


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
    assert report["runtime"]["SERVED_MODEL_NAME"] == "glm53"  # the launch serves the recipe's name
    assert report["unknown_fields"] == ["docker_image_dir"]
    assert "--chat-template" in report["unmapped_args"] and "--block-size" not in report["unmapped_args"]
    # the seed recipe's block size is the one vLLM settles for GLM-5.3's sparse MLA (2304)
    assert report["runtime"]["KV_BLOCK_SIZE"] == "2304"
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
    assert completed.returncode == 2 and "bad.toml: invalid TOML" in completed.stderr
    bad.write_text('args = ["--speculative-config", "{not json"]\n')
    completed = cli("recipe", "import", str(bad), "-o", str(tmp_path / "o"))
    assert completed.returncode == 2 and "args[0] --speculative-config: not JSON" in completed.stderr


@given(st.lists(st.sampled_from(["--max-model-len", "4096", "--x", "--block-size", "64", "auto", "--trust-remote-code",
                                  "--speculative-config", '{"method":"mtp"}', "-1", "0x10"]), max_size=12))
def test_import_never_drops_an_argument(args):
    try:
        imported = import_recipe({"args": args}, "r.toml")
    except Exception as exc:  # only our input error is acceptable
        from sparkflake.core.errors import InputError

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

    from fixtures.launch import DRAFT_FILES, TARGET_FILES, launcher_rules_contract

    from sparkflake.core.container_engine import Engine
    from sparkflake.launch.plan import plan_from_assignments
    from sparkflake.launch.recipe import export_recipe
    from sparkflake.profile.model import CheckpointFile

    def rows(files):
        return tuple(CheckpointFile(n, hashlib.sha256(c).hexdigest(), len(c)) for n, c in sorted(files.items()))

    # the launcher's own rules (the profile and its image refuse DCP2/DCP4, SparkCache on)
    contract = dataclasses.replace(launcher_rules_contract("glm53-dflash7"), target_files=rows(TARGET_FILES),
                                   draft_files=rows(DRAFT_FILES))
    text = site_env(Path("/srv/p"), 0, DCP=str(dcp), SPARKCACHE_ENABLED=str(int(sparkcache)), MAX_NUM_SEQS=str(seqs),
                    SPECULATIVE_TOKENS=str(depth), MAX_NUM_BATCHED_TOKENS="8192", LOAD_FORMAT=load_format)
    plan = plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env", contract=contract,
                                 engine=Engine("podman", "podman"), image_id="sha256:" + "7" * 64, run_checks=False)
    document = tomllib.loads(dump_recipe(export_recipe(plan).document))
    imported = import_recipe(document, "exported.toml")
    values = plan.resolution.values
    for key, raw in imported.runtime.items():
        assert raw == render_value(values[key]), key
    for key in ("DCP", "MAX_NUM_SEQS", "SPECULATIVE_TOKENS", "SPARKCACHE_ENABLED", "LOAD_FORMAT", "KV_CACHE_GIB"):
        assert key in imported.runtime, key


# --------------------------------------------------------------- hostile input (issue 14)

SEED = tomllib.loads(SEED_RECIPE.read_text()) if SEED_RECIPE.is_file() else {}


def test_seed_import_keeps_the_draft_model_load_format_and_launcher_args():
    imported = import_recipe(SEED, "seed.toml")
    assert imported.kept["speculative_config_extra"]["model"] == "{{dflash}}"
    assert imported.runtime["LOAD_FORMAT"] == "auto" and "--load-format" not in imported.unmapped_args
    assert imported.kept["launcher_args"] == ["--distributed-executor-backend", "mp", "--enable-prefix-caching"]
    assert imported.conflicts == ()


def test_every_conflict_is_reported_and_vllm_s_last_value_imported():
    document = dict(SEED)
    document["args"] = [*SEED["args"], "--max-model-len", "131072", "--tensor-parallel-size", "4"]
    imported = import_recipe(document, "r.toml")
    assert imported.runtime["MAX_MODEL_LEN"] == "131072" and imported.runtime["TP"] == "4"
    joined = "\n".join(imported.conflicts)
    assert "--max-model-len is given 2 times with different values" in joined
    assert "'163840'" in joined and "'131072'" in joined
    assert "tensor_parallel_size = 2 but args[" in joined and "--tensor-parallel-size 4" in joined
    assert len(imported.conflicts) == 2
    assert imported.kept["tensor_parallel_size"] == 2  # the field is kept, not dropped
    overridden = imported.unmapped_args.index("--max-model-len")  # the earlier one, kept
    assert imported.unmapped_args[overridden + 1] == "163840"


def test_custom_launcher_args_are_kept_as_data():
    document = dict(SEED)
    custom = ["--compilation-config", '{"level":3,"cudagraph_mode":"FULL"}', "--host", "10.1.2.3",
              "--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}']
    document["args"] = [*SEED["args"], *custom]
    imported = import_recipe(document, "r.toml")
    kept = imported.kept["launcher_args"]
    for flag, value in zip(custom[::2], custom[1::2], strict=True):
        assert kept[kept.index(flag) + 1] == value
    assert all(flag in " ".join(imported.notes) for flag in custom[::2])


def test_export_of_an_imported_env_keeps_env_mounts_mods_and_unmapped_args(tmp_path):
    out = tmp_path / "imported"
    completed = cli("recipe", "import", str(SEED_RECIPE), "-o", str(out))
    assert completed.returncode == 0, completed.stderr
    env_file = out / "runtime.env"
    env_file.write_text(env_file.read_text() + site_env(tmp_path, 0))
    exported_path = tmp_path / "back.recipe.toml"
    export = ["recipe", "export", "0", str(env_file), "--profile", str(PROFILES / "glm53-dflash7"),
              "-o", str(exported_path)]
    # A MoE backend the image does not have (its runtime-capabilities.json): the export, a
    # launch resolution, refuses it by name before anything is written
    env_file.write_text(env_file.read_text().replace("MOE_BACKEND=flashinfer_cutlass", "MOE_BACKEND=nope_moe"))
    refused = cli(*export)
    assert refused.returncode == 2 and "MOE_BACKEND=nope_moe" in refused.stderr, refused.stderr
    assert not exported_path.exists()
    env_file.write_text(env_file.read_text().replace("MOE_BACKEND=nope_moe", "MOE_BACKEND=b12x"))
    completed = cli(*export)
    assert completed.returncode == 0, completed.stderr
    assert f"carried [recipe] of {out / 'profile.toml'}" in completed.stdout
    exported = tomllib.loads(exported_path.read_text())
    replaced = completed.stdout
    for key, value in SEED["env"].items():
        assert exported["env"].get(key) == value or f"env {key}:" in replaced, key
    for mount in SEED["extra_mounts"]:
        assert mount in exported["extra_mounts"], mount
    assert exported["mods"] == SEED["mods"]
    args = exported["args"]
    unmapped = import_recipe(SEED, "seed").unmapped_args
    for flag in [word for word in unmapped if word.startswith("--")]:
        assert flag in args or f"{flag}:" in replaced, flag
    assert exported["docker_image_dir"] == SEED["docker_image_dir"]
    assert exported["speculative_config_extra"]["model"] == "{{dflash}}"
    assert exported["parent_model"] == SEED["parent_model"]
    assert f"name: the launch sets {exported['name']!r}; the recipe's {SEED['name']!r} is not written" in replaced


_ENV_KEYS = st.sampled_from(["HF_HUB_OFFLINE", "VLLM_X", "MAX_JOBS", "TRITON_CACHE_DIR", "VLLM_CACHE_ROOT", "A_B"])
_WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
_UNMAPPED = st.lists(st.sampled_from([["--chat-template", "t.jinja"], ["--trust-remote-code"], ["--tool-call-parser", "glm47"],
                                       ["--block-size", "2304"], ["--host", "0.0.0.0"], ["--scheduler-cls", "x.Y"],
                                       ["--compilation-config", '{"level":3}'], ["--max-model-len", "4096"]]),
                     max_size=5).map(lambda groups: [word for group in groups for word in group])


@given(
    env=st.dictionaries(_ENV_KEYS, _WORDS, max_size=5),
    mounts=st.lists(st.fixed_dictionaries({"host": st.sampled_from(["~/a", "/srv/b"]),
                                           "container": st.sampled_from(["/root/.cache/x", "dflash", "/models/target"])}),
                    max_size=3),
    mods=st.none() | st.fixed_dictionaries({"commands": st.lists(st.fixed_dictionaries(
        {"command": _WORDS, "on_failure": st.sampled_from(["warn", "fail"])}), max_size=2)}),
    unknown=st.dictionaries(st.sampled_from(["docker_image_dir", "future_field", "bench"]),
                            st.integers(0, 9) | _WORDS | st.lists(st.integers(0, 3), max_size=2), max_size=2),
    unmapped=_UNMAPPED,
    parent_model=st.none() | _WORDS,
)
def test_import_export_round_trips_the_recipe_s_fields(env, mounts, mods, unknown, unmapped, parent_model):
    from sparkflake.launch.recipe import LAUNCHER_ARGS, UNMAPPED_ARGS, _grouped, export_recipe

    recipe = {"engine": "vllm", "name": "r", "env": env, "extra_mounts": mounts, "args": unmapped, **unknown}
    if mods is not None:
        recipe["mods"] = mods
    if parent_model is not None:
        recipe["parent_model"] = parent_model
    first = import_recipe(recipe, "r.toml")
    plan = _fixed_plan()
    # through TOML, as the CLI does: the [recipe] table and the exported file
    table = tomllib.loads(dump_recipe(first.recipe_table()))
    exported = export_recipe(plan, table)
    document = tomllib.loads(dump_recipe(exported.document))
    said = "\n".join(exported.notes)
    for key, value in env.items():
        assert document["env"].get(key) == value or f"env {key}:" in said, key
    for mount in mounts:
        assert mount in document["extra_mounts"] or f"mount {mount['container']}:" in said, mount
    assert document.get("mods") == mods
    assert document.get("parent_model") == parent_model
    for key, value in unknown.items():
        assert document[key] == value, key
    launch_flags = dict(_grouped(plan.spec.serve_args[1:]))
    written = _grouped(document["args"])
    for flag, value in _grouped([*table.get(UNMAPPED_ARGS, []), *table.get(LAUNCHER_ARGS, [])]):
        if flag in launch_flags and launch_flags[flag] != value:
            assert f"{flag}: the launch sets" in said, flag
        else:
            assert (flag, value) in written, (flag, value)
    second = import_recipe(document, "exported.toml")
    for key, value in unknown.items():
        assert second.kept[key] == value
    assert second.kept.get("mods") == mods
    assert {k: v for k, v in env.items() if document["env"].get(k) == v}.items() <= second.kept["env"].items()


@functools.lru_cache(maxsize=1)
def _fixed_plan():
    import dataclasses
    import hashlib

    from fixtures.launch import DRAFT_FILES, TARGET_FILES, real_contract

    from sparkflake.core.container_engine import Engine
    from sparkflake.launch.plan import plan_from_assignments
    from sparkflake.profile.model import CheckpointFile

    def rows(files):
        return tuple(CheckpointFile(n, hashlib.sha256(c).hexdigest(), len(c)) for n, c in sorted(files.items()))

    contract = dataclasses.replace(real_contract("glm53-dflash7"), target_files=rows(TARGET_FILES),
                                   draft_files=rows(DRAFT_FILES))
    return plan_from_assignments(rank=0, assignments=parse_env_text(site_env(Path("/srv/p"), 0), "r.env"), source="r.env",
                                 contract=contract, engine=Engine("podman", "podman"), image_id="sha256:" + "7" * 64,
                                 run_checks=False)


def test_backend_flags_map_to_their_settings():
    # the three backends the seeds' serving selects (vllm/engine/arg_utils.py: --attention-backend,
    # --moe-backend, --linear-backend), each to the catalog setting launch-rank emits it from
    document = {"args": ["--attention-backend", "B12X", "--moe-backend", "b12x", "--linear-backend", "b12x"]}
    imported = import_recipe(document, "r.toml")
    assert (imported.runtime["ATTENTION_BACKEND"], imported.runtime["MOE_BACKEND"],
            imported.runtime["LINEAR_BACKEND"]) == ("B12X", "b12x", "b12x")
    assert "--linear-backend" not in imported.unmapped_args


def test_import_never_replaces_an_operators_files_unless_forced(tmp_path):
    """Issue 28, class 12: a hand-written runtime.env (or profile.toml) in the output
    directory is kept and the import refused, exit 2, naming it; a file the import wrote
    and nobody edited is replaced; once edited (site values filled in) it is the
    operator's; --force replaces whatever is there."""
    out = tmp_path / "out"
    out.mkdir()
    hand_written = "# my site\nNODE_ADDRESS=10.0.0.1\n"
    (out / "runtime.env").write_text(hand_written)
    refused = cli("recipe", "import", str(SEED_RECIPE), "-o", str(out))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"{out / 'runtime.env'}: exists and is not a file sparkflake wrote" in refused.stderr
    assert sorted(p.name for p in out.iterdir()) == ["runtime.env"]  # profile.toml not written either
    assert (out / "runtime.env").read_text() == hand_written

    (out / "runtime.env").unlink()
    assert cli("recipe", "import", str(SEED_RECIPE), "-o", str(out)).returncode == 0
    first = {name: (out / name).read_bytes() for name in ("profile.toml", "runtime.env")}
    assert all(content.startswith(b"# sparkflake-generated sha256:") for content in first.values())
    assert tomllib.loads(first["profile.toml"].decode())["recipe"]  # the mark is a TOML comment
    again = cli("recipe", "import", str(SEED_RECIPE), "-o", str(out))
    assert again.returncode == 0, again.stderr  # unchanged since written: replaced
    assert {name: (out / name).read_bytes() for name in first} == first

    edited = first["runtime.env"].decode() + site_env(tmp_path, 0)
    (out / "runtime.env").write_text(edited)
    refused = cli("recipe", "import", str(SEED_RECIPE), "-o", str(out))
    assert refused.returncode == 2 and "or it was edited since" in refused.stderr
    assert (out / "runtime.env").read_text() == edited
    forced = cli("recipe", "import", str(SEED_RECIPE), "-o", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (out / "runtime.env").read_bytes() == first["runtime.env"]


# --------------------------------------------------------------- credentials: kept, never shown

@pytest.mark.parametrize(("name", "credential"), [
    ("--api-key", True), ("--api-key=sk-1", True), ("--hf-token", True), ("--ssl-keyfile-password", True),
    ("--client-secret", True), ("--auth", True), ("--authorization", True), ("HF_TOKEN", True),
    ("VLLM_API_KEY", True), ("APIKEY", True), ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD_FILE", True),
    ("MYSQL_PASSWD", True), ("GOOGLE_APPLICATION_CREDENTIALS", True), ("api_keys", True),
    ("--tokenizer", False), ("--tokenizer-mode", False), ("--max-num-batched-tokens", False),
    ("MAX_NUM_BATCHED_TOKENS", False), ("TOKENIZERS_PARALLELISM", False), ("--ssl-keyfile", False),
    ("--enable-auto-tool-choice", False), ("--max-model-len", False), ("NCCL_DEBUG", False),
    ("--kv-cache-memory", False), ("--chat-template=token.jinja", False),
])
def test_which_names_say_credential(name, credential):
    from sparkflake.launch.credential_masking import names_credential

    assert names_credential(name) is credential


def test_no_catalog_setting_holds_a_credential():
    """The report's runtime values are shown as they are: a setting the rule names (one of
    bytes per token) takes only an integer, so a catalog setting is never a credential."""
    from sparkflake.launch.credential_masking import names_credential
    from sparkflake.profile.settings_catalog import CATALOG

    named = [setting for key, setting in CATALOG.items() if names_credential(key)]
    assert all(setting.kind == "int" for setting in named), named


_CREDENTIAL_FLAGS = st.sampled_from(["--api-key", "--hf-token", "--ssl-keyfile-password", "--client-secret", "--auth"])
# every secret begins with SEKRET, which nothing else in a recipe holds: no shown text may
_SECRETS = _WORDS.map(lambda text: "SEKRET" + text)


@given(
    other=_UNMAPPED,
    credentials=st.lists(st.tuples(_CREDENTIAL_FLAGS, _SECRETS, st.booleans()), min_size=1, max_size=3),
    at=st.integers(0, 30),
    env_secret=_SECRETS,
)
def test_import_keeps_credentials_verbatim_and_shows_none(other, credentials, at, env_secret):
    """`recipe import` printed a secret serve argument (--api-key sk-…) on its
    "unmapped arguments" line and in --json; a flag given twice printed both values. Every
    shown text now has the flag's name and ***, in both the "--flag value" and the
    "--flag=value" form; [recipe] keeps the values for the export."""
    inserted = [word for flag, secret, joined in credentials
                for word in ([f"{flag}={secret}"] if joined else [flag, secret])]
    at = min(at, len(other))
    args = [*other[:at], *inserted, *other[at:]]
    imported = import_recipe({"args": args, "env": {"HF_TOKEN": env_secret, "NCCL_DEBUG": "WARN"}}, "r.toml")
    report = json.dumps(imported.report(), ensure_ascii=False)
    assert "SEKRET" not in report, report
    shown = imported.shown_unmapped_args()  # the printed "unmapped arguments" line
    assert "SEKRET" not in "\n".join(shown), shown
    for flag, _, joined in credentials:
        if joined:
            assert f"{flag}=***" in shown
        else:
            assert shown[shown.index(flag) + 1] == "***"
    table = tomllib.loads(dump_recipe(imported.recipe_table()))
    assert [word for word in table["unmapped_args"] if "SEKRET" in word] == [
        word for word in inserted if "SEKRET" in word]
    assert table["env"]["HF_TOKEN"] == env_secret


def test_a_credential_given_twice_is_reported_without_its_values():
    imported = import_recipe({"args": ["--api-key", "SEKRET-a", "--api-key", "SEKRET-b",
                                       "--hf-token=SEKRET-c", "--hf-token=SEKRET-c", "--chat-template", "t.jinja",
                                       "--chat-template", "u.jinja"]}, "r.toml")
    assert imported.conflicts[0] == ("r.toml: --api-key is given 2 times with different values (args[0] ***, "
                                     "args[2] ***); vLLM takes the last, so that one is imported")
    assert "r.toml: --hf-token=*** is given 2 times with the same value (args[4] None, args[5] None)" in imported.notes
    # the values of a flag that names no credential are still quoted
    assert "(args[6] 't.jinja', args[8] 'u.jinja')" in imported.conflicts[1]
    assert imported.unmapped_args[:4] == ("--api-key", "SEKRET-a", "--api-key", "SEKRET-b")


def test_export_notes_show_no_credential_value():
    """An export's notes quoted what of the recipe's the launch replaced with {value!r}: a
    launch's own --api-key or HF_TOKEN against the recipe's, or an args field an operator
    put under [recipe], printed both secrets."""
    import dataclasses

    from sparkflake.launch.recipe import export_recipe

    plan = _fixed_plan()
    spec = dataclasses.replace(plan.spec, env={**plan.spec.env, "HF_TOKEN": "SEKRET-launch-env"},
                               serve_args=(*plan.spec.serve_args, "--api-key", "SEKRET-launch-key"))
    plan = dataclasses.replace(plan, spec=spec)
    table = import_recipe({"args": ["--api-key", "SEKRET-recipe-key", "--hf-token=SEKRET-joined"],
                           "env": {"HF_TOKEN": "SEKRET-recipe-env", "NCCL_DEBUG": "WARN"}}, "r.toml").recipe_table()
    table["args"] = ["--api-key", "SEKRET-hand"]  # an operator's edit: a field the launch writes itself
    exported = export_recipe(plan, table)
    said = "\n".join(exported.notes)
    assert "SEKRET" not in said, said
    assert "env HF_TOKEN: the launch sets ***; the recipe's *** is not written" in said
    assert "--api-key: the launch sets ***; the recipe's *** is not written" in said
    assert "args: the launch sets [" in said and "'--api-key', '***'" in said and "'--hf-token=***'" in said
    # the document is what the launcher would run: every value as it is
    assert exported.document["env"]["HF_TOKEN"] == "SEKRET-launch-env"
    assert exported.document["env"]["NCCL_DEBUG"] == "WARN"
    assert "--hf-token=SEKRET-joined" in exported.document["args"]


# a recipe holding credentials inside other values: a JSON argument, a URL, a command line
_INSIDE = {
    "engine": "vllm",
    "model": "zai-org/GLM-5",
    "tensor_parallel_size": 2,
    "entrypoint": ["bash", "-c", "huggingface-cli login --token SEKRET-login && exec vllm serve"],
    "args": [
        "--kv-transfer-config",  # the launcher's flag: a note quotes the recipe's words
        '{"kv_connector":"SparkContextCacheConnector","kv_connector_extra_config":'
        '{"api_key":"SEKRET-json","hf_token":"SEKRET-hf","store":"/srv/kv"}}',
        "--override-generation-config", "'{\"temperature\": 0.6, \"password\": \"SEKRET-unmapped\"}'",
        "--model-loader-extra-config", "https://user:SEKRET-userinfo@mirror.example/x",
        "--kv-cache-memory", "HF_TOKEN=SEKRET-kv",  # not GiB: a note quotes it
        "--max-model-len", "https://host/f?token=SEKRET-catalog",  # refused by the catalog, which quotes it
        "--tensor-parallel-size", "Authorization: Bearer SEKRET-field",  # a conflict with the field quotes it
        "--tool-call-parser", "https://h/p?X-Amz-Signature=SEKRET-dup1",
        "--tool-call-parser", "curl -H 'X-Api-Key: SEKRET-dup2'",  # given twice: a conflict quotes both
        "--served-model-name", "glm HF_TOKEN=SEKRET-name",
        "--chat-template", "token.jinja",
    ],
    "env": {"HF_ENDPOINT": "https://u:SEKRET-env@mirror.example/hf", "NCCL_DEBUG": "WARN"},
    "mods": {"commands": [{"command": "export HF_TOKEN=SEKRET-mod; ./fix.sh", "on_failure": "warn"}]},
}


def test_import_shows_no_credential_inside_a_value():
    """`recipe import` showed a credential held inside another value: the launcher's
    --kv-transfer-config JSON (its api_key) in a note, an unmapped JSON or URL argument, a
    value a note or a conflict quotes (a refused setting, a field against its flag, a flag
    given twice). Each is now shown with the credential masked, the rest as written; the
    [recipe] table keeps every value verbatim (the export carries it back, to be run)."""
    imported = import_recipe(_INSIDE, "r.toml")
    shown = [json.dumps(imported.report(), ensure_ascii=False), *imported.shown_unmapped_args(),
             *imported.notes, *imported.conflicts]
    assert not [text for text in shown if "SEKRET" in text], shown
    said = "\n".join(shown)
    assert ('the recipe\'s \'--kv-transfer-config {"kv_connector":"SparkContextCacheConnector",'
            '"kv_connector_extra_config":{"api_key":"***","hf_token":"***","store":"/srv/kv"}}\' is kept') in said
    assert "--served-model-name: not a SERVED_MODEL_NAME: SERVED_MODEL_NAME='glm HF_TOKEN=***': expected" in said
    assert "--max-model-len: kept unmapped: MAX_MODEL_LEN='https://host/f?***': expected a non-negative" in said
    assert "'{\"temperature\": 0.6, \"password\": \"***\"}'" in imported.shown_unmapped_args()
    assert "https://***@mirror.example/x" in imported.shown_unmapped_args()
    assert "--kv-cache-memory HF_TOKEN=***: not a whole number of GiB" in said
    assert "but args[10] --tensor-parallel-size Authorization: ***;" in said
    assert "(args[12] 'https://h/p?***', args[14] \"curl -H 'X-Api-Key: ***'\")" in said
    assert "--chat-template" in imported.shown_unmapped_args() and "token.jinja" in imported.shown_unmapped_args()
    # what is written: every value verbatim, and the connector still read from the real value
    table = tomllib.loads(dump_recipe(imported.recipe_table()))
    assert table["launcher_args"][1] == _INSIDE["args"][1]
    assert [word for word in table["unmapped_args"] if "SEKRET" in word] == [
        word for word in _INSIDE["args"] if "SEKRET" in word and word not in (_INSIDE["args"][1], _INSIDE["args"][17])]
    assert table["env"] == _INSIDE["env"] and table["mods"] == _INSIDE["mods"]
    assert table["entrypoint"] == _INSIDE["entrypoint"]
    assert imported.runtime["SPARKCACHE_ENABLED"] == "1"
    assert imported.served_model_name == "glm HF_TOKEN=SEKRET-name"  # the name, as served


def test_export_notes_show_no_credential_inside_a_value():
    """An export's notes quote what of the recipe's the launch replaced: its
    --kv-transfer-config JSON, an env value holding a URL's password, an entrypoint command
    line. The credential inside each is masked; the exported document, which runs, keeps
    every value it writes verbatim."""
    import dataclasses

    from sparkflake.launch.recipe import export_recipe

    plan = _fixed_plan()
    spec = dataclasses.replace(plan.spec, env={**plan.spec.env, "HF_ENDPOINT": "https://hf.example/"},
                               serve_args=(*plan.spec.serve_args, "--kv-transfer-config", '{"kv_connector":"X"}'))
    plan = dataclasses.replace(plan, spec=spec)
    recipe = {**_INSIDE, "env": {**_INSIDE["env"], "PIP_INDEX_URL": "https://__token__:SEKRET-pip@pypi.example/simple"}}
    exported = export_recipe(plan, import_recipe(recipe, "r.toml").recipe_table())
    said = "\n".join(exported.notes)
    assert "SEKRET" not in said, said
    assert ("--kv-transfer-config: the launch sets '{\"kv_connector\":\"X\"}'; the recipe's '{\"kv_connector\":"
            "\"SparkContextCacheConnector\",\"kv_connector_extra_config\":{\"api_key\":\"***\",\"hf_token\":"
            "\"***\",\"store\":\"/srv/kv\"}}' is not written") in said
    assert ("env HF_ENDPOINT: the launch sets 'https://hf.example/'; the recipe's 'https://***@mirror.example/hf' "
            "is not written") in said
    assert "the recipe's ['bash', '-c', 'huggingface-cli login --token *** && exec vllm serve'] is not written" in said
    # the document is what the launcher would run: every value as it is
    document = exported.document
    assert document["env"]["PIP_INDEX_URL"] == "https://__token__:SEKRET-pip@pypi.example/simple"
    assert document["env"]["HF_ENDPOINT"] == "https://hf.example/"
    assert document["mods"] == _INSIDE["mods"]
    args = document["args"]
    assert args[args.index("--model-loader-extra-config") + 1] == "https://user:SEKRET-userinfo@mirror.example/x"
    assert "'{\"temperature\": 0.6, \"password\": \"SEKRET-unmapped\"}'" in args


def test_recipe_import_prints_no_credential_inside_a_value(tmp_path):
    """The command's printed lines and --json: no credential held inside a value; the files
    it writes keep them (they are what an export carries back)."""
    recipe = tmp_path / "r.recipe.toml"
    recipe.write_text(dump_recipe(_INSIDE))
    recipe.chmod(0o600)
    for extra in ((), ("--json",)):
        completed = cli("recipe", "import", str(recipe), "-o", str(tmp_path / "out"), "--force", *extra)
        assert completed.returncode == 0, completed.stderr
        assert "SEKRET" not in completed.stdout + completed.stderr, completed.stdout
        assert "api_key" in completed.stdout and "***" in completed.stdout
    written = (tmp_path / "out" / "profile.toml").read_text()
    assert "SEKRET-json" in written and "SEKRET-mod" in written and "SEKRET-userinfo" in written
