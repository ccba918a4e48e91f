"""The image's bytecode, compiled on the host before its interpreter starts under emulation.

Under qemu-user the image's Python compiles every module it imports the first time
(tens of thousands of files for torch, vLLM and transformers), at a fraction of native
speed: most of a cold check. CPython's bytecode depends only on its magic number (one per
minor version: 3495 for 3.11), not on the machine, so when the host's interpreter has the
image interpreter's magic number and cache tag, the host compiles the image's own
sources natively, in parallel, into the bytecode cache the probe uses
(``PYTHONPYCACHEPREFIX``). Each file is what the image's interpreter would write itself:

- its place: ``PREFIX/<the source's in-image directory>/<stem>.<cache_tag>.pyc``
  (importlib._bootstrap_external.cache_from_source with sys.pycache_prefix set);
- its header: a timestamp pyc of the source's mtime and size as the sandbox shows them
  (the root is bind-mounted, so the same inode), checked at import like any other;
- its code objects: ``co_filename`` is the in-image path (py_compile's ``dfile``).

The image interpreter's facts are asked from the image interpreter itself (one short start
in the sandbox); if they differ from the host's, or the image sets an optimization level,
nothing is compiled here and the image compiles its own bytecode as before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError
from ..core.own_files import read_own_bytes
from ..core.worker_processes import worker_pool
from . import sandbox

# Printed by the image's interpreter: what decides where and how it caches bytecode.
FACTS_PROGRAM = (
    "import importlib.util, json, sys; print(json.dumps({'magic': importlib.util.MAGIC_NUMBER.hex(), "
    "'cache_tag': sys.implementation.cache_tag, 'optimize': sys.flags.optimize, "
    "'dont_write_bytecode': sys.dont_write_bytecode, 'path': sys.path}))"
)
BATCH = 200


@dataclass(frozen=True)
class InterpreterFacts:
    magic: str
    cache_tag: str
    optimize: int
    dont_write_bytecode: bool
    path: tuple[str, ...]


@dataclass(frozen=True)
class Precompiled:
    compiled: int  # files compiled on the host
    kept: int  # pyc already in the cache
    refused: int  # sources the compiler rejects (the image's interpreter would too)
    seconds: float
    skipped_reason: str | None  # why nothing was compiled, or None


def interpreter_facts(root: Path, python: str, env: Mapping[str, str], scratch: Path,
                      timeout: float = 600.0) -> InterpreterFacts | str:
    """The image interpreter's magic number, cache tag, optimization and sys.path, asked
    from itself in the sandbox; a string says why they could not be had."""
    out = scratch / "interpreter-facts.out"
    command = sandbox.sandbox_argv(root, [python, "-c", FACTS_PROGRAM], env, [])
    run = sandbox.run_sandboxed(command, timeout=timeout, stderr_path=out)
    try:
        # its first MiB, not the whole file (the image's interpreter may print without end
        # until the timeout), and only from the regular file run_sandboxed wrote there
        try:
            lines = read_own_bytes(out, "the image interpreter's facts", 1 << 20).decode(errors="replace").splitlines()
        except InputError as exc:
            return str(exc)
    finally:
        out.unlink(missing_ok=True)
    if run.returncode != 0 or not lines:
        return f"{python} -c ... exited {run.returncode}: {run.stderr_tail[-500:]}"
    try:
        facts = json.loads(lines[-1])
        optimize, path = facts["optimize"], facts["path"]
        if type(optimize) is not int:  # not Infinity (int() overflows), 1.5 or true taken as a level
            raise TypeError(f"optimize: expected an integer, got {optimize!r}"[:200])
        if not isinstance(path, list) or not all(isinstance(item, str) for item in path):
            raise TypeError("path: expected an array of strings")
        return InterpreterFacts(str(facts["magic"]), str(facts["cache_tag"]), optimize,
                                bool(facts["dont_write_bytecode"]), tuple(path))
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # RecursionError: a line nested too deeply
        return f"{python} printed no interpreter facts ({exc}): {lines[-1][:200]!r}"


def host_can_compile(facts: InterpreterFacts) -> str | None:
    """None if the host's interpreter writes the bytecode the image's would; else why not."""
    host_magic = importlib.util.MAGIC_NUMBER.hex()
    if facts.magic != host_magic:
        return f"the image's Python has bytecode magic {facts.magic}, the host's {host_magic}"
    if facts.cache_tag != sys.implementation.cache_tag:
        return f"the image's Python has cache tag {facts.cache_tag}, the host's {sys.implementation.cache_tag}"
    if facts.optimize:
        return f"the image's Python runs at optimization level {facts.optimize}"
    return None


def _sources(root: Path, search_path: Sequence[str]) -> Iterator[tuple[str, str, str]]:
    """(host path, in-image path, top-level name) of every regular .py file under the import
    path's directories, symlinks not followed (an entry through a symlink is left to the image)."""
    seen: set[str] = set()
    for entry in search_path:
        if not entry.startswith("/") or entry.endswith(".zip"):
            continue
        host_dir = root / entry.strip("/")
        # through a symlink the in-image path of a file is not its path under the root
        if not host_dir.is_dir() or os.path.realpath(host_dir) != os.path.join(os.path.realpath(root),
                                                                               entry.strip("/")):
            continue
        for dirpath, dirnames, filenames in os.walk(host_dir):
            dirnames.sort()
            inside_dir = "/" + os.path.relpath(dirpath, root)
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                inside = f"{inside_dir}/{name}"
                host = os.path.join(dirpath, name)
                if inside in seen or os.path.islink(host):
                    continue
                seen.add(inside)
                top = os.path.relpath(host, host_dir).split(os.sep)[0].removesuffix(".py")
                yield host, inside, "" if _is_standard_library(entry) else top


