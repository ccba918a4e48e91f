"""A count read from text (an index's Size, a header, an environment variable): ASCII
digits, at most 19. ``int()`` alone also takes "1_0", "+1", " 1" and any script's digits
("١٢"), and raises past 4,300 digits; ``str.isdigit`` also takes "²", which ``int()``
then refuses."""

from __future__ import annotations

import re

COUNT_PATTERN = r"[0-9]{1,19}"  # for a pattern that holds counts (an HTTP Content-Range)
_COUNT = re.compile(COUNT_PATTERN)


def ascii_count(text: str) -> int | None:
    """``text`` as a count, or None when it is not one."""
    return int(text) if _COUNT.fullmatch(text) else None
