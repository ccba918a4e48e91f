"""The Nix route (nix/image.nix with the offline nixpkgs stand-in, Nix's build sandbox on) and
the CLI route give the fixture image the same digests, equal to
profiles/fixture/expected-digests.json, although the fixture's deb carries setgid/setuid
entries and other owners (which the sandbox refuses on disk) and the Nix route runs on
Debian 13's Python 3.13 while the CLI runs on Debian 12's 3.11; a rebuild gives the same
$out, the layout alone (an archive exported from it is the CLI output's, byte for byte); the image apps load into podman and push to a
registry digest-preserving; the real profiles' derivations evaluate over fixed-output
fetches of the lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.oci import PodmanStore, RegistryServer, podman_store, registry_server  # noqa: F401 - pytest fixtures

from sparkflake.cli import main as cli_main
from sparkflake.workflows.build import BuildRequest, build_profile

REPO = Path(__file__).resolve().parents[3]
EXPECTED = json.loads((REPO / "profiles" / "fixture" / "expected-digests.json").read_text())
DEBIAN13_PYTHON = Path("/opt/sparkflake/debian13/usr/bin/python3.13")

EXPRESSION = """
let
  repo = {repo};
  lib = import (repo + "/nix/offline-nixpkgs/lib.nix");
  pkgs = import (repo + "/nix/offline-nixpkgs/pkgs.nix") {{ inherit lib; system = builtins.currentSystem; }};
  sparkflake = pkgs.callPackage (repo + "/nix/package.nix") {{ }};
  fetchLocked = import (repo + "/nix/fetch-locked.nix");
  src = builtins.path {{
    path = repo;
    name = "source";
    filter = path: type: !(builtins.elem (baseNameOf path) [
      ".venv" ".git" "result" "out" ".hypothesis" "__pycache__" ".pytest_cache" ".ruff_cache"
    ]);
  }};
