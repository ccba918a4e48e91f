"""The two ways a sparkflake stage refuses, and the exit code each one maps to.

Stages raise; only the CLI prints. ``InputError`` means the input could not be read or
is malformed (exit 2); ``CheckFailed`` means the input was read and a verification
failed (exit 1). Messages name the file and the place inside it (JSON path, line,
check id) so an operator can act without a traceback.
"""

from __future__ import annotations


class SparkflakeError(Exception):
    exit_code = 2

    def __init__(self, message: str, *, check_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.check_id = check_id

    def __str__(self) -> str:
        if self.check_id:
            return f"[{self.check_id}] {self.message}"
        return self.message


class InputError(SparkflakeError):
    """Unreadable or malformed input, bad usage: exit 2."""

    exit_code = 2


class CheckFailed(SparkflakeError):
    """A verification ran and found a mismatch: exit 1."""

    exit_code = 1
