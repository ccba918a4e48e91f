"""The argument values the CLI takes, each refused at parse time (argparse ``type=``: the
usage line and exit 2) before any work: a negative or NaN duration, a byte bound below
one, a malformed hash, platform, tag or image reference, an output that is not a regular
file, a profiles directory that holds no profile. What each accepts is written in its
refusal. And the options several commands take alike."""

from __future__ import annotations

import argparse
import math
import os
import re
import unicodedata
from pathlib import Path

from ..core.atomic_write import regular_output
from ..core.digest import DIGEST_PATTERN
from ..core.errors import InputError
from ..oci.media_types import TAG_PATTERN
from ..profile.model import PROFILE_FILE

# distribution/reference's grammar: [domain[:port]/]path-component(/path-component)*[:tag]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*(?::{TAG_PATTERN.pattern})?"
)
# os/architecture[/variant] as the image index's platform object spells them
_PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9]+)?")


def _printable(text: str) -> str:
    """``text`` unless it holds a control or format character (a newline, a right-to-left
    override that shows a value other than it is)."""
    for character in text:
        if unicodedata.category(character) in ("Cc", "Cf"):
            raise argparse.ArgumentTypeError(
                f"{text!r}: holds the control character U+{ord(character):04X}; give plain text")
    return text


def seconds(text: str) -> float:
    """A duration in seconds: a finite number, not negative."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds, 0 or more")
    return value


def _whole_number(text: str, minimum: int, what: str) -> int:
    if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) < minimum:
        raise argparse.ArgumentTypeError(f"{_printable(text)!r}: expected a whole number{what}, {minimum} or more")
    return int(text)


def byte_count(text: str) -> int:
    """A size in bytes: a whole number, 1 or more."""
    return _whole_number(text, 1, " of bytes")


def count(text: str) -> int:
    """How many to keep: a whole number, 0 or more."""
    return _whole_number(text, 0, "")


def workers(text: str) -> int:
    """How many run at once: a whole number, 1 or more."""
    return _whole_number(text, 1, " of workers")


def _matching(pattern: re.Pattern[str], text: str, expected: str) -> str:
    if not pattern.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{_printable(text)!r}: expected {expected}")
    return text


def settings_hash(text: str) -> str:
    """A resolved-settings hash as `launch` prints it."""
    return _matching(DIGEST_PATTERN, text, "sha256: and 64 lowercase hex digits")


def platform(text: str) -> str:
    return _matching(_PLATFORM, text, "OS/ARCHITECTURE[/VARIANT], e.g. linux/arm64")


def image_tag(text: str) -> str:
    """A tag of an OCI layout or a registry repository."""
    return _matching(TAG_PATTERN, text, "a tag of 1-128 letters, digits, '_', '.', '-' (not starting with '.' or '-')")


def image_reference(text: str) -> str:
    """A name a container engine tags an image with: [HOST[:PORT]/]NAME[:TAG]."""
    return _matching(_REFERENCE, text, "[HOST[:PORT]/]NAME[:TAG] (lowercase name components)")


def path_or_default(text: str) -> Path | None:
    """A path; an empty one (``--cache ""``) is none given: the command's default applies."""
    return Path(text) if text else None


def output_file(text: str) -> Path:
    """A file to write: absent or a regular file (a symlink followed), never a device, a
    FIFO, a socket or a directory. The path as given (the write resolves it again)."""
    try:
        regular_output(_printable(text))
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return Path(text)


def profiles_dir(text: str) -> Path:
    """A directory holding at least one profile (NAME/profile.toml)."""
    directory = Path(_printable(text))
    if not directory.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a directory")
    try:
        holds_profile = any(
            entry.is_dir() and os.path.isfile(os.path.join(entry.path, PROFILE_FILE)) for entry in os.scandir(directory))
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot read: {exc.strerror or exc}") from None
    if not holds_profile:
        raise argparse.ArgumentTypeError(f"{text}: not a profiles directory (no NAME/{PROFILE_FILE} in it)")
    return directory


def add_output_dir(parser: argparse.ArgumentParser) -> None:
    """``-o DIR``, required: the directory the command writes its files into (``output_dir``)."""
    parser.add_argument("-o", "--output", dest="output_dir", required=True, metavar="DIR", type=Path)
