"""Which files of an unpacked image name an environment variable.

Native libraries read their variables with getenv(3) at run time, long after any import
(NCCL reads ``NCCL_IB_HCA`` when a communicator is made, libgomp ``OMP_NUM_THREADS`` when
its first parallel region starts), so the probe cannot see them being read. What it can
show is that the exact name is in the code: NCCL's ``NCCL_PARAM(IbHca, "IB_HCA", ...)``
concatenates ``"NCCL_" "IB_HCA"`` into one string of its read-only data, and a Python
module that reads a variable spells its name. GNU grep finds the name as a whole word in
every regular file of the image in one pass.

Variables of components the image does not contain are listed in ``EXTERNAL_READERS``
with who reads them; nothing else is accepted without evidence from the image.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

# Read by software that is not in the image, on purpose.
EXTERNAL_READERS: Mapping[str, str] = {
    # The CUDA driver (libcuda.so) is mounted from the host by the NVIDIA container
    # toolkit at run time; its JIT cache location is CUDA_CACHE_PATH (CUDA C Programming
    # Guide, "CUDA Environment Variables").
    "CUDA_CACHE_PATH": "the host's CUDA driver (libcuda.so, mounted into the container at run time)",
}
SEARCHED = ("opt", "usr/lib", "usr/local/lib")


def find_names(root: Path, names: Iterable[str], *, timeout: float = 1800) -> dict[str, str]:
    """name -> the smallest image path (``/``-rooted) whose bytes contain it as a word
    (the smallest, not the first found: directory order differs between filesystems)."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    directories = [str(root / d) for d in SEARCHED if (root / d).is_dir()]
    if not directories:
        return {}
    argv = ["grep", "-r", "-o", "-a", "-w", "-F", "--null", "--no-messages"]
    for name in wanted:
        argv += ["-e", name]
    argv += ["--", *directories]
    found: dict[str, str] = {}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as process:
        assert process.stdout is not None
        for line in process.stdout:
            path, _, match = line.rstrip(b"\n").partition(b"\x00")
            name = match.decode(errors="replace")
            if name in wanted:
                shown = "/" + str(Path(path.decode(errors="replace")).relative_to(root))
                if name not in found or shown < found[name]:
                    found[name] = shown
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return found
