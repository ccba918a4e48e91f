"""An overlay build from fixture repositories whose trees are pinned: the fixture profile
with its vLLM source, B12X and SparkCache taken from git commits (served here by git
daemon, smart HTTP and file://), each laid over its wheel."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixtures.git import git_daemon, http_server, make_repository

from sparkflake.cli import main
from sparkflake.compose.source_overlay import extract_sdist_package
from sparkflake.compose.source_packages import source_tree_sha256
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.fetch.git import GitCache
from sparkflake.lock.lock_file import load_lock, write_lock
from sparkflake.lock.pins import GitPin, Lock
from sparkflake.workflows.build import BuildRequest, build_profile

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
UNREACHABLE = "https://git.sparkflake.invalid"


def vllm_files(tmp_path: Path, extra: dict[str, bytes]) -> dict[str, bytes]:
    """The fixture sdist's vllm/ (so the patch set's pre-images hold) plus ``extra``."""
    checkout = tmp_path / "sdist"
    extract_sdist_package(FIXTURE / "inputs" / "vllm-0.1.0.tar.gz", "vllm", checkout)
    files = {p.relative_to(checkout).as_posix(): p.read_bytes() for p in checkout.rglob("*") if p.is_file()}
    return {**files, "setup.py": b"# the fork's build script, not overlaid\n", **extra}


B12X = {"b12x/__init__.py": b'"""B12X from git."""\nFROM_GIT = True\n', "b12x/kernels.py": b"CKV_GATHER = True\n",
        "pyproject.toml": b"[project]\nname = 'b12x'\n"}
SPARKCACHE = {"src/sparkcache/__init__.py": b'"""SparkCache from git."""\r\nPROFILES = ["glm53-flash-hybrid"]\r\n',
              "src/sparkcache/schema.py": b"PUBLICATION = 'spark_cache_publication_schema'\n", "README.md": b"x\n"}


def profile_with_git_sources(tmp_path: Path, pins: dict[str, GitPin]) -> Path:
    """A copy of the fixture profile whose vllm_source, b12x_source and sparkcache_source
    roles name ``pins`` (added to its lock)."""
    profile = tmp_path / "profiles" / "fixture"
    shutil.copytree(FIXTURE, profile, ignore=shutil.ignore_patterns("inputs"))
    (profile / "inputs").symlink_to(FIXTURE / "inputs")
    lock = load_lock(profile / "fixture.lock")
    write_lock(profile / "fixture.lock", Lock(target=lock.target, inputs=(*lock.inputs, *pins.values())))
    toml = profile / "profile.toml"
    text = toml.read_text().replace('vllm_source = "vllm-sdist"', f'vllm_source = "{pins["vllm_source"].name}"')
    roles = "".join(f'{role} = "{pin.name}"\n' for role, pin in pins.items() if role != "vllm_source")
    vllm = pins["vllm_source"]
    claims = (f'\n[[claims]]\nname = "vllm-source"\nkind = "git"\nsubject = "the fork"\nstatus = "unverified"\n'
              f'source = "test"\nrev = "{vllm.rev}"\ntree = "{vllm.tree}"\n'
              f'\n[[claims]]\nname = "other-commit"\nkind = "git"\nsubject = "not fetched"\nstatus = "unverified"\n'
              f'source = "test"\nrev = "{"1" * 40}"\ntree = "{vllm.tree}"\n')
    toml.write_text(text.replace('torch = "torch"\n', f'torch = "torch"\n{roles}') + claims)
    return profile


@pytest.fixture
def repositories(tmp_path: Path):
    vllm = make_repository(tmp_path / "repos" / "vllm", [vllm_files(tmp_path, {"vllm/ckv_gather.py": b"GATHER = 4\n"})])
    b12x = make_repository(tmp_path / "repos" / "b12x", [B12X])
    sparkcache = make_repository(tmp_path / "repos" / "sparkcache", [SPARKCACHE])
    return {"vllm": vllm, "b12x": b12x, "sparkcache": sparkcache}


def pins_for(repositories, urls: dict[str, str], **overrides: dict) -> dict[str, GitPin]:
    def pin(key: str, name: str) -> GitPin:
        _served, [(rev, tree)] = repositories[key]
        fields = {"name": name, "urls": (urls[key],), "rev": rev, "tree": tree, **overrides.get(key, {})}
        return GitPin(**fields)

    return {"vllm_source": pin("vllm", "vllm-git"), "b12x_source": pin("b12x", "b12x-git"),
            "sparkcache_source": pin("sparkcache", "sparkcache-git")}


def test_overlay_build_from_pinned_fixture_repositories(tmp_path: Path, repositories) -> None:
    sparkcache_dir = repositories["sparkcache"][0].parent / "work" / "src" / "sparkcache"
    digest = source_tree_sha256(sparkcache_dir)
    with git_daemon(tmp_path / "repos" / "vllm") as daemon, http_server(tmp_path / "repos" / "b12x", smart=True) as web:
        urls = {"vllm": f"{daemon}/served.git", "b12x": f"{web}/served.git",
                "sparkcache": repositories["sparkcache"][0].as_uri()}
        pins = pins_for(repositories, urls, sparkcache={"source_sha256": digest})
        profile = profile_with_git_sources(tmp_path, pins)
        result = build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache"))
    out = tmp_path / "out"
    labels = json.loads(result.image.config_bytes)["config"]["Labels"]
    vllm = pins["vllm_source"]
    assert labels["org.sparkflake.input.vllm-source"] == f"git:{vllm.urls[0]}@{vllm.rev}:tree:{vllm.tree}"
    overlay = json.loads((out / "source-overlay.json").read_text())
    assert {(e["path"], e["operation"]) for e in overlay["entries"]} >= {("vllm/ckv_gather.py", "add")}
    assert overlay["source"] == {"kind": "git", "name": "vllm-git", "uri": vllm.urls[0], "rev": vllm.rev,
                                 "tree": vllm.tree, "nar_hash": None, "version": "0.1.0"}
    packages = {p["package"]: p for p in json.loads((out / "source-packages.json").read_text())["packages"]}
    assert list(packages) == ["vllm", "b12x", "sparkcache"]
    assert "vllm/ckv_gather.py" in packages["vllm"]["files_from_source"]
    assert "setup.py" not in json.dumps(packages["vllm"])
    assert any(path.endswith(".so") for path in packages["vllm"]["files_from_wheel"])
    assert packages["b12x"]["files_from_source"] == ["b12x/__init__.py", "b12x/kernels.py"]
    assert packages["b12x"]["wheel"]["filename"].startswith("b12x-0.1.0-")
    assert packages["sparkcache"]["source"]["package_dir"] == "src/sparkcache"
    assert packages["sparkcache"]["source"]["source_sha256"] == digest
    assert packages["sparkcache"]["files_from_source"] == ["sparkcache/__init__.py", "sparkcache/schema.py"]
    chain = {link.link: link for link in result.chain}
    assert "3 git checkouts, every tree id equal to the lock" in chain["inputs"].detail
    assert "b12x: 2 files from" in chain["source-packages"].detail
    receipt = json.loads((out / "receipt.json").read_text())
    resolved = {d["name"]: d for d in receipt["predicate"]["buildDefinition"]["resolvedDependencies"]}
    counts = {e["package"]: (e["filesFromSource"], e["filesFromWheel"], e["source"]["rev"])
              for e in receipt["predicate"]["buildDefinition"]["internalParameters"]["sourcePackages"]}
    assert counts["b12x"] == (2, 0, pins["b12x_source"].rev)
    assert counts["vllm"][0] == len(packages["vllm"]["files_from_source"]) and counts["vllm"][1] >= 1
    assert resolved["b12x-git"]["digest"] == {"gitCommit": pins["b12x_source"].rev, "gitTree": pins["b12x_source"].tree}
    assert main(["receipt", "verify", str(out / "receipt.json"), str(out / "oci")]) == 0
    claims = {c["name"]: c for c in receipt["predicate"]["buildDefinition"]["internalParameters"]["upstreamClaims"]}
    assert claims["vllm-source"]["status"] == "verified" and claims["vllm-source"]["verifiedBy"] == "vllm-git"
    assert claims["other-commit"]["status"] == "unverified"
    rebuilt = build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "again", cache_root=tmp_path / "cache",
                                         offline=True))
    assert rebuilt.image.manifest_digest == result.image.manifest_digest  # from the cache, offline: same image


def test_a_wrong_tree_or_source_digest_refuses_the_build(tmp_path: Path, repositories) -> None:
    urls = {key: served.as_uri() for key, (served, _) in repositories.items()}
    other_tree = repositories["vllm"][1][0][1]
    profile = profile_with_git_sources(tmp_path / "a", pins_for(repositories, urls, b12x={"tree": other_tree}))
    with pytest.raises(CheckFailed, match=f"names tree {repositories['b12x'][1][0][1]}, the lock says tree {other_tree}"):
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache"))
    assert not (tmp_path / "out").exists() and not GitCache(tmp_path / "cache").tree_path(other_tree).exists()
    profile = profile_with_git_sources(tmp_path / "b", pins_for(repositories, urls, sparkcache={"source_sha256": "0" * 64}))
    with pytest.raises(CheckFailed, match="source digest \\(sparkcache-source-tree/v1\\) of sparkcache/ is"):
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache"))
    assert not (tmp_path / "out").exists()


def test_overlaid_python_needing_native_code_the_wheel_lacks_is_refused(tmp_path: Path) -> None:
    fork = make_repository(tmp_path / "fork", [vllm_files(tmp_path, {
        "vllm/gather.py": b"import torch\nimport vllm._b12x_C\nimport vllm.gather_helpers\ntorch.ops._C.b12x_ckv_gather(x)\n",
        "vllm/gather_helpers.py": b"",
    })])
    others = {"b12x": make_repository(tmp_path / "b12x", [B12X]), "sparkcache": make_repository(tmp_path / "sc", [SPARKCACHE])}
    repositories = {"vllm": fork, **others}
    profile = profile_with_git_sources(tmp_path, pins_for(repositories, {k: v[0].as_uri() for k, v in repositories.items()}))
    with pytest.raises(CheckFailed) as error:
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache"))
    assert error.value.check_id == "native-interface"
    assert "vllm/gather.py calls torch.ops._C.b12x_ckv_gather, which no retained extension registers" in str(error.value)
    assert "vllm/gather.py imports vllm._b12x_C, which no file of the image provides" in str(error.value)
    assert "vllm.gather_helpers" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_unreachable_git_inputs_fail_at_fetch_naming_each(tmp_path: Path, repositories, capsys) -> None:
    urls = {key: f"{UNREACHABLE}/{key}.git" for key in repositories}
    profile = profile_with_git_sources(tmp_path, pins_for(repositories, urls))
    cache = tmp_path / "cache"
    assert main(["build", str(profile), "-o", str(tmp_path / "out"), "--cache", str(cache)]) == 2
    message = capsys.readouterr().err
    assert "3 git input(s) missing:" in message
    for name in ("vllm-git", "b12x-git", "sparkcache-git"):
        assert f"{name}: git commit " in message and f"--git-mirror {name}=URL" in message
    assert f"tried {UNREACHABLE}/b12x.git: " in message
    assert not (tmp_path / "out").exists() and not (cache / "git").exists()
    mirrors = [f"--git-mirror={pin}={repositories[key][0].as_uri()}" for key, pin in
               (("vllm", "vllm-git"), ("b12x", "b12x-git"), ("sparkcache", "sparkcache-git"))]
    assert main(["build", str(profile), "-o", str(tmp_path / "out"), "--cache", str(cache), *mirrors]) == 0
    capsys.readouterr()
    with pytest.raises(InputError, match="not a git source"):
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "o2", cache_root=cache,
                                   git_mirrors={"torch": ("file:///x",)}))
