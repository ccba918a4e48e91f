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

import re
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
# One of grep's --null -o records: the file's path (any byte but NUL: a newline too), NUL,
# the word matched (a name: no newline), newline.
_RECORD = re.compile(rb"([^\0]*)\0([^\n]*)\n")


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
        pending = b""
        # whole records, not lines: a file name may hold a newline (read line by line, its
        # record was split and the fragment's path was no path under root)
        stdout = process.stdout
        for chunk in iter(lambda: stdout.read(1 << 16), b""):
            data, position = pending + chunk, 0
            while (record := _RECORD.match(data, position)) is not None:
                position = record.end()
                name = record[2].decode(errors="replace")
                if name in wanted:
                    shown = "/" + str(Path(record[1].decode(errors="replace")).relative_to(root))
                    if name not in found or shown < found[name]:
                        found[name] = shown
            pending = data[position:]
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return found
