"""Times as images and SBOMs write them: RFC 3339 in UTC, whole seconds (the build's
SOURCE_DATE_EPOCH, so the bytes do not depend on when or where the build ran)."""

from __future__ import annotations

import datetime


def rfc3339(epoch: int) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
