"""Hostile argument values (issue 28, classes 1 and 13) are refused when the command line
is parsed, before any work, with exit 2 and a message naming the value and what is
expected: an output that is a device, a FIFO, a socket or a directory (also through a
symlink), never replaced; negative or NaN durations; byte bounds below one; malformed
hashes, platforms, tags and references; control and bidirectional-override characters;
a profiles directory holding no profile."""

from __future__ import annotations

import math
import os
import socket
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.cli import _arguments as arguments
from sparkflake.cli import main

OUTPUT_COMMANDS = {
    "audit --record": ["audit", "oci:/nonexistent", "--record"],
    "publish --record": ["publish", "/nonexistent", "127.0.0.1:5000/x:v1", "--record"],
    "recipe export -o": ["recipe", "export", "0", "/nonexistent/runtime.env", "-o"],
    "checkpoint pin -o": ["checkpoint", "pin", "/nonexistent", "--role", "target", "-o"],
    "runtime check --capabilities": ["runtime", "check", "/nonexistent", "--capabilities"],
}


def _node(tmp_path: Path, kind: str) -> Path:
    """A file system node of ``kind`` nobody would want replaced by a JSON file."""
    path = tmp_path / kind
    if kind == "character-device":
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # what /dev/full is
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(os.fspath(path))
        listener.close()
    elif kind == "directory":
        path.mkdir()
        (path / "kept").write_text("operator's\n")
    else:  # a symlink to a character device
        os.mknod(tmp_path / "device", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        path.symlink_to(tmp_path / "device")
    return path


def _refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return error


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
@pytest.mark.parametrize("kind", ["character-device", "fifo", "socket", "directory", "symlink-to-device"])
def test_an_output_that_is_not_a_regular_file_is_refused_and_kept(tmp_path, capsys, command, kind):
    node = _node(tmp_path, kind)
    before = os.lstat(node)
    error = _refused([*OUTPUT_COMMANDS[command], str(node)], capsys)
    assert str(node) in error and "regular file" in error
    after = os.lstat(node)
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
    assert kind != "directory" or (node / "kept").read_text() == "operator's\n"


@pytest.mark.parametrize("argv, named", [
    (["fanout", "--site", "s.toml", "--retry-seconds", "-1"], "'-1': expected a number of seconds, 0 or more"),
    (["fanout", "--site", "s.toml", "--retry-seconds", "nan"], "'nan': expected a number of seconds"),
    (["replicate", "m", "--site", "s.toml", "--retry-seconds", "inf"], "'inf': expected a number of seconds"),
    (["audit", "oci:x", "--max-layer-bytes", "-1"], "'-1': expected a whole number of bytes, 1 or more"),
    (["audit", "oci:x", "--max-layer-bytes", "1e9"], "'1e9': expected a whole number of bytes"),
    (["audit", "oci:x", "--platform", "linux"], "'linux': expected OS/ARCHITECTURE[/VARIANT]"),
    (["audit", "oci:x", "--platform", "linux/arm64/v8/x"], "expected OS/ARCHITECTURE[/VARIANT]"),
    (["fanout", "--site", "s.toml", "--platform", "Linux/ARM64"], "expected OS/ARCHITECTURE[/VARIANT]"),
    (["status", "p", "--settings-hash", "abc"], "'abc': expected sha256: and 64 lowercase hex digits"),
    (["status", "p", "--settings-hash", "sha256:" + "A" * 64], "expected sha256: and 64 lowercase hex digits"),
    (["build", "p", "--tag=-v1"], "'-v1': expected a tag of 1-128 letters"),
    (["build", "p", "--tag", "v" * 129], "expected a tag of 1-128 letters"),
    (["load", "out", "--tag", "Sparkflake/X:v1"], "expected [HOST[:PORT]/]NAME[:TAG]"),
    (["load", "out", "--tag", "x:v1\u202e"], "control character U+202E"),
    (["fanout", "--site", "s.toml", "--tag=-oProxyCommand=x"], "expected [HOST[:PORT]/]NAME[:TAG]"),
    (["cache", "gc", "--keep", "-1"], "'-1': expected a whole number, 0 or more"),
    (["cache", "gc", "--profiles-dir", "/proc"], "/proc: not a profiles directory"),
    (["fetch", "p", "--jobs", "0"], "'0': expected a whole number of workers, 1 or more"),
    (["runtime", "check", "out", "--timeout", "nan"], "'nan': expected a number of seconds"),
    (["profile", "list", "--profiles-dir", "/proc"], "/proc: not a profiles directory"),
    (["build", "p", "--profiles-dir", "/nonexistent"], "/nonexistent: not a directory"),
])
def test_bad_values_are_refused_before_any_work(capsys, argv, named):
    assert named in _refused(argv, capsys)


@given(st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
def test_seconds_takes_exactly_the_finite_non_negative_numbers(value):
    text = value if isinstance(value, str) else repr(value)
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if math.isfinite(number) and number >= 0:
        assert arguments.seconds(text) == number
    else:
        with pytest.raises(Exception, match="expected a number of seconds"):
            arguments.seconds(text)


@given(st.text(alphabet=st.sampled_from("abc019_.-:/AZ@ \u202e\n"), max_size=20))
def test_references_and_tags_with_control_characters_never_pass(text):
    for validate in (arguments.image_tag, arguments.image_reference, arguments.platform, arguments.settings_hash):
        try:
            accepted = validate(text)
        except Exception as exc:  # noqa: BLE001 - argparse's refusal type
            assert "expected" in str(exc) or "control character" in str(exc)
            continue
        assert accepted == text and not any(c in text for c in "\u202e\n @")
