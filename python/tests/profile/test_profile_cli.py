"""`sparkflake profile show|validate|list`."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_profile_model import DFLASH7_TEXT, MTP5_TEXT, REPO_PROFILES, make_profiles_dir, small_lock

from sparkflake.cli import main
from sparkflake.core.records import record_to_dict
from sparkflake.lock.profile_locks import load_profile
from sparkflake.profile.model import PROFILES_DIR_ENV
from sparkflake.profile.profile_file import parse_profile

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SPARKFLAKE = str(Path(sys.executable).parent / "sparkflake")


def test_show_prints_canonical_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = make_profiles_dir(tmp_path)
    assert main(["profile", "show", "glm53-dflash7", "--profiles-dir", str(profiles)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {profiles}/glm53-dflash7/profile.toml\n")
    assert parse_profile(out) == parse_profile(DFLASH7_TEXT)


def test_show_json_is_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = make_profiles_dir(tmp_path)
    assert main(["profile", "show", "glm53-mtp5", "--json", "--profiles-dir", str(profiles)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == json.loads(json.dumps(record_to_dict(parse_profile(MTP5_TEXT))))
    assert document["status"] == "research-only"
    assert document["runtime"]["SPECULATIVE_TOKENS"] == 5


def test_validate_all_and_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = make_profiles_dir(tmp_path, lock=small_lock())
    assert main(["profile", "validate", "--profiles-dir", str(profiles)]) == 0
    assert capsys.readouterr().out == (
        f"{profiles}/glm53-dflash7/profile.toml: valid (implemented; roles checked against locks)\n"
        f"{profiles}/glm53-mtp5/profile.toml: valid (research-only; roles checked against locks)\n"
    )
    assert main(["profile", "validate", "glm53-mtp5", "--json", "--profiles-dir", str(profiles)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["valid"] is True
    assert [entry["name"] for entry in document["profiles"]] == ["glm53-mtp5"]
    assert document["profiles"][0]["locks_checked"] is True


def test_validate_one_checks_its_siblings_for_shared_roots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clash = MTP5_TEXT.replace('cache_root = "/var/lib/sparkflake/cache/glm53-mtp5"',
                              'cache_root = "/var/lib/sparkflake/cache/glm53-dflash7"')
    profiles = make_profiles_dir(tmp_path, mtp5=clash)
    assert main(["profile", "validate", "glm53-dflash7", "--profiles-dir", str(profiles)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sparkflake: error: {profiles}/glm53-mtp5/profile.toml: cache_root: ")
    assert "overlaps cache_root" in err


def test_invalid_profile_exit_2_names_file_and_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = make_profiles_dir(tmp_path, dflash7=DFLASH7_TEXT.replace('status = "implemented"', 'status = "done"'))
    assert main(["profile", "validate", "glm53-dflash7", "--profiles-dir", str(profiles)]) == 2
    assert capsys.readouterr().err == (
        f"sparkflake: error: {profiles}/glm53-dflash7/profile.toml: status: expected one of qualified, "
        'implemented, research-only, unsupported, got "done"\n'
    )


def test_role_absent_from_the_lock_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = make_profiles_dir(tmp_path, lock=small_lock(without=("b12x",)))
    assert main(["profile", "validate", "--profiles-dir", str(profiles)]) == 2
    assert capsys.readouterr().err == (
        f'sparkflake: error: {profiles}/glm53-dflash7/profile.toml: inputs.b12x: no input named "b12x" in ../glm53.lock\n'
    )


def test_console_script_unknown_key_and_truncation(tmp_path: Path) -> None:
    profiles = make_profiles_dir(tmp_path, dflash7=DFLASH7_TEXT.replace("[runtime]\n", "[runtime]\nTP = 4\n", 1))
    result = subprocess.run([SPARKFLAKE, "profile", "validate", "glm53-dflash7"], capture_output=True, text=True,
                            timeout=60, env={"PATH": "/usr/bin:/bin", PROFILES_DIR_ENV: str(profiles)})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"sparkflake: error: {profiles}/glm53-dflash7/profile.toml: invalid TOML: ")
    assert "Traceback" not in result.stderr

    truncated = make_profiles_dir(tmp_path / "t", dflash7=DFLASH7_TEXT[: DFLASH7_TEXT.index("[[claims]]") + 4])
    result = subprocess.run([SPARKFLAKE, "profile", "show", str(truncated / "glm53-dflash7")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "invalid TOML" in result.stderr and "(at line " in result.stderr
    assert "Traceback" not in result.stderr

    unknown = make_profiles_dir(tmp_path / "u", dflash7=DFLASH7_TEXT.replace("[python]\n", "[python]\npip = 1\n"))
    result = subprocess.run([SPARKFLAKE, "profile", "show", "glm53-dflash7", "--profiles-dir", str(unknown)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == (
        f"sparkflake: error: {unknown}/glm53-dflash7/profile.toml: python.pip: unknown key (expected one of: requirements)\n"
    )


def test_console_script_on_the_repository_profiles() -> None:
    result = subprocess.run([SPARKFLAKE, "profile", "validate", "--json", "--profiles-dir", str(REPO_PROFILES)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    names = {entry["name"] for entry in json.loads(result.stdout)["profiles"]}
    assert {"glm53-dflash7", "glm53-mtp5"} <= names
    shown = subprocess.run([SPARKFLAKE, "profile", "show", "glm53-dflash7", "--profiles-dir", str(REPO_PROFILES)],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0
    assert parse_profile(shown.stdout) == load_profile("glm53-dflash7", REPO_PROFILES)
    assert tomllib.loads(shown.stdout)["served_model_name"] == "glm-5.3-flash-dflash7"


def test_list_and_unknown_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = make_profiles_dir(tmp_path)
    assert main(["profile", "list", "--profiles-dir", str(profiles)]) == 0
    assert capsys.readouterr().out == "glm53-dflash7\nglm53-mtp5\n"
    assert main(["profile", "list", "--json", "--profiles-dir", str(profiles)]) == 0
    assert json.loads(capsys.readouterr().out)["profiles"] == ["glm53-dflash7", "glm53-mtp5"]
    assert main(["profile", "show", "glm53-none", "--profiles-dir", str(profiles)]) == 2
    assert capsys.readouterr().err == (
        f"sparkflake: error: no profile named 'glm53-none' in {profiles} (profiles: glm53-dflash7, glm53-mtp5)\n"
    )


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["profile"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        main(["profile", "show"])
    assert caught.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_validate_refuses_a_runtime_key_the_launcher_does_not_know(tmp_path, capsys):
    import shutil

    from sparkflake.cli import main as cli_main
    from sparkflake.profile.lookup import find_profiles_dir

    source = find_profiles_dir()
    profiles = tmp_path / "profiles"
    shutil.copytree(source / "glm53-mtp5", profiles / "glm53-mtp5")
    shutil.copy(source / "glm53.lock", profiles / "glm53.lock")
    path = profiles / "glm53-mtp5" / "profile.toml"
    path.write_text(path.read_text().replace("[runtime]\n", "[runtime]\nMAX_MODEL_LENGTH = 5\n", 1))
    code = cli_main(["profile", "validate", "glm53-mtp5", "--profiles-dir", str(profiles)])
    err = capsys.readouterr().err
    assert code == 2
    assert "runtime.MAX_MODEL_LENGTH" in err and "MAX_MODEL_LEN" in err and "Traceback" not in err


@pytest.mark.parametrize(("table", "entry", "named"), [
    ("[runtime]\n", "MAX_MODEL_LENGTH = 5\n", "runtime.MAX_MODEL_LENGTH"),
    ("[runtime]\n", "DCP = \"three\"\n", "runtime.DCP"),
])
def test_build_refuses_a_profile_whose_launch_table_the_catalog_refuses(tmp_path, capsys, table, entry, named):
    """`sparkflake build` reads the profile through read_profile, which validates every table:
    the launch settings too, before anything is fetched (issue 30)."""
    import shutil

    from sparkflake.cli import main as cli_main
    from sparkflake.profile.lookup import find_profiles_dir

    source = find_profiles_dir()
    profiles = tmp_path / "profiles"
    shutil.copytree(source / "glm53-mtp5", profiles / "glm53-mtp5")
    shutil.copy(source / "glm53.lock", profiles / "glm53.lock")
    path = profiles / "glm53-mtp5" / "profile.toml"
    text = path.read_text()
    if entry.split(" =")[0] + " =" in text:  # a key the profile sets: replace its line
        text = "\n".join(line for line in text.splitlines() if not line.startswith(entry.split(" =")[0] + " =")) + "\n"
    path.write_text(text.replace(table, table + entry, 1))
    code = cli_main(["build", "glm53-mtp5", "--profiles-dir", str(profiles), "-o", str(tmp_path / "out"),
                     "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{path}: {named}" in err and "Traceback" not in err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.whl"))
