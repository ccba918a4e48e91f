"""An IP address as an operator's file gives one (the site file's addresses, a launch
setting's host address): Python's ``ipaddress`` takes any text after an IPv6 address's '%'
as its zone id, and the address reaches ssh's host and ``-b``, URLs and vLLM's
``--master-addr``, so the zone id is held to what names an interface."""

from __future__ import annotations

import ipaddress
import re

# an interface name (at most IFNAMSIZ-1 = 15 bytes, <linux/if.h>) or its index
_ZONE_ID = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def zone_names_interface(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """False only for an IPv6 address whose zone id is no interface name or index."""
    scope = address.scope_id if isinstance(address, ipaddress.IPv6Address) else None
    return scope is None or _ZONE_ID.fullmatch(scope) is not None
