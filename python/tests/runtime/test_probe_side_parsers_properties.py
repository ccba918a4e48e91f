"""The runtime check's readers of what the image says (run on the host Python as plain
functions; the sandbox and vLLM are stood in for):

- ``bytecode.interpreter_facts``: the facts line the image's interpreter prints (after any
  other output) reads back as the facts it holds; what the host's own interpreter prints
  for ``FACTS_PROGRAM`` is the host's facts; any other output is a reason (a string), never
  a traceback;
- ``check.config_env``: an image config's ``Env`` as the OCI image spec has it
  (``VARNAME=VARVALUE``, split at the first ``=``, a later entry for a name winning);
- ``in_image/probe_cases._parse``: vLLM's serve parser's verdict on a case's arguments, as
  the parser gives it (a stand-in argparse parser here): the parsed namespace with
  ``model`` taken from the positional ``model_tag``, or the parser's message (at most 2000
  characters) or the validation's error text (at most 4000), never an exception;

(``env_evidence.find_names``: test_env_evidence_properties.py.)

An ``Env`` that is no array (``"Env": 5``) is passed over by ``config_env`` (the image
reader refuses it: tests/oci/test_oci_strict_reading.py), and an ``optimize`` that is no
integer (``Infinity``, ``1.5``, ``true``) or a ``path`` that is no array of strings is a
reason from ``interpreter_facts``; they raised TypeError and OverflowError before (finding
H3, /work/notes/hypothesis-findings-3.md)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import subprocess
import sys
import sysconfig
import tempfile
import types
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.runtime import bytecode, sandbox
from sparkflake.runtime.check import config_env
from sparkflake.runtime.probe_runner import PROBE_DIRECTORY
from sparkflake.runtime.sandbox import SandboxRun

pytestmark = pytest.mark.runtime

# ------------------------------------------------------------------ interpreter_facts


def _facts_from(output: bytes, returncode: int = 0):
    """``interpreter_facts`` with the sandboxed run standing in: it writes ``output``."""

    def run(command, *, timeout, stderr_path, **_):
        stderr_path.write_bytes(output)
        return SandboxRun(returncode, output[-200:].decode(errors="replace"), 0.0)

    with tempfile.TemporaryDirectory() as scratch, \
         mock.patch.object(sandbox, "sandbox_argv", lambda root, command, env, binds: command), \
         mock.patch.object(sandbox, "run_sandboxed", run):
        return bytecode.interpreter_facts(Path("/"), "/usr/bin/python3", {}, Path(scratch))


_facts = st.builds(bytecode.InterpreterFacts, st.text("0123456789abcdef", min_size=8, max_size=8),
                   st.from_regex(r"[a-z]{1,8}-[0-9]{2,3}", fullmatch=True), st.integers(0, 2), st.booleans(),
                   st.lists(st.text(max_size=20), max_size=4).map(tuple))
_log = st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30), max_size=3)


@given(_facts, _log)
def test_the_facts_line_reads_back_as_printed(facts, before) -> None:
    line = json.dumps({"magic": facts.magic, "cache_tag": facts.cache_tag, "optimize": facts.optimize,
                       "dont_write_bytecode": facts.dont_write_bytecode, "path": list(facts.path)})
    output = "".join(f"{text}\n" for text in before) + line + "\n"
    assert _facts_from(output.encode()) == facts


def test_the_host_interpreters_facts_are_its_own() -> None:
    printed = subprocess.run([sys.executable, "-c", bytecode.FACTS_PROGRAM], capture_output=True, check=True).stdout
    found = _facts_from(printed)
    assert isinstance(found, bytecode.InterpreterFacts)
    assert (found.magic, found.cache_tag, found.optimize, found.dont_write_bytecode) == (
        importlib.util.MAGIC_NUMBER.hex(), sys.implementation.cache_tag, sys.flags.optimize, sys.dont_write_bytecode)
    assert sysconfig.get_paths()["stdlib"] in found.path  # the child's sys.path (not this one's: pytest adds to it)
    assert bytecode.host_can_compile(found) is None


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_facts_like = st.fixed_dictionaries({}, optional={"magic": _json, "cache_tag": _json, "optimize": _json,
                                                  "dont_write_bytecode": _json, "path": _json})


@given(st.binary(max_size=200) | (_facts_like | _json).map(lambda document: json.dumps(document).encode()),
       st.sampled_from([0, 0, 1, None]))
def test_any_other_output_is_a_reason_not_a_traceback(output, returncode) -> None:
    found = _facts_from(output, returncode)
    if isinstance(found, str):
        assert found
        return
    assert returncode == 0 and isinstance(found, bytecode.InterpreterFacts)
    assert isinstance(found.optimize, int) and all(isinstance(item, str) for item in found.path)


_json_with_infinities = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                                     lambda inner: st.lists(inner, max_size=3)
                                     | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                                     max_leaves=6)


@example("optimize", float("inf"))  # H3: OverflowError before
@example("optimize", float("-inf"))
@example("optimize", 1.5)
@example("path", "/usr/lib")
@given(st.sampled_from(["optimize", "path"]), _json_with_infinities)
def test_any_optimize_or_path_value_is_facts_or_a_reason(key, value) -> None:
    facts = {"magic": "a70d0d0a", "cache_tag": "cpython-311", "optimize": 0, "dont_write_bytecode": False, "path": []}
    found = _facts_from((json.dumps({**facts, key: value}) + "\n").encode())  # NaN and Infinity as Python prints them
    if isinstance(found, str):
        assert found.startswith("/usr/bin/python3 printed no interpreter facts (")
        return
    assert type(found.optimize) is int and found.optimize == ({**facts, key: value})["optimize"]
    assert all(isinstance(item, str) for item in found.path) and list(found.path) == ({**facts, key: value})["path"]


# ------------------------------------------------------------------------- config_env

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_env_values = st.text(max_size=12)


@given(st.lists(st.tuples(_names, _env_values) | st.text(max_size=8) | _json, max_size=8))
def test_an_images_env_is_read_as_the_image_spec_says(entries) -> None:
    env_list = [f"{item[0]}={item[1]}" if isinstance(item, tuple) else item for item in entries]
    expected: dict[str, str] = {}
    for item in env_list:
        if isinstance(item, str) and "=" in item:
            name, value = item.split("=", 1)
            expected[name] = value
    reader = types.SimpleNamespace(config={"config": {"Env": env_list}})
    assert config_env(reader) == expected
    assert config_env(types.SimpleNamespace(config={})) == {}
    assert config_env(types.SimpleNamespace(config={"config": None})) == {}


@example(5)  # H3: TypeError before
@example("A=1")
@example({"A": "1"})
@given(_json)
def test_an_env_of_any_other_shape_is_passed_over(env) -> None:
    found = config_env(types.SimpleNamespace(config={"config": {"Env": env}}))
    assert all(isinstance(key, str) and isinstance(value, str) for key, value in found.items())
    if not isinstance(env, list):  # no array: no entries (not a string's characters, not an object's keys)
        assert found == {}


# ------------------------------------------------------------------------ probe _parse

sys.path.insert(0, str(PROBE_DIRECTORY))
import probe_cases  # noqa: E402  (the probe's modules import one another by file name)


class _ServeSubcommand:
    """vLLM's ``serve`` subcommand's shape: a positional model_tag, --model, a few typed
    options, and a validate that refuses what argparse cannot."""

    def subparser_init(self, subparsers):
        parser = subparsers.add_parser("serve")
        parser.add_argument("model_tag", nargs="?")
        parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
        parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
        parser.add_argument("--max-model-len", type=int)
        parser.add_argument("--enforce-eager", action="store_true")
        parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "bfloat16"], default="auto")
        return parser

    def validate(self, args):
        if args.tensor_parallel_size is not None and args.tensor_parallel_size <= 0:
            raise ValueError(f"tensor_parallel_size must be positive, got {args.tensor_parallel_size}")
        if args.max_model_len == 7:
            raise KeyError("x" * 5000)

    def cmd(self, args):  # pragma: no cover - never dispatched here
        raise AssertionError


def _stand_in_vllm() -> dict[str, types.ModuleType]:
    serve = types.ModuleType("vllm.entrypoints.cli.serve")
    serve.ServeSubcommand = _ServeSubcommand
    utils = types.ModuleType("vllm.utils.argparse_utils")
    utils.FlexibleArgumentParser = argparse.ArgumentParser
    modules = {name: types.ModuleType(name) for name in ("vllm", "vllm.entrypoints", "vllm.entrypoints.cli", "vllm.utils")}
    return {**modules, "vllm.entrypoints.cli.serve": serve, "vllm.utils.argparse_utils": utils}


def _reference(serve_args: list[str]):
    parser = argparse.ArgumentParser(prog="vllm")
    command = _ServeSubcommand()
    command.subparser_init(parser.add_subparsers(required=False, dest="subparser")).set_defaults(
        dispatch_function=command.cmd)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(["serve", *serve_args])
    except SystemExit:
        return ("refused", stderr.getvalue().strip()[-2000:] or "the parser exited")
    try:
        command.validate(args)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"[:4000]
    if args.model_tag is not None:
        args.model = args.model_tag
    return args


_words = st.sampled_from(["--model", "--tensor-parallel-size", "-tp", "--max-model-len", "--enforce-eager",
                          "--kv-cache-dtype", "fp8", "bf16", "0", "-1", "7", "2", "zai-org/GLM-5.3", "--unknown",
                          "--", "-", "=", "--model=x", "x" * 2500]) | st.text(max_size=6)


@given(st.lists(_words, max_size=6))
def test_the_serve_parsers_verdict_as_the_parser_gives_it(serve_args) -> None:
    with mock.patch.dict(sys.modules, _stand_in_vllm()):
        args, problem = probe_cases._parse(list(serve_args))
    expected = _reference(list(serve_args))
    if isinstance(expected, argparse.Namespace):
        parsed, wanted = vars(args), vars(expected)
        assert problem is None and parsed.pop("dispatch_function").__func__ is wanted.pop("dispatch_function").__func__
        assert parsed == wanted
        return
    assert args is None and isinstance(problem, str) and problem
    if isinstance(expected, tuple):  # the parser's own message, its last 2000 characters
        assert problem == expected[1] and len(problem) <= 2000
    else:
        assert problem == expected and len(problem) <= 4000