in
import (repo + "/nix/image.nix") {{ inherit pkgs sparkflake fetchLocked src; }} // {{ inherit sparkflake; }}
"""

# The sandbox as a Nix user has it: a build may not set setuid/setgid bits, and sees only its
# inputs and these host paths (the stand-in's host tools).
SANDBOX_OPTIONS = [
    "--option", "substituters", "",
    "--option", "sandbox", "true",
    "--option", "extra-sandbox-paths", "/bin /usr /lib /lib64 /opt/sparkflake",
]
NIX_OPTIONS = ["--option", "substituters", "", "--option", "sandbox", "false"]


@pytest.fixture(scope="module")
def expression(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nix") / "images.nix"
    path.write_text(EXPRESSION.format(repo=REPO))
    return path


def nix_build(expression: Path, attribute: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nix-build", str(expression), "-A", attribute, "--no-out-link", *options],
        capture_output=True, text=True, check=False,
    )


def built(expression: Path, attribute: str, *options: str) -> Path:
    completed = nix_build(expression, attribute, *(options or NIX_OPTIONS))
    assert completed.returncode == 0, completed.stderr[-5000:]
    return Path(completed.stdout.strip().splitlines()[-1])


def nix_run(app: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "bin/nix-offline"), "run", f".#{app}", "--", *arguments],
                          capture_output=True, text=True, check=False, cwd=REPO)


def without_builder(receipt: dict) -> dict:
    builder = receipt["predicate"]["runDetails"].pop("builder")
    assert builder["version"]["sparkflake"] == "0.1.0"
    return receipt


# slow: it needs the Nix store, which the flake's own pytest check (a Nix build) has not.
@pytest.mark.slow
def test_nix_build_in_the_sandbox_and_cli_build_same_digests(expression: Path, tmp_path: Path) -> None:
    image = built(expression, "fixture-image", *SANDBOX_OPTIONS)
    nix_digests = json.loads((image / "digests.json").read_text())
    cli = build_profile(
        BuildRequest(profile=str(REPO / "profiles" / "fixture"), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True)
    )
    assert nix_digests["manifest"] == cli.image.manifest_digest == EXPECTED["manifest"]
    assert nix_digests["config"] == cli.image.config_digest == EXPECTED["config"]
    assert [layer["diff_id"] for layer in nix_digests["layers"]] == [layer["diff_id"] for layer in EXPECTED["layers"]]
    nix_receipt = json.loads((image / "receipt.json").read_text())
    cli_receipt = json.loads((tmp_path / "out" / "receipt.json").read_text())
    # the builder identity is the one difference: the interpreters differ, the bytes do not
    assert nix_receipt["predicate"]["runDetails"]["builder"]["version"]["python"].startswith("CPython 3.13.")
    assert cli_receipt["predicate"]["runDetails"]["builder"]["version"]["python"].startswith("CPython 3.11.")
    assert without_builder(nix_receipt) == without_builder(cli_receipt)
    # the layout alone, as the CLI writes by default; the archive exported from the store
    # path (read-only: written elsewhere) is the CLI output's, byte for byte
    assert not [path for path in image.iterdir() if path.name.endswith(".tar")]
    for out, archive in ((image, tmp_path / "nix.tar"), (tmp_path / "out", tmp_path / "cli.tar")):
        assert cli_main(["export", str(out), "--format", "docker-archive", "-o", str(archive)]) == 0
    assert (tmp_path / "nix.tar").read_bytes() == (tmp_path / "cli.tar").read_bytes()
    assert not (image / "build.json").exists()
    checked = nix_build(expression, "fixture-digests", *NIX_OPTIONS)
    assert checked.returncode == 0, checked.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("attribute", ["fixture-image", "fixture-env", "fixture-os-base"])
def test_a_rebuild_gives_the_same_output(expression: Path, attribute: str) -> None:
    # the first build in the sandbox (its build directory is /build), the rebuild outside it
    first = built(expression, attribute, *SANDBOX_OPTIONS)
    # `nix-build --check` is `nix build --rebuild`: build again, compare with the stored output
    rebuilt = nix_build(expression, attribute, "--check", *NIX_OPTIONS)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "may not be deterministic" not in rebuilt.stderr
    if attribute != "fixture-image":
        tree = "python" if attribute == "fixture-env" else "base"
        manifest = json.loads((first / f"{tree}-manifest.json").read_text())
        assert "seconds" not in manifest[tree] and "path" not in manifest[tree]


@pytest.mark.slow
def test_the_cli_on_debian_13s_python_3_13_gives_the_same_digests(expression: Path, tmp_path: Path) -> None:
    # The package Nix installs on the Debian 13 root's interpreter (bin/bootstrap makes the
    # root once per machine), run as a CLI outside Nix; this process is Debian 12's 3.11.
    version = subprocess.run([str(DEBIAN13_PYTHON), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("Python 3.13.")
    assert (Path("/opt/sparkflake/debian13/etc/debian_version").read_text().startswith("13."))
    sparkflake = built(expression, "sparkflake")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "SOURCE_DATE_EPOCH": "1"}
    completed = subprocess.run(
        [str(sparkflake / "bin/sparkflake"), "build", str(REPO / "profiles/fixture"), "--offline", "-o", str(tmp_path / "out")],
        capture_output=True, text=True, check=False, env=env,
    )
    assert completed.returncode == 0, completed.stderr
    on_313 = json.loads((tmp_path / "out/digests.json").read_text())
    assert on_313["manifest"] == EXPECTED["manifest"]
    assert on_313["config"] == EXPECTED["config"]
    assert [layer["digest"] for layer in on_313["layers"]] == [layer["digest"] for layer in EXPECTED["layers"]]


@pytest.mark.slow
def test_the_image_apps_load_into_podman_and_push_digest_preserving(
    tmp_path: Path, podman_store: PodmanStore, registry_server: RegistryServer  # noqa: F811
) -> None:
    # as a Nix user runs them: `nix run .#<image>-load-into-podman -- …`
    # a private libpod tmpdir too: /run/libpod is shared with every other podman on the machine
    private = [*podman_store.argv()[1:], f"--tmpdir={podman_store.runroot}/libpod"]
    engine_args = [f"--engine-arg={argument}" for argument in private]
    loaded = nix_run("fixture-image-load-into-podman", *engine_args, "--tag", "localhost/fixture:nix", "--json")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["image_id"] == EXPECTED["config"]
    assert podman_store.image_id("localhost/fixture:nix") == EXPECTED["config"]
    target = f"{registry_server.host}/sparkflake/fixture:nix"
    pushed = nix_run("fixture-image-copy-to-registry", target, "--insecure", "--record", str(tmp_path / "publish.json"))
    assert pushed.returncode == 0, pushed.stderr
    assert registry_server.head_manifest("sparkflake/fixture", "nix")["Docker-Content-Digest"] == EXPECTED["manifest"]
    assert json.loads((tmp_path / "publish.json").read_text())["manifest_digest"] == EXPECTED["manifest"]


@pytest.mark.slow
def test_real_profile_derivations_evaluate(expression: Path) -> None:
    attributes = ["glm53-dflash7", "glm53-mtp5", "glm53-dflash7-env", "glm53-mtp5-env", "glm53-dflash7-os-base"]
    arguments = [argument for attribute in attributes for argument in ("-A", attribute)]
    derivations = subprocess.run(
        ["nix-instantiate", str(expression), *arguments, *NIX_OPTIONS], check=True, capture_output=True, text=True
    ).stdout.split()
    assert len(derivations) == len(attributes)
    shown = subprocess.run(["nix-store", "--query", "--references", derivations[0]], check=True, capture_output=True, text=True).stdout
    assert "sparkflake-inputs-glm53-dflash7.drv" in shown
    inputs = next(line for line in shown.splitlines() if line.endswith("sparkflake-inputs-glm53-dflash7.drv"))
    fetches = subprocess.run(["nix-store", "--query", "--references", inputs], check=True, capture_output=True, text=True).stdout.split()
    # one fixed-output fetch per locked file (wheels, the vllm sdist, debs)
    assert any("vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl" in line for line in fetches)
    assert any("vllm-0.33.0.tar.gz" in line for line in fetches)
    assert len([line for line in fetches if line.endswith(".drv")]) > 200
    # a deb with a live mirror and a snapshot URL is fetched trying both, in order
    deb = next(line for line in fetches if "libc6_" in line and line.endswith(".drv"))
    shown_deb = json.loads(subprocess.run(["nix", "--extra-experimental-features", "nix-command", "show-derivation", deb],
                                          check=True, capture_output=True, text=True).stdout)
    (environment,) = [value["env"] for value in shown_deb.values()]
    urls = environment["urls"].split()
    assert len(urls) == 2 and "snapshot.debian.org" in urls[1]


# network: the 100-odd Debian packages of the lock (about 30 MB) are fetched into the store.
@pytest.mark.slow
@pytest.mark.network
def test_glm53_os_base_built_in_the_sandbox_gives_the_expected_os_base_layer(tmp_path: Path) -> None:
    # base-files' /var/local is 2775: before, the sandbox refused it ("data.tar.xz is damaged").
    sandbox = ["--option", "sandbox", "true", "--option", "extra-sandbox-paths", "/bin /usr /lib /lib64 /opt/sparkflake"]
    completed = subprocess.run(
        [str(REPO / "bin/nix-offline"), "build", "--no-link", "--json", ".#glm53-dflash7-os-base", *sandbox],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-5000:]
    (result,) = json.loads(completed.stdout)
    base = Path(result["outputs"]["out"]) / "base"
    manifest = json.loads((base.parent / "base-manifest.json").read_text())
    special = {entry["path"]: entry for entry in manifest["base"]["owners_and_special_modes"]}
    assert special["/var/local"]["mode"] == "2775" and special["/var/local"]["group"] == "staff"
    # the same tree as a layer: the os-base layer of profiles/glm53-dflash7/expected-digests.json
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"platform": "linux/arm64", "compression": "gzip", "tag": "v1",
                                "layers": [{"tree": str(base)}], "config": {"Entrypoint": ["/bin/true"]}}))
    layer = subprocess.run([sys.executable, "-m", "sparkflake.cli", "image", "build", str(spec), "-o", str(tmp_path / "out"), "--no-cache",
                            "--cache", str(tmp_path / "blob-store")],  # never the user's store
                           capture_output=True, text=True, check=False, env={**os.environ, "SOURCE_DATE_EPOCH": "1"})
    assert layer.returncode == 0, layer.stderr
    built_layer = json.loads((tmp_path / "out/digests.json").read_text())["layers"][0]
    expected = json.loads((REPO / "profiles/glm53-dflash7/expected-digests.json").read_text())["layers"][0]
    assert (built_layer["diff_id"], built_layer["digest"]) == (expected["diff_id"], expected["digest"])
    rebuilt = subprocess.run(
        [str(REPO / "bin/nix-offline"), "build", "--no-link", "--rebuild", ".#glm53-dflash7-os-base"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