def _is_standard_library(entry: str) -> bool:
    return not entry.rstrip("/").endswith(("site-packages", "dist-packages", "dsl_packages"))


def _cache_file(pycache: Path, inside: str, cache_tag: str) -> Path:
    directory, name = inside.rsplit("/", 1)
    return pycache / directory.strip("/") / f"{name[:-3]}.{cache_tag}.pyc"


def _compile_batch(batch: Sequence[tuple[str, str, str]]) -> tuple[int, int]:
    # the image's interpreter warns about its own sources only when it compiles them itself
    warnings.simplefilter("ignore")
    compiled = refused = 0
    for host, inside, cfile in batch:
        try:
            py_compile.compile(host, cfile=cfile, dfile=inside, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            compiled += 1
        except (py_compile.PyCompileError, SyntaxError, ValueError, OSError):
            refused += 1
    return compiled, refused


def precompile(root: Path, pycache: Path, facts: InterpreterFacts, *, workers: int | None = None,
               first: Sequence[str] = ()) -> Precompiled:
    """Compile every image source under ``facts.path`` whose pyc is not in ``pycache`` yet:
    the standard library first, then the top-level packages ``first`` names in that order,
    then the rest (an interpreter importing while this runs finds most pycs written before
    it needs them; one that is not it compiles itself, as without this)."""
    import time

    started = time.monotonic()
    reason = host_can_compile(facts)
    if reason is not None:
        return Precompiled(0, 0, 0, 0.0, reason)
    rank = {name: index for index, name in enumerate(first)}
    to_compile, kept = [], 0
    for host, inside, top in _sources(root, facts.path):
        cfile = _cache_file(pycache, inside, facts.cache_tag)
        if cfile.exists():
            kept += 1
        else:
            to_compile.append((-1 if top == "" else rank.get(top, len(rank)), host, inside, str(cfile)))
    to_compile.sort(key=lambda item: item[0])  # stable: the walk's order within a group
    compiled = refused = 0
    batches = [[item[1:] for item in to_compile[i:i + BATCH]] for i in range(0, len(to_compile), BATCH)]
    if batches:
        with worker_pool(workers or os.cpu_count() or 1) as pool:
            for done, bad in pool.map(_compile_batch, batches):
                compiled += done
                refused += bad
    return Precompiled(compiled, kept, refused, round(time.monotonic() - started, 3), None)
