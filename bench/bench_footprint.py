"""Bytes on disk of a build, by place, and the peak of a warm rebuild (issue 31 item 2).

Two ``sparkflake build PROFILE -o OUT`` runs of this checkout over a warm cache (its
assembled trees and layer store already hold the profile's image): the first into an
empty OUT, the second replacing it (a warm rebuild with no change). After the first, every
place the build uses is measured as ``du -B1`` does it, each inode counted once over all
of them, the cache's places first: so a file of OUT that is a hard link to the layer store
counts in the store, not again in OUT. What the build used is read from its build record
(``CACHE/builds/PROFILE/``): its input blobs, its assembled trees, its layer-store blobs.

During the second build a sampler walks, every ``--interval`` seconds, what a rebuild
writes: OUT's parent directory (OUT, the staging directory beside it, the retired one),
the cache's ``work/``, the memory scratch (``/dev/shm/sparkflake-*``) and any new entry of
``trees/`` or the store; inodes already counted (the store's blobs the new layout links)
are not counted again. Its peak, plus the steady footprint beyond the inputs, over the
image's bytes, is the rebuild's peak as a multiple of the image. The file system's own
used-bytes figure (statvfs) is recorded beside it: other jobs on a shared machine move it.

    .venv/bin/python bench/bench_footprint.py --out /work/wt/h31g/out/glm53-dflash7
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "footprint-issue31.json"
ARCHIVES = ("oci-archive.tar", "docker-archive.tar")


class InodeCounter:
    """``du -B1`` over several places: each inode's blocks counted once, in the order asked."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, int]] = set()

    def count(self, paths: Iterable[Path]) -> int:
        total = 0
        for path in paths:
            for entry in walk(path):
                try:
                    status = os.lstat(entry)
                except FileNotFoundError:  # removed while walked (a rebuild's staging)
                    continue
                if (status.st_dev, status.st_ino) not in self.seen:
                    self.seen.add((status.st_dev, status.st_ino))
                    total += status.st_blocks * 512
        return total


def walk(path: Path) -> Iterable[Path]:
    yield path
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path, onerror=lambda error: None):
            for name in (*dirs, *files):
                yield Path(root) / name


def last_record(cache: Path, profile: str) -> dict:
    records = sorted((cache / "builds" / profile).glob("*.json"))
    return json.loads(records[-1].read_bytes())


def build(profile: str, out: Path, cache: Path, offline: bool, formats: str) -> dict:
    started = time.monotonic()
    done = subprocess.run([str(REPO / "bin" / "sparkflake"), "build", profile, "-o", str(out), "--cache", str(cache),
                           "--formats", formats, "--json", *(["--offline"] if offline else [])],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"build failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def steady_places(cache: Path, out: Path, record: dict) -> tuple[dict[str, int], InodeCounter]:
    counter = InodeCounter()
    store = cache / "oci" / "blobs" / "sha256"
    places = {
        "cache: input blobs": counter.count(cache / "blobs" / "sha256" / name for name in record["inputs"]),
        "cache: assembled trees": counter.count(cache / "trees" / key for key in record["trees"]),
        "cache: layer store": counter.count(store / digest.removeprefix("sha256:") for digest in record["blobs"]),
        "cache: hash and fact indexes": counter.count([
            cache / "compose", cache / "oci" / "file-sha256.json", cache / "oci" / "fingerprints",
            cache / "oci" / "layers", cache / "oci" / "verified"]),
        "out: oci (bytes not already in the layer store)": counter.count([out / "oci"]),
        "out: oci-archive.tar = docker-archive.tar (one inode)": counter.count(out / name for name in ARCHIVES),
    }
    places["out: documents"] = counter.count(sorted(out.iterdir()))
    return places, counter


class RebuildSampler(threading.Thread):
    """The peak of what a rebuild writes (see the module docstring)."""

    def __init__(self, out: Path, cache: Path, counted: InodeCounter, interval: float) -> None:
        super().__init__(daemon=True)
        self.out, self.cache, self.counted, self.interval = out, cache, counted, interval
        self.peak = 0
        self.peak_fs_used = 0
        self.samples = 0
        self._stop_event = threading.Event()
        self._trees_before = set(os.listdir(cache / "trees"))
        self._store_before = set(os.listdir(cache / "oci" / "blobs" / "sha256"))
        self._fs_used_before = fs_used(cache)

    def sample(self) -> int:
        counter = InodeCounter()
        counter.seen = set(self.counted.seen)
        shm = sorted(Path("/dev/shm").glob("sparkflake-*"))
        new_trees = [self.cache / "trees" / name for name in set(os.listdir(self.cache / "trees")) - self._trees_before]
        store = self.cache / "oci" / "blobs" / "sha256"
        new_blobs = [store / name for name in set(os.listdir(store)) - self._store_before]
        return counter.count([self.out.parent, self.cache / "work", *shm, *new_trees, *new_blobs])

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, self.sample())
            self.peak_fs_used = max(self.peak_fs_used, fs_used(self.cache) - self._fs_used_before)
            self.samples += 1
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def fs_used(path: Path) -> int:
    stats = os.statvfs(path)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="glm53-dflash7")
    parser.add_argument("--out", type=Path, required=True, help="an output directory that does not exist yet")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sparkflake")
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--formats", default="oci", help="`build --formats` (default: build's, the layout alone)")
    parser.add_argument("--offline", action="store_true", help="inputs from the cache and the profile's inputs/ only")
    parser.add_argument("--label", default="after")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    profile_name = Path(args.profile).name
    if args.out.exists():
        raise SystemExit(f"{args.out}: exists; the first build goes into an empty output")
    first = build(args.profile, args.out, args.cache, args.offline, args.formats)
    record = last_record(args.cache, profile_name)
    assert record["manifest_digest"] == first["manifest"], "the build record is another build's"
    places, counted = steady_places(args.cache, args.out, record)
    image = sum((args.out / "oci" / "blobs" / "sha256" / d.removeprefix("sha256:")).stat().st_size
                for d in [first["config"], first["manifest"], *(layer["digest"] for layer in first["layers"])])
    beyond_inputs = sum(size for place, size in places.items() if place != "cache: input blobs")

    sampler = RebuildSampler(args.out, args.cache, counted, args.interval)
    sampler.start()
    second = build(args.profile, args.out, args.cache, args.offline, args.formats)
    sampler.stop()
    if second["manifest"] != first["manifest"]:
        raise SystemExit("the rebuild gave another manifest")

    measured = {
        "sparkflake": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True, check=False).stdout.strip(),
        "formats": args.formats,
        "image_bytes": image,
        "manifest": first["manifest"],
        "places": places,
        "beyond_inputs_bytes": beyond_inputs,
        "beyond_inputs_x_image": round(beyond_inputs / image, 2),
        "first_build": {"wall_s": first["wall_s"], "layers_cached": [layer["cached"] for layer in first["layers"]],
                        "timings": first["timings"]},
        "warm_rebuild": {
            "wall_s": second["wall_s"],
            "layers_cached": [layer["cached"] for layer in second["layers"]],
            "timings": second["timings"],
            "peak_written_bytes": sampler.peak,
            "samples": sampler.samples,
            "peak_beyond_inputs_bytes": beyond_inputs + sampler.peak,
            "peak_beyond_inputs_x_image": round((beyond_inputs + sampler.peak) / image, 2),
            "file_system_used_peak_delta_bytes": sampler.peak_fs_used,
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    document = json.loads(args.results.read_text()) if args.results.exists() else {}
    document.setdefault(profile_name, {})[args.label] = measured
    args.results.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(measured, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
