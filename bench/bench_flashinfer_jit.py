#!/usr/bin/env python3
"""What FlashInfer's JIT costs for the target's sparse-MLA attention, in the image itself.

vLLM 0.33.0's only sm_12x sparse-MLA backend, FLASHINFER_MLA_SPARSE_SM120, runs FlashInfer's
``sparse_mla_sm120`` module (flashinfer/jit/mla.py ``gen_sparse_mla_sm120_module``: 13 CUDA
sources, one shared object). No flashinfer-cubin matches flashinfer-python 0.7.2.post1, so a
rank compiles it at first use with the image's own toolchain (nvcc at CUDA_HOME, g++, ninja,
/bin/sh) into FLASHINFER_WORKSPACE_BASE, which the launcher puts under the rank's JIT root, so
it is compiled once per runtime identity. This script runs that JIT as FlashInfer does — its
own ninja file, its own flags, for sm_121a — in an unpacked image root under the runtime
check's sandbox (qemu-user on this x86_64 machine), and times:

1. ``import flashinfer`` + ``gen_sparse_mla_sm120_module().write_ninja()``;
2. the compile of ONE of the module's objects (``--object``, default the decode dispatch),
   wall and CPU seconds, with the load average before and after.

The figures say whether the kernels can be compiled by the image's toolchain for sm_121a at
all (the object exists and carries a fatbin), and what compiling them at build time under
emulation would cost (the route issue 26 weighs against JIT on the rank). That the object
runs on a GB10 is not checkable here.

Usage: bench_flashinfer_jit.py ROOT [--object NAME] [--results FILE]
ROOT: an unpacked image root, e.g. SCRATCH/root after
``sparkflake runtime check OUT --profile glm53-dflash7 --scratch SCRATCH``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "src"))

from sparkflake.core.atomic_write import write_bytes_atomic
from sparkflake.core.canonical_json import readable_json_bytes
from sparkflake.runtime.sandbox import sandbox_argv

SITE = "/opt/venv/lib/python3.11/site-packages"
# nvcc, crt and nvvm of the nvidia-cuda-* wheels (the profile's CUDA_HOME)
CUDA_HOME = f"{SITE}/nvidia/cu13"
WORKSPACE = "/var/lib/sparkflake/jit/bench/flashinfer"
GENERATE = (
    "import time; t = time.monotonic()\n"
    "from flashinfer.jit.mla import gen_sparse_mla_sm120_module\n"
    "spec = gen_sparse_mla_sm120_module(); spec.write_ninja()\n"
    "print(spec.build_dir, round(time.monotonic() - t, 1))\n"
)


def environment() -> dict[str, str]:
    return {
        "HOME": "/root",
        "PATH": f"/opt/venv/bin:{CUDA_HOME}/bin:/usr/bin:/bin",
        # flashinfer/jit/cpp_ext.py get_cuda_path(): CUDA_HOME; $CXX for the C++ sources (default
        # "c++", an alternatives link Debian's postinst would make and our OS base does not)
        "CUDA_HOME": CUDA_HOME,
        "CXX": "g++",
        # flashinfer/jit/env.py: the JIT's cache root (the launcher's FLASHINFER_WORKSPACE_BASE)
        "FLASHINFER_WORKSPACE_BASE": WORKSPACE,
        # flashinfer/compilation_context.py: with no GPU to ask, the architecture is stated (GB10)
        "FLASHINFER_CUDA_ARCH_LIST": "12.1a",
        "MAX_JOBS": "1",
    }


def run(root: Path, workspace: Path, argv: list[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    command = sandbox_argv(root, argv, environment(), [(workspace, WORKSPACE, True)])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return completed, wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--object", default="decode_dispatch", help="source stem in csrc/sparse_mla_sm120/")
    parser.add_argument("--results", type=Path)
    args = parser.parse_args()
    if not (args.root / "opt/venv/bin/python").exists():
        parser.error(f"{args.root}: not an unpacked glm53 image root (no opt/venv/bin/python)")
    with tempfile.TemporaryDirectory(prefix="bench-flashinfer-jit-") as scratch:
        workspace = Path(scratch)
        load_start = os.getloadavg()
        generated, gen_wall, gen_cpu = run(args.root, workspace, ["/opt/venv/bin/python", "-c", GENERATE])
        if generated.returncode != 0:
            print(generated.stderr[-4000:], file=sys.stderr)
            return 1
        build_dir = generated.stdout.split()[0]
        target = f"{build_dir}/sparse_mla_sm120_{args.object}.cuda.o"
        compiled, cc_wall, cc_cpu = run(args.root, workspace, ["/opt/venv/bin/ninja", "-C", build_dir, "-j1", target])
        load_end = os.getloadavg()
        host_object = workspace / Path(target).relative_to(WORKSPACE)
        ninja_file = (workspace / Path(build_dir).relative_to(WORKSPACE) / "build.ninja").read_text()
        objects = ninja_file.count(": cuda_compile ")
        sections = subprocess.run(["readelf", "-S", str(host_object)], capture_output=True, text=True,
                                  check=False).stdout if host_object.exists() else ""
        result = {
            "what": "FlashInfer's JIT of the sparse_mla_sm120 module (FLASHINFER_MLA_SPARSE_SM120) in the image, "
                    "its own ninja file for sm_121a, under qemu-user in the runtime check's sandbox",
            "root": str(args.root),
            "gencode": "arch=compute_121a,code=sm_121a" if "compute_121a" in ninja_file else None,
            "objects_in_module": objects,
            "generate": {"wall_s": round(gen_wall, 1), "cpu_s": round(gen_cpu, 1)},
            "compile_one_object": {
                "object": args.object, "ok": compiled.returncode == 0, "wall_s": round(cc_wall, 1),
                "cpu_s": round(cc_cpu, 1), "bytes": host_object.stat().st_size if host_object.exists() else None,
                "fatbin": ".nv_fatbin" in sections,
                "error_tail": None if compiled.returncode == 0 else (compiled.stdout + compiled.stderr)[-2000:],
            },
            "load_average": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]},
            "cpus": os.cpu_count(),
        }
    print(json.dumps(result, indent=2))
    if args.results:
        write_bytes_atomic(args.results, readable_json_bytes(result))
    return 0 if result["compile_one_object"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
