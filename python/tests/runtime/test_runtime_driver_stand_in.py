"""The driver stand-in (runtime.driver_stand_in): the driver symbols read from the image's
extensions with the cross binutils, and a libcuda.so.1 for arm64 built with Debian's cross
compiler that exports exactly those, the same bytes each time."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.runtime.driver_stand_in import (
    SONAME,
    build_stand_in,
    declared_functions,
    driver_imports,
    stand_in_source,
)

GCC, READELF = "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-readelf"
SITE = "opt/venv/lib/python3.11/site-packages"


def _compile(source: str, out: Path, *extra: str) -> None:
    c_file = out.with_suffix(".c")
    c_file.write_text(source)
    subprocess.run([GCC, "-shared", "-fPIC", "-nostdlib", "-o", str(out), str(c_file), *extra], check=True)


def _exported(library: Path) -> set[str]:
    text = subprocess.run([READELF, "-W", "--dyn-syms", str(library)], capture_output=True, check=True, text=True)
    return {line.split()[-1] for line in text.stdout.splitlines()
            if " FUNC " in line and " GLOBAL " in line and " UND " not in line}


def test_the_stand_in_exports_what_the_image_binds_and_is_reproducible(tmp_path):
    # a driver to link against, then an "extension" of the image that binds two of its
    # functions and a cudart-style one that is not the driver's
    linked = tmp_path / "link"
    linked.mkdir()
    _compile("int cuInit(void){return 0;}\nint cuMemMap(void){return 0;}\nint cuNotBound(void){return 0;}\n",
             linked / SONAME, "-Wl,-soname," + SONAME)
    root = tmp_path / "root"
    (root / SITE / "pkg").mkdir(parents=True)
    (root / SITE / "other").mkdir(parents=True)
    _compile("extern int cuInit(void); extern int cuMemMap(void); extern int cudaFree(void);\n"
             "int use(void){return cuInit()+cuMemMap()+cudaFree();}\n",
             root / SITE / "pkg" / "_ext.abi3.so", f"-L{linked}", "-l:" + SONAME, "-Wl,--unresolved-symbols=ignore-all")
    # a library that does not link libcuda.so.1 binds nothing of it, whatever it names
    _compile("extern int cuGetProcAddress(void); int f(void){return cuGetProcAddress();}\n",
             root / SITE / "other" / "libx.so", "-Wl,--unresolved-symbols=ignore-all")
    first = build_stand_in(root, "arm64", tmp_path / "scratch-a")
    assert first.problem is None, first.problem
    assert first.symbols == ("cuInit", "cuMemMap")
    assert first.binders == (f"{SITE}/pkg/_ext.abi3.so",)
    library = first.directory / SONAME
    assert _exported(library) == {"cuInit", "cuMemMap"}
    soname = subprocess.run([READELF, "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert f"Library soname: [{SONAME}]" in soname and "NEEDED" not in soname
    second = build_stand_in(root, "arm64", tmp_path / "scratch-b")
    assert hashlib.sha256(library.read_bytes()).digest() == hashlib.sha256(
        (second.directory / SONAME).read_bytes()).digest()
    assert build_stand_in(root, "arm64", tmp_path / "scratch-a").directory == first.directory  # reused


def test_an_architecture_without_a_stand_in_is_named(tmp_path):
    assert "no driver stand-in is known for riscv64" in str(build_stand_in(tmp_path, "riscv64", tmp_path).problem)


NAME = st.from_regex(r"cu[A-Z][A-Za-z0-9_]{0,20}", fullmatch=True)
OTHER = st.one_of(st.from_regex(r"cuda[A-Z][a-z]{1,8}@libcudart\.so\.13", fullmatch=True),
                  st.from_regex(r"cublas[A-Z][a-z]{1,8}", fullmatch=True), st.from_regex(r"[a-z_]{1,10}", fullmatch=True))


def _readelf_text(needed: list[str], undefined: list[str], defined: list[str]) -> str:
    lines = [f" 0x0000000000000001 (NEEDED)             Shared library: [{name}]" for name in needed]
    lines.append("Symbol table '.dynsym' contains 9 entries:")
    lines.append("   Num:    Value          Size Type    Bind   Vis      Ndx Name")
    for index, name in enumerate(undefined, start=1):
        lines.append(f"    {index}: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND {name}")
    for index, name in enumerate(defined, start=100):
        lines.append(f"   {index}: 00000000000005d8     8 FUNC    GLOBAL DEFAULT    5 {name}")
    return "\n".join(lines) + "\n"


@settings(derandomize=True, max_examples=80, deadline=None)
@given(st.lists(NAME, max_size=6), st.lists(OTHER, max_size=6), st.lists(NAME, max_size=3), st.booleans())
def test_driver_imports_takes_only_the_undefined_driver_functions(driver, other, defined, links):
    needed = ["libtorch.so", SONAME] if links else ["libtorch.so"]
    needs, symbols = driver_imports(_readelf_text(needed, driver + other, defined))
    assert needs is links
    assert symbols == set(driver)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.lists(NAME, max_size=8))
def test_stand_in_source_defines_each_symbol_once_returning_no_device(names):
    source = stand_in_source(names + names)
    for name in set(names):
        assert source.count(f" {name}(") == 1
    assert source.count("return 100;") == len(set(names) - {"cuGetErrorString", "cuGetErrorName"})


_DRIVER_NAME = st.from_regex(r"cu[A-Z][A-Za-z0-9_]{0,20}", fullmatch=True)


@given(declared=st.sets(_DRIVER_NAME, max_size=8), renamed=st.dictionaries(_DRIVER_NAME, _DRIVER_NAME, max_size=4),
       noise=st.sets(st.from_regex(r"cuda[A-Z][a-z]{0,8}|cublas[A-Z][a-z]{0,8}", fullmatch=True), max_size=4))
@settings(max_examples=60)
def test_every_function_the_driver_header_declares_is_exported(declared, renamed, noise):
    # the real libcuda.so.1 exports the whole API: Triton's launcher, compiled on the rank,
    # binds cuCtxSetLimit, which no prebuilt extension of the image binds
    header = "\n".join(
        [f"#define {alias} {target}" for alias, target in renamed.items()]
        + [f"CUresult CUDAAPI {name}(CUcontext ctx, size_t value);" for name in sorted(declared)]
        + [f"cudaError_t CUDARTAPI {name}(int device);" for name in sorted(noise)]
        + ["#define CUDA_VERSION 13000", "typedef struct CUctx_st *CUcontext;"]
    )
    assert declared_functions(header) == declared | set(renamed) | set(renamed.values())
