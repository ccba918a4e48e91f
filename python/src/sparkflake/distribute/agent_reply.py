"""What the controller takes from a rank agent's reply: the last JSON object line of its
standard output (``agent_protocol``), and from it only values of the shape it reads.

A rank's agent is the same program as the controller, but the rank may run another version
of it, or a damaged one. So each value is read through a shape (a count, a flag, a text, a
list of texts, an object): what has another shape, or is missing, is refused here as that
rank's failed step (``MalformedReply``, exit 1), naming the rank, the JSON path and what was
expected, and never reaches a record or a traceback (a hunt over 11,187 replies of the wrong
shape found 22 places that raised or recorded them as given).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.digest import DIGEST_PATTERN
from ..core.errors import CheckFailed
from ..core.records import describe

SSH_FAILED = 255  # OpenSSH's own exit status for connection and authentication failures
_MISSING = object()


class MalformedReply(CheckFailed):
    """A reply without a value of the shape the controller reads."""

    def __init__(self, where: str, path: str, expected: str, value: object) -> None:
        got = "nothing" if value is _MISSING else "null" if value is None else describe(value)
        super().__init__(f"{where}: the agent's reply {path}: expected {expected}, got {got} "
                         "(does the rank run this version of sparkflake?)", check_id="agent.reply")


def _at(document: Mapping[str, Any] | None, key: str) -> object:
    return (document or {}).get(key, _MISSING)


def count_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> int:
    """A whole number ≥ 0 (a size, a byte count, a port): never a boolean, a float or text."""
    value = _at(document, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 1 << 63:
        raise MalformedReply(where, f"{path}.{key}", "a whole number from 0 to 2^63-1", value)
    return value


def flag_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> bool:
    value = _at(document, key)
    if not isinstance(value, bool):
        raise MalformedReply(where, f"{path}.{key}", "true or false", value)
    return value


def text_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> str:
    value = _at(document, key)
    if not isinstance(value, str) or not value:
        raise MalformedReply(where, f"{path}.{key}", "a non-empty string", value)
    return value


def digest_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> str:
    value = _at(document, key)
    if not isinstance(value, str) or not DIGEST_PATTERN.fullmatch(value):
        raise MalformedReply(where, f"{path}.{key}", '"sha256:" and 64 lowercase hex digits', value)
    return value


def optional_text_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> str | None:
    """A non-empty string, or nothing (missing or null)."""
    value = _at(document, key)
    return None if value is _MISSING or value is None else text_at(document, key, where, path)


def texts_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> list[str]:
    value = _at(document, key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MalformedReply(where, f"{path}.{key}", "an array of strings", value)
    return list(value)


def object_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> dict[str, Any]:
    value = _at(document, key)
    if not isinstance(value, dict):
        raise MalformedReply(where, f"{path}.{key}", "an object", value)
    return value


def objects_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> list[dict[str, Any]]:
    value = _at(document, key)
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise MalformedReply(where, f"{path}.{key}", "an array of objects", value)
    return list(value)


def count_up_to(document: Mapping[str, Any], key: str, most: int, where: str, path: str = "$") -> int:
    """A whole number from 0 to ``most``: bytes of a file (its planned size, or what is left of it)."""
    value = count_at(document, key, where, path)
    if value > most:
        raise MalformedReply(where, f"{path}.{key}", f"a whole number from 0 to {most} (bytes of the planned file)",
                             value)
    return value


def words_at(document: Mapping[str, Any] | None, key: str, where: str, path: str = "$") -> str:
    """A string, maybe empty (a message, a stderr tail), or nothing ("")."""
    value = (document or {}).get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedReply(where, f"{path}.{key}", "a string", value)
    return value


def identity_at(result: Mapping[str, Any], where: str, path: str) -> list[int] | None:
    """The stat identity the receiver saw of a verified copy (``stat_identity``: whole
    numbers), or None when it gave none: it goes to the rank's commit as it is."""
    value = result.get("identity")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
        raise MalformedReply(where, f"{path}.identity", "an array of integers (a stat identity)", value)
    return value


@dataclass(frozen=True)
class AgentReply:
    returncode: int
    result: dict[str, Any] | None
    stderr: str

    @property
    def unreachable(self) -> bool:
        return self.returncode == SSH_FAILED and self.result is None

    @property
    def containers(self) -> list[dict[str, Any]]:
        """The ``containers`` a rank's agent listed, each an object; what is not a list of
        objects (an agent of another version) lists none rather than raising here."""
        listed = (self.result or {}).get("containers")
        return [item for item in listed if isinstance(item, dict)] if isinstance(listed, list) else []

    def text(self, key: str) -> str | None:
        """The reply's ``key`` when it is a non-empty string, else None."""
        value = (self.result or {}).get(key)
        return value if isinstance(value, str) and value else None

    def describe_failure(self) -> str:
        message = (self.result or {}).get("message")
        if message:
            return str(message)
        text = self.stderr.strip()
        return text.split("\n")[-1] if text else f"exit status {self.returncode}"  # lines end at \n only


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def last_json(text: str) -> dict[str, Any] | None:
    """The last line that is a JSON object (RFC 8259: NaN and Infinity are not, and a line
    that holds them is passed over like a log line). Lines end at ``\n`` only, as the agent
    writes them: a reply's strings may hold U+2028, U+0085 and the like raw, at which
    ``str.splitlines`` would cut it."""
    found = None
    for line in text.split("\n"):
        try:
            parsed = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # not a reply line (a log line, or nested past the parser)
            continue
        if isinstance(parsed, dict):
            found = parsed
    return found
