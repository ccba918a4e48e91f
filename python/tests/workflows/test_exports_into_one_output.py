"""Two exports into one build output at once, a docker-archive and an oci-archive: each
records its archive in OUT's marker (a read, then a rewrite) before renaming it in. Seen
(3 runs in 4, 60 pairs): one export rewrote the marker from what it had read before the
other wrote, the other's entry went back to its earlier state (or was lost), and every later
build into OUT was refused ('holds files changed since sparkflake wrote them
(docker-archive.tar…)'). Here the first export is held right after its read of the marker
(a wrapper of that read, in its own process) while the second runs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from fixtures.locks import flock_waiters

from sparkflake.cli import main
from sparkflake.core.output_marker import check_replaceable_output, read_marker

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"

# export_archive with the marker's read for its record held until told
HELD_EXPORT = """
import sys
from pathlib import Path
from sparkflake.core import atomic_write
from sparkflake.oci.archive_export import export_archive

read_marker = atomic_write.read_marker

def read_and_wait(directory):
    marker = read_marker(directory)
    print("read", flush=True)
    sys.stdin.readline()
    return marker

atomic_write.read_marker = read_and_wait
export_archive(Path(sys.argv[1]), "docker-archive")
"""


def test_two_exports_into_one_output_both_stay_listed(tmp_path: Path, capsys) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0
    held = subprocess.Popen([sys.executable, "-c", HELD_EXPORT, str(out)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout is not None and held.stdin is not None
        assert held.stdout.readline() == "read\n"
        other = subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "export", str(out), "--format", "oci-archive"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120  # it finishes (nothing holds it back) or waits for the first
        while other.poll() is None and flock_waiters(out) == 0:
            assert time.monotonic() < deadline, "the second export neither finished nor waited"
            time.sleep(0.02)
        held.stdin.write("\n")
        held.stdin.close()
        assert held.wait(120) == 0
        assert other.wait(120) == 0, other.communicate()[1]
    finally:
        for process in (held,):
            if process.poll() is None:
                process.kill()
                process.wait()
    marker = read_marker(out)
    assert marker is not None and {"docker-archive.tar", "oci-archive.tar"} <= set(marker.entries)
    check_replaceable_output(out)  # before: 'holds files changed since sparkflake wrote them' or an unlisted archive
    capsys.readouterr()
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0


def test_a_file_a_command_adds_to_an_output_waits_for_the_output_s_other_writer(tmp_path: Path) -> None:
    # the runtime check's capabilities, a publish record, receipt.json rewritten: the marker
    # is read and rewritten for each, as for an export's archive, so each takes OUT's update
    # lock too; before, one written while an export held it could lose the other's entry
    import threading

    from sparkflake.core.atomic_write import write_bytes_atomic
    from sparkflake.core.directory_lock import updating_output

    out = tmp_path / "out"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(tmp_path / "cache")]) == 0
    record = out / "publish.json"
    writer = threading.Thread(target=write_bytes_atomic, args=(record, b"{}\n"), kwargs={"listed": True})
    with updating_output(out):  # an export renaming its archive in
        writer.start()
        writer.join(0.5)
        assert writer.is_alive() and not record.exists()
    writer.join(30)
    assert not writer.is_alive() and record.read_bytes() == b"{}\n"
    marker = read_marker(out)
    assert marker is not None and marker.paths is not None and "publish.json" in marker.paths
    check_replaceable_output(out)
