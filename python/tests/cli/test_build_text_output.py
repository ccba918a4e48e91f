"""`build`'s text output says what it did: the closing line names exactly the entries it
wrote into OUT (with --formats oci, no archive), and --keep-work names the kept work trees
(issue 31: the line listed archives it did not write, and --keep-work printed nothing)."""

from __future__ import annotations

from pathlib import Path

from sparkflake.cli import main
from sparkflake.core.atomic_write import OUTPUT_MARKER

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def test_the_closing_line_names_what_was_written_and_keep_work_where(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(tmp_path / "cache"),
                 "--formats", "oci", "--keep-work"]) == 0
    lines = capsys.readouterr().out.splitlines()
    present = sorted(f"{path.name}/" if path.is_dir() else path.name for path in out.iterdir() if path.name != OUTPUT_MARKER)
    assert "oci/" in present and "oci-archive.tar" not in present and "docker-archive.tar" not in present
    assert lines[-1].startswith(f"wrote {out}/ ({', '.join(present)}) in ")
    [kept] = [line for line in lines if line.startswith("work trees kept ")]
    work = Path(kept.removeprefix("work trees kept").strip())
    assert work.is_dir() and any(work.iterdir())
