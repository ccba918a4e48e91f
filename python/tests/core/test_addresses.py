"""core.addresses: the zone id of an IPv6 address an operator's file gives must name an
interface (Python's ipaddress takes any text after '%')."""

from __future__ import annotations

import ipaddress
import string

from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.addresses import zone_names_interface

_INTERFACE_CHARACTERS = string.ascii_letters + string.digits + "_.-"


@given(st.text(min_size=1, max_size=40).filter(lambda zone: "%" not in zone and "/" not in zone))
def test_a_zone_id_names_an_interface_only_as_a_short_word_of_interface_characters(zone: str) -> None:
    try:
        address = ipaddress.ip_address(f"fe80::1%{zone}")
    except ValueError:
        return  # not even an address to Python
    accepted = zone_names_interface(address)
    assert accepted == (len(zone) <= 15 and all(char in _INTERFACE_CHARACTERS for char in zone))
    if accepted:  # one argv word, one URL host, nothing a shell or ssh reads
        assert not any(char.isspace() or char in "$`;&|'\"\\()<>%" for char in zone)


@given(st.ip_addresses())
def test_an_address_without_a_zone_id_is_taken(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    assert zone_names_interface(address)


def test_interface_names_and_indexes_are_taken_and_shell_text_is_not() -> None:
    for zone in ("eth0", "enP2p1s0f1np1", "7", "br-lan.10"):
        assert zone_names_interface(ipaddress.IPv6Address(f"fe80::1%{zone}"))
    for zone in ("$(id)", "eth0 eth1", "a\nb", "x" * 16):
        assert not zone_names_interface(ipaddress.IPv6Address(f"fe80::1%{zone}"))
