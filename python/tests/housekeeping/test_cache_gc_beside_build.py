"""`sparkflake cache gc --apply` while a build runs on the same cache: the build takes
inputs, trees and layers from the cache before its record names them, so gc must not
remove them under it. Seen: a fixture build failed with "cannot copy layer sha256:… into
….partial/oci: No such file or directory" once gc, run beside it, removed the layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sparkflake.cli import main
from sparkflake.housekeeping.build_record import load_build_records

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"

# a build that stops when it reaches its third layer (the first two taken from the layer
# cache by then) and goes on when told
PAUSED_BUILD = """
import sys
from pathlib import Path
from sparkflake.compose.composed_image import ImageOptions
from sparkflake.oci.compression import Compression
from sparkflake.workflows.build import BuildRequest, build_profile

class PausingProgress:
    paused = False
    def __call__(self, done, total, what):
        if not self.paused and what.startswith("python-torch"):
            self.paused = True
            print("paused", flush=True)
            sys.stdin.readline()
    def phase(self, name):
        pass

build_profile(BuildRequest(profile=sys.argv[1], output_dir=Path(sys.argv[2]), cache_root=Path(sys.argv[3]),
                           offline=True, options=ImageOptions(compression=Compression("zstd"))),
              PausingProgress())
"""


def _build(cache: Path, out: Path, compression: str) -> None:
    subprocess.run([sys.executable, "-m", "sparkflake.cli", "build", str(FIXTURE), "--offline", "-o", str(out),
                    "--cache", str(cache), "--compression", compression], stdout=subprocess.DEVNULL, check=True)


def test_gc_beside_a_running_build_removes_nothing_it_uses(tmp_path: Path, capsys) -> None:
    cache = tmp_path / "cache"
    _build(cache, tmp_path / "zstd", "zstd")
    time.sleep(1.1)  # the records' times order the builds (seconds)
    _build(cache, tmp_path / "gzip", "gzip")  # the last build: gc --keep 1 keeps only what it used
    zstd_manifest = json.loads((tmp_path / "zstd" / "digests.json").read_bytes())["manifest"]
    zstd_record = next(stored.record for stored in load_build_records(cache)
                       if stored.record.manifest_digest == zstd_manifest)
    in_use = [cache / "oci" / "blobs" / "sha256" / digest.removeprefix("sha256:") for digest in zstd_record.blobs]
    assert all(path.is_file() for path in in_use)

    build = subprocess.Popen([sys.executable, "-c", PAUSED_BUILD, str(FIXTURE), str(tmp_path / "again"), str(cache)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert build.stdout is not None and build.stdin is not None
        assert build.stdout.readline() == "paused\n"  # the zstd build again, its lower layers taken from the cache
        code = main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--apply",
                     "--profiles-dir", str(FIXTURE.parent)])
        removed = [path for path in in_use if not path.exists()]
        assert not removed, f"gc removed layers a running build uses: {removed}"
        assert code == 2 and "in use by a build" in capsys.readouterr().err
        build.stdin.write("\n")
        build.stdin.close()
        assert build.wait(120) == 0
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert main(["audit", str(tmp_path / "again")]) == 0
    # once the build has finished, gc runs (and keeps what that build, now the last, used)
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--apply",
                 "--profiles-dir", str(FIXTURE.parent)]) == 0
    assert all(path.is_file() for path in in_use)
    assert os.listdir(cache / "work") == []
