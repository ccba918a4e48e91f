"""A build into OUT beside `sparkflake export OUT`, which works in a run directory inside
OUT next to the archive it writes there: a dead export's directory is sparkflake's own
leftover and goes with the old tree; a live export's is named, not offered to --force."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparkflake.cli import main

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"

# an export that stops once the archive is written and is being verified, until told
PAUSED_EXPORT = """
import sys
from pathlib import Path
from sparkflake.oci.archive_export import export_archive

def progress(done, total, what):
    if not getattr(progress, "paused", False):
        progress.paused = True
        print("paused", flush=True)
        sys.stdin.readline()

export_archive(Path(sys.argv[1]), "docker-archive", None, progress)
"""


def _build(out: Path, cache: Path) -> int:
    return main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)])


@pytest.fixture
def paused_export(tmp_path: Path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert _build(out, cache) == 0
    export = subprocess.Popen([sys.executable, "-c", PAUSED_EXPORT, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert export.stdout is not None and export.stdout.readline() == "paused\n"
    yield out, cache, export
    if export.poll() is None:
        export.kill()
    export.wait()


def _work_directories(out: Path) -> list[str]:
    return [name for name in os.listdir(out) if ".export." in name]


def test_a_killed_export_does_not_stop_the_next_build(paused_export, capsys) -> None:
    """Seen: after an export was killed, every build into OUT was refused ("holds entries
    sparkflake did not write (.docker-archive.tar.export.<host>.pid<N>…); … pass --force")."""
    out, cache, export = paused_export
    assert _work_directories(out)
    export.send_signal(signal.SIGKILL)
    export.wait()
    capsys.readouterr()
    assert _build(out, cache) == 0, capsys.readouterr().err
    assert not _work_directories(out)
    assert main(["audit", str(out)]) == 0


def test_a_build_beside_a_live_export_names_it(paused_export, capsys) -> None:
    out, cache, export = paused_export
    capsys.readouterr()
    assert _build(out, cache) == 2
    error = capsys.readouterr().err
    assert f"another sparkflake run (pid {export.pid}) is writing into it" in error and "--force" not in error
    assert export.stdin is not None
    export.stdin.write("\n")
    export.stdin.close()
    assert export.wait(60) == 0
    assert (out / "docker-archive.tar").is_file()
    assert _build(out, cache) == 0
    assert main(["audit", str(out)]) == 0
