"""The docs are tested: every runnable block of README.md and docs/*.md runs against a
fixture with its documented output checked, and every command's synopsis is checked
against its argparse parser (doc_blocks.py says what the blocks look like).

Fixtures: ``checkout`` — a working directory whose profiles/ and docs/ are this checkout's;
``operator`` — the same, plus an image our engine built (the argv-echo image of the launch
tests, with glm53-dflash7's labels) in ``out/glm53-dflash7/`` and loaded into a private
podman store, synthetic target and draft checkpoints, and a runtime.env made from
profiles/glm53-dflash7/runtime.env.example the way the operator guide says (site values
set, the GPU-free rehearsal settings added). The example's site paths in the docs stand
for the fixture's paths.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.doc_blocks import (
    REPO,
    RunnableBlock,
    documents,
    options_in,
    output_has,
    runnable_blocks,
    shown,
    synopsis_lines,
)
from fixtures.launch import DRAFT_FILES, real_contract, write_checkpoint, write_target_checkpoint
from fixtures.oci import free_port
from fixtures.podman import SANDBOX_ULIMITS, Podman, build_echo_image
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.cli import build_parser
from sparkflake.launch.example import SITE_EXAMPLES

FIXTURES = ("checkout", "operator")
BLOCKS = {path: runnable_blocks(path) for path in documents()}


def _checkout(base: Path) -> Path:
    work = base / "work"
    work.mkdir()
    for name in ("profiles", "docs"):
        (work / name).symlink_to(REPO / name)
    return work


def _bind_capabilities(work: Path, profile: str, image_id: str) -> None:
    """The stand-in (echo) image stands for the profile's real image: the checkout's copy of
    the profile carries the real image's capability manifest bound to the stand-in's config
    digest, as `sparkflake runtime check` would bind it (launch-rank refuses an image its
    manifest was not written for: image.capabilities)."""
    import dataclasses
    import shutil

    from sparkflake.runtime import capabilities as capability_file

    (work / "profiles").unlink()
    (work / "profiles").mkdir()
    for entry in (REPO / "profiles").iterdir():
        if entry.name != profile:
            (work / "profiles" / entry.name).symlink_to(entry)
    shutil.copytree(REPO / "profiles" / profile, work / "profiles" / profile, symlinks=True)
    manifest = work / "profiles" / profile / capability_file.FILE_NAME
    bound = dataclasses.replace(capability_file.load(manifest), config_digest=image_id)
    manifest.write_bytes(capability_file.dumps(bound))


@pytest.fixture(scope="module")
def operator_site(tmp_path_factory):
    base = tmp_path_factory.mktemp("docs-operator")
    podman = Podman(base)
    try:
        work = _checkout(base)
        out = work / "out" / "glm53-dflash7"
        out.parent.mkdir()
        image_id = build_echo_image(base, out, podman, real_contract("glm53-dflash7").image_labels)
        for archive in ("oci-archive.tar", "docker-archive.tar"):  # what `sparkflake build` writes: the layout alone
            (out / archive).unlink()
        _bind_capabilities(work, "glm53-dflash7", image_id)
        site = {
            "TARGET_MODEL_PATH": str(work / "models" / "target"),
            "DRAFT_MODEL_PATH": str(work / "models" / "draft"),
            "CACHE_ROOT": str(work / "rank-cache"),
            "CHECKPOINT_PINS": str(work / "checkpoint-pins.json"),
        }
        write_target_checkpoint(Path(site["TARGET_MODEL_PATH"]))
        write_checkpoint(Path(site["DRAFT_MODEL_PATH"]), DRAFT_FILES)
        yield {"base": base, "work": work, "podman": podman, "image_id": image_id, "site": site}
    finally:
        podman.cleanup()


def _runtime_env(work: Path, site: dict[str, str]) -> None:
    """runtime.env as the quick start makes it: the example with this host's site values,
    plus what a GPU-free rehearsal on this machine needs (the guide's last section)."""
    text = (REPO / "profiles" / "glm53-dflash7" / "runtime.env.example").read_text()
    values = {**site, "NODE_ADDRESS": "127.0.0.1", "MASTER_ADDRESS": "127.0.0.1", "SOCKET_IFNAME": "lo"}
    for key, value in values.items():
        text, count = re.subn(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
        assert count == 1, key
    text += (f"GPU_DEVICES=none\nNCCL_NET=Socket\nCONTAINER_ULIMITS={SANDBOX_ULIMITS}\n"
             f"API_PORT={free_port()}\nMASTER_PORT={free_port()}\n")
    (work / "runtime.env").write_text(text)


def _documents_with(fixture: str) -> list[Path]:
    return [path for path, blocks in BLOCKS.items() if any(block.fixture == fixture for block in blocks)]


def _marks(path: Path) -> list[pytest.MarkDecorator]:
    # a block that builds with Nix (the CLI package, offline) takes minutes the first time
    uses_nix = any(command.text.startswith("./bin/nix-offline") for block in BLOCKS[path] for command in block.commands)
    return [pytest.mark.slow] if uses_nix else []


def _params(fixture: str) -> list:
    return [pytest.param(path, id=shown(path), marks=_marks(path)) for path in _documents_with(fixture)]


class Runner:
    """Runs a block's commands in ``cwd``: argv lists, never a shell."""

    def __init__(self, cwd: Path, substitutions: dict[str, str], environ: dict[str, str],
                 podman_args: list[str] | None = None) -> None:
        self.cwd = cwd
        # longest first: a path that extends another is replaced whole
        self.substitutions = dict(sorted(substitutions.items(), key=lambda item: -len(item[0])))
        self.environ = environ
        self.podman_args = podman_args
        self.launched = False

    def substitute(self, text: str) -> str:
        for placeholder, value in self.substitutions.items():
            text = text.replace(placeholder, value)
        return text

    def argv(self, text: str, where: str) -> tuple[list[str], dict[str, str]]:
        words = shlex.split(self.substitute(text))
        environ = dict(self.environ)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            key, value = words.pop(0).split("=", 1)
            environ[key] = value
        program, arguments = words[0], words[1:]
        if program in ("sparkflake", "./bin/sparkflake"):
            if arguments[:1] == ["launch-rank"] and "--dry-run" not in arguments:
                self.launched = True
            if program == "./bin/sparkflake":  # the checkout's wrapper itself (it may bootstrap)
                return [str(REPO / "bin" / "sparkflake"), *arguments], environ
            return [sys.executable, "-m", "sparkflake.cli", *arguments], environ
        if program == "./bin/nix-offline":
            return [str(REPO / "bin" / "nix-offline"), *arguments], environ
        if program == "podman" and self.podman_args is not None:
            return ["podman", *self.podman_args, *arguments], environ
        raise AssertionError(f"{where}: a runnable command is sparkflake, ./bin/sparkflake, ./bin/nix-offline "
                             f"or (operator fixture) podman, not {program}")

    def run_block(self, block: RunnableBlock) -> None:
        for command in block.commands:
            where = f"{block.document}:{command.line}"
            argv, environ = self.argv(command.text, where)
            completed = subprocess.run(argv, cwd=self.cwd, env=environ, capture_output=True, text=True,
                                       timeout=3600, check=False)
            output = completed.stdout + completed.stderr
            assert completed.returncode == command.exit_code, (
                f"{where}: `{command.text}` exited {completed.returncode}, the doc says {command.exit_code}\n{output[-6000:]}"
            )
            for fragment in command.expected:
                assert output_has(output, self.substitute(fragment)), (
                    f"{where}: `{command.text}` printed no {fragment!r}\n{output[-6000:]}"
                )


def _environ(base: Path) -> dict[str, str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("SPARKFLAKE_")}
    environ["XDG_CACHE_HOME"] = str(base / "xdg-cache")
    return environ


@pytest.mark.parametrize("path", _params("checkout"))
def test_checkout_blocks_run_as_documented(path: Path, tmp_path: Path) -> None:
    work = _checkout(tmp_path)
    runner = Runner(work, {}, _environ(tmp_path))
    for block in BLOCKS[path]:
        if block.fixture == "checkout":
            runner.run_block(block)


@pytest.mark.parametrize("path", _params("operator"))
def test_operator_blocks_run_as_documented(path: Path, operator_site) -> None:
    work, podman, site = operator_site["work"], operator_site["podman"], operator_site["site"]
    _runtime_env(work, site)
    # every document starts from an operator's state: pinned checkpoints, a fresh cache root
    pinned = [Runner(work, {}, _environ(operator_site["base"])).argv(
        f"sparkflake checkpoint pin {site[key]} --role {role} -o {site['CHECKPOINT_PINS']}", "setup")[0]
        for key, role in (("TARGET_MODEL_PATH", "target"), ("DRAFT_MODEL_PATH", "draft"))]
    for argv in pinned:
        assert subprocess.run(argv, cwd=work, capture_output=True, check=False).returncode == 0
    environ = _environ(operator_site["base"])
    environ["SPARKFLAKE_PODMAN_ARGS"] = shlex.join(podman.global_args)
    substitutions = {SITE_EXAMPLES[key]: value for key, value in site.items()}
    runner = Runner(work, substitutions, environ, podman.global_args)
    try:
        for block in BLOCKS[path]:
            if block.fixture == "operator":
                runner.run_block(block)
        if runner.launched:
            # the rank really started: the image's entrypoint got the launcher's serve arguments
            name = "sparkflake-glm53-dflash7-rank0"
            assert podman("wait", name).stdout.strip() == "0"
            logs = podman("logs", name).stdout
            assert "ARG /argv-echo" in logs and "ARG --speculative-config" in logs
            assert "ARG /models/target" in logs
    finally:
        podman("rm", "--all", "--force")
        shutil.rmtree(site["CACHE_ROOT"], ignore_errors=True)  # the rank's state, made by this test


def test_the_operator_guide_quick_start_is_runnable() -> None:
    """Pin, dry-run, start: the guide's quick start is the tested path."""
    guide = REPO / "docs" / "operator-guide.md"
    commands = [c.text for block in BLOCKS[guide] if block.fixture == "operator" for c in block.commands]
    assert any(c.startswith("sparkflake checkpoint pin") and "--role target" in c for c in commands)
    assert any(c.startswith("sparkflake checkpoint pin") and "--role draft" in c for c in commands)
    assert any(c.startswith("sparkflake launch-rank 0") and "--dry-run" in c for c in commands)
    assert any(c.startswith("sparkflake launch-rank 0") and "--dry-run" not in c for c in commands)
    assert BLOCKS[REPO / "README.md"], "README.md has no runnable block"


def test_every_runnable_block_names_a_known_fixture() -> None:
    for blocks in BLOCKS.values():
        for block in blocks:
            assert block.fixture in FIXTURES, f"{block.document}:{block.line}: unknown fixture {block.fixture}"
            assert block.commands, f"{block.document}:{block.line}: a runnable block without a command"


def test_readme_links_every_doc() -> None:
    readme = (REPO / "README.md").read_text()
    for path in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{path.name}" in readme, f"README.md does not link docs/{path.name}"


# ---- synopses -----------------------------------------------------------------------------

def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every leaf command (``hash path``, ``launch-rank``, …) and its parser, walking every
    subparser: a command another change adds is checked without touching this test."""
    groups = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not groups and path:
        yield " ".join(path), parser
    for group in groups:
        for name, child in group.choices.items():
            yield from _commands(child, (*path, name))


COMMANDS = dict(_commands(build_parser()))
SYNOPSES = [line for path in documents() for line in synopsis_lines(path)]


def _command_of(words: tuple[str, ...]) -> str | None:
    for length in range(min(len(words), 3), 0, -1):
        name = " ".join(words[:length])
        if name in COMMANDS:
            return name
    return None


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    return [tuple(action.option_strings) for action in parser._actions
            if action.option_strings and not isinstance(action, argparse._HelpAction)]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_a_complete_synopsis(command: str) -> None:
    lines = [line for line in SYNOPSES if _command_of(line.words) == command]
    assert lines, (f"`sparkflake {command}` has no synopsis in README.md or docs/: add a ``` block line "
                   f"`sparkflake {command} …` naming its options to the doc of its stage")
    documented = set().union(*(options_in(line.words[len(command.split()):]) for line in lines))
    missing = [strings[-1] for strings in _options(COMMANDS[command]) if not documented & set(strings)]
    places = ", ".join(f"{line.document}:{line.line}" for line in lines)
    assert not missing, f"the synopsis of `sparkflake {command}` ({places}) misses {', '.join(missing)}"


def test_synopses_name_only_options_the_parsers_have() -> None:
    wrong = []
    for line in SYNOPSES:
        command = _command_of(line.words)
        if command is None:
            wrong.append(f"{line.document}:{line.line}: no command `sparkflake {' '.join(line.words[:2])}`")
            continue
        known = {option for strings in _options(COMMANDS[command]) for option in strings}
        for option in sorted(options_in(line.words[len(command.split()):]) - known):
            wrong.append(f"{line.document}:{line.line}: `sparkflake {command}` has no option {option}")
    assert not wrong, "\n".join(wrong)


# ---- the block reader itself ----------------------------------------------------------------

_word = st.from_regex(r"[A-Za-z0-9_./:=-]{1,12}", fullmatch=True)


@given(st.lists(st.tuples(st.lists(_word, min_size=1, max_size=5),
                          st.lists(st.from_regex(r"[a-z][a-z ]{0,20}[a-z]", fullmatch=True), max_size=3),
                          st.integers(0, 3)), min_size=1, max_size=4))
def test_runnable_blocks_read_back_what_was_written(commands) -> None:
    from fixtures.doc_blocks import _commands as parse_commands

    body = ""
    for words, expected, exit_code in commands:
        body += "$ " + " ".join(words) + "\n" + "".join(f"{line}\n" for line in expected)
        body += f"(exit {exit_code})\n" if exit_code else ""
    parsed = parse_commands(body, 1, "doc.md")
    assert [(c.text, c.expected, c.exit_code) for c in parsed] == [
        (" ".join(words), expected, exit_code) for words, expected, exit_code in commands
    ]


@given(st.text(alphabet="ab\n", max_size=20), st.text(alphabet="ab", max_size=4), st.text(alphabet="ab", max_size=4))
def test_an_ellipsis_stands_for_any_text_on_its_line(output: str, head: str, tail: str) -> None:
    fragment = f"{head}…{tail}"
    expected = any(
        line.find(head) >= 0 and tail in line[line.find(head) + len(head):] for line in output.split("\n")
    )
    assert output_has(output, fragment) == expected
