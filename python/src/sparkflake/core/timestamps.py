"""Times as images and SBOMs write them: RFC 3339 in UTC, whole seconds (the build's
SOURCE_DATE_EPOCH, so the bytes do not depend on when or where the build ran)."""

from __future__ import annotations

import datetime

from .errors import InputError


def rfc3339(epoch: int) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object, where: str) -> int:
    """The epoch of a time ``rfc3339`` wrote (``YYYY-MM-DDTHH:MM:SSZ``, 1970 on); anything else is an
    ``InputError`` naming ``where``."""
    if isinstance(text, str) and len(text) == 20:
        try:
            moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
        except ValueError:
            pass
        else:
            if moment.year >= 1970:  # a tar header's mtime, as SOURCE_DATE_EPOCH, is not negative
                return int(moment.timestamp())
    raise InputError(f"{where}: expected a time as YYYY-MM-DDTHH:MM:SSZ from 1970 on, got {text!r}")
