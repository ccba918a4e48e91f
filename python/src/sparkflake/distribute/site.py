"""The site file: which ranks exist, how to reach them, which links join them, in which order
an archive travels.

A site file is TOML, versioned by ``schema``. Validation is strict so that a typo never turns
into traffic on the wrong wire: unknown keys are refused, every link has exactly two distinct
known endpoints and each endpoint declares its own address on that link, every address
(management and fabric) is unique, the order names each rank once and consecutive ranks share
a link; a declared ring must also link its last rank back to its first.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..core.addresses import zone_names_interface
from ..core.documents import read_regular_file
from ..core.errors import InputError
from ..core.records import parse_toml_text
from .site_service import (
    ServiceSettings,
    dump_service,
    parse_service,
    rank_env_file,
    rank_number,
    validate_service_ranks,
)

SCHEMA = "sparkflake.site/v1"
TOPOLOGIES = ("chain", "ring")
DEFAULT_AGENT = ("python3", "-m", "sparkflake.distribute.agent")


@dataclass(frozen=True)
class SshOptions:
    """OpenSSH client settings shared by management and fabric connections."""

    user: str | None = None
    port: int = 22
    identity_file: str | None = None
    known_hosts_file: str | None = None
    cipher: str | None = None
    connect_timeout: int = 10
    server_alive_interval: int = 5
    server_alive_count_max: int = 3
    # "yes" refuses unknown host keys; "accept-new" records a first-seen key (test sites).
    strict_host_key_checking: str = "yes"
    # more ``-o Key=Value`` settings, e.g. "KexAlgorithms=curve25519-sha256"
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rank:
    name: str
    ssh: str
    management: str
    data_dir: str
    fabric: dict[str, str] = field(default_factory=dict)
    engine_args: tuple[str, ...] = ()
    agent: tuple[str, ...] | None = None
    number: int | None = None  # the serving rank (site_service): 0 is the master
    env_file: str | None = None  # this rank's runtime.env, for `sparkflake service`

    def data_path(self, *parts: str) -> str:
        """Where ``parts`` (relative) lie in the rank's data directory, on the rank."""
        return str(PurePosixPath(self.data_dir, *parts))


@dataclass(frozen=True)
class Link:
    name: str
    endpoints: tuple[str, str]


@dataclass(frozen=True)
class Hop:
    """One adjacent step of the order: ``sender`` forwards to ``receiver`` over ``link``."""

    sender: Rank
    receiver: Rank
    link: Link

    @property
    def sender_address(self) -> str:
        return self.sender.fabric[self.link.name]

    @property
    def receiver_address(self) -> str:
        return self.receiver.fabric[self.link.name]


@dataclass(frozen=True)
class Site:
    ranks: tuple[Rank, ...]
    links: tuple[Link, ...]
    order: tuple[str, ...]
    topology: str = "chain"
    ssh: SshOptions = SshOptions()
    agent: tuple[str, ...] = DEFAULT_AGENT
    service: ServiceSettings | None = None  # [service]: what `sparkflake service` runs

    def rank(self, name: str) -> Rank:
        for rank in self.ranks:
            if rank.name == name:
                return rank
        raise InputError(f"site: unknown rank {name!r}")

    def ordered_ranks(self) -> list[Rank]:
        return [self.rank(name) for name in self.order]

    def agent_for(self, rank: Rank) -> tuple[str, ...]:
        return rank.agent if rank.agent is not None else self.agent

    def link_between(self, first: str, second: str) -> Link | None:
        for link in self.links:
            if set(link.endpoints) == {first, second}:
                return link
        return None

    def detour(self, broken: set[str]) -> Site | None:
        """In a ring, the way around the ranks in ``broken``: from the first rank over the
        closing link backwards, rank 0 -> last -> last-but-one ..., stopping before the
        first broken rank met that way. None for a chain, or when no rank is reached so."""
        if self.topology != "ring":
            return None
        path = [self.order[0]]
        for name in reversed(self.order[1:]):
            if name in broken:
                break
            path.append(name)
        if len(path) < 2:
            return None
        return Site(ranks=self.ranks, links=self.links, order=tuple(path), topology="chain", ssh=self.ssh,
                    agent=self.agent, service=self.service)

    def hops(self) -> list[Hop]:
        """The forwarding steps rank i -> i+1 along the order (a ring's closing link is not
        used for forwarding: the chain from rank 0 already reaches every rank)."""
        hops = []
        for sender_name, receiver_name in zip(self.order, self.order[1:], strict=False):
            link = self.link_between(sender_name, receiver_name)
            if link is None:  # validate() makes this unreachable for a loaded site
                raise InputError(f"site: no link between {sender_name} and {receiver_name}")
            hops.append(Hop(self.rank(sender_name), self.rank(receiver_name), link))
        return hops


def load_site(path: str | os.PathLike[str]) -> Site:
    """The site file: a bounded read of a regular file (a FIFO or /dev/zero is refused)."""
    return parse_site(read_regular_file(path, "a site file"), origin=os.fspath(path))


def parse_site(text: str | bytes, *, origin: str = "<site>") -> Site:
    return site_from_document(parse_toml_text(text, origin), origin=origin)


def site_from_document(document: dict[str, Any], *, origin: str = "<site>") -> Site:
    reader = _Reader(origin)
    reader.keys(document, "", {"schema", "topology", "order", "ssh", "agent", "ranks", "links", "service"})
    schema = document.get("schema")
    if schema != SCHEMA:
        raise InputError(f"{origin}: schema: expected {SCHEMA!r}, got {schema!r}")
    topology = document.get("topology", "chain")
    if topology not in TOPOLOGIES:
        raise InputError(f"{origin}: topology: expected one of {TOPOLOGIES}, got {topology!r}")
    ssh = _ssh_options(reader, document.get("ssh", {}))
    agent = tuple(reader.strings(document.get("agent", list(DEFAULT_AGENT)), "agent", nonempty=True))
    raw_ranks = reader.table_list(document.get("ranks"), "ranks")
    ranks = tuple(_rank(reader, raw, f"ranks[{index}]") for index, raw in enumerate(raw_ranks))
    raw_links = reader.table_list(document.get("links", []), "links", allow_empty=True)
    links = tuple(_link(reader, raw, f"links[{index}]") for index, raw in enumerate(raw_links))
    order = tuple(reader.strings(document.get("order"), "order", nonempty=True))
    service = parse_service(reader, document["service"]) if "service" in document else None
    site = Site(ranks=ranks, links=links, order=order, topology=topology, ssh=ssh, agent=agent, service=service)
    validate_site(site, origin=origin)
    return site


def validate_site(site: Site, *, origin: str = "<site>") -> None:
    names = [rank.name for rank in site.ranks]
    _no_duplicates(origin, "ranks[].name", names)
    link_names = [link.name for link in site.links]
    _no_duplicates(origin, "links[].name", link_names)
    validate_service_ranks(origin, site.service, site.ranks)
    known = set(names)
    links_by_name = {link.name: link for link in site.links}

    for index, link in enumerate(site.links):
        where = f"links[{index}].endpoints"
        first, second = link.endpoints
        if first == second:
            raise InputError(f"{origin}: {where}: a link needs two distinct endpoints, got {first!r} twice")
        for endpoint in link.endpoints:
            if endpoint not in known:
                raise InputError(f"{origin}: {where}: unknown rank {endpoint!r} (known: {sorted(known)})")
            if link.name not in site.rank(endpoint).fabric:
                raise InputError(
                    f"{origin}: {where}: rank {endpoint!r} declares no fabric address for link {link.name!r}"
                )

    addresses: dict[str, str] = {}
    for index, rank in enumerate(site.ranks):
        _claim_address(origin, addresses, rank.management, f"ranks[{index}].management")
        for link_name, address in sorted(rank.fabric.items()):
            where = f"ranks[{index}].fabric.{link_name}"
            named = links_by_name.get(link_name)
            if named is None:
                raise InputError(f"{origin}: {where}: unknown link {link_name!r} (known: {sorted(links_by_name)})")
            if rank.name not in named.endpoints:
                raise InputError(
                    f"{origin}: {where}: rank {rank.name!r} is not an endpoint of link {link_name!r} {list(named.endpoints)}"
                )
            _claim_address(origin, addresses, address, where)

    for index, name in enumerate(site.order):
        if name not in known:
            raise InputError(f"{origin}: order[{index}]: unknown rank {name!r} (known: {sorted(known)})")
    _no_duplicates(origin, "order", list(site.order))
    missing = known - set(site.order)
    if missing:
        raise InputError(f"{origin}: order: ranks {sorted(missing)} are not in the order")
    for index in range(len(site.order) - 1):
        first, second = site.order[index], site.order[index + 1]
        if site.link_between(first, second) is None:
            raise InputError(
                f"{origin}: order[{index}]..order[{index + 1}]: no link joins {first!r} and {second!r}"
            )
    if site.topology == "ring":
        if len(site.order) < 3:
            raise InputError(f"{origin}: topology: a ring needs at least three ranks, got {len(site.order)}")
        last, first = site.order[-1], site.order[0]
        if site.link_between(last, first) is None:
            raise InputError(
                f"{origin}: topology: the ring is not closed: no link joins the last rank {last!r} "
                f"back to the first {first!r}"
            )


def dump_site(site: Site) -> str:
    """Canonical TOML for a site: stable key order; ``parse_site(dump_site(s)) == s``."""
    lines = [f"schema = {_toml(SCHEMA)}", f"topology = {_toml(site.topology)}"]
    lines.append(f"order = {_toml(list(site.order))}")
    lines.append(f"agent = {_toml(list(site.agent))}")
    lines.append("")
    lines.append("[ssh]")
    for key in (
        "user",
        "port",
        "identity_file",
        "known_hosts_file",
        "cipher",
        "connect_timeout",
        "server_alive_interval",
        "server_alive_count_max",
        "strict_host_key_checking",
    ):
        value = getattr(site.ssh, key)
        if value is not None:
            lines.append(f"{key} = {_toml(value)}")
    if site.ssh.options:
        lines.append(f"options = {_toml(list(site.ssh.options))}")
    for rank in site.ranks:
        lines += ["", "[[ranks]]", f"name = {_toml(rank.name)}", f"ssh = {_toml(rank.ssh)}"]
        lines.append(f"management = {_toml(rank.management)}")
        lines.append(f"data_dir = {_toml(rank.data_dir)}")
        if rank.engine_args:
            lines.append(f"engine_args = {_toml(list(rank.engine_args))}")
        if rank.agent is not None:
            lines.append(f"agent = {_toml(list(rank.agent))}")
        if rank.number is not None:
            lines.append(f"rank = {rank.number}")
        if rank.env_file is not None:
            lines.append(f"env_file = {_toml(rank.env_file)}")
        fabric = ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in sorted(rank.fabric.items()))
        lines.append(f"fabric = {{ {fabric} }}" if fabric else "fabric = {}")
    for link in site.links:
        lines += ["", "[[links]]", f"name = {_toml(link.name)}"]
        lines.append(f"endpoints = {_toml(list(link.endpoints))}")
    if site.service is not None:
        lines += dump_service(site.service, _toml)
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        escaped = []
        for char in value:
            code = ord(char)
            if char == '"':
                escaped.append('\\"')
            elif char == "\\":
                escaped.append("\\\\")
            elif code < 0x20 or code == 0x7F:
                escaped.append(f"\\u{code:04x}")
            else:
                escaped.append(char)
        return '"' + "".join(escaped) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


# The extra ``-o`` settings a site may give: how the connection is negotiated and kept,
# never something OpenSSH runs or reads a command from (ProxyCommand, LocalCommand,
# PermitLocalCommand, KnownHostsCommand, Match exec, ProxyJump, ControlPath, Include, ...):
# the site file is data, and a fan-out must not execute it. Keys the [ssh] table sets itself
# are named there, so the site has one place for each.
_SSH_OPTIONS_ALLOWED = {
    key.lower(): key
    for key in (
        "AddressFamily", "CASignatureAlgorithms", "CheckHostIP", "Ciphers", "ConnectionAttempts",
        "GSSAPIAuthentication", "HashKnownHosts", "HostKeyAlgorithms", "HostbasedAuthentication",
        "IPQoS", "KbdInteractiveAuthentication", "KexAlgorithms", "MACs", "NumberOfPasswordPrompts",
        "PasswordAuthentication", "PreferredAuthentications", "PubkeyAcceptedAlgorithms",
        "PubkeyAuthentication", "RekeyLimit", "RequiredRSASize", "TCPKeepAlive", "UpdateHostKeys",
        "VerifyHostKeyDNS",
    )
}
_SSH_OPTIONS_OF_THE_TABLE = {
    "port": "ssh.port", "user": "ssh.user", "identityfile": "ssh.identity_file",
    "identitiesonly": "ssh.identity_file", "userknownhostsfile": "ssh.known_hosts_file",
    "stricthostkeychecking": "ssh.strict_host_key_checking", "connecttimeout": "ssh.connect_timeout",
    "serveraliveinterval": "ssh.server_alive_interval", "serveralivecountmax": "ssh.server_alive_count_max",
    "batchmode": "(always yes)", "loglevel": "(always ERROR)", "compression": "(always no)",
}
# an option value: algorithm lists, numbers, yes/no words; no spaces, quotes, % tokens or paths
_SSH_OPTION_VALUE = re.compile(r"[A-Za-z0-9@.,_+:-]{1,512}")
# What ssh reads in a path rather than taking it as written: at connect it expands %-tokens
# and ${VAR} in both (-i and UserKnownHostsFile); the -o line UserKnownHostsFile=... is also
# split at whitespace into several files, with quotes, backslashes and '#' parsed.
_SSH_PATH_EXPANDED = "%$"
_SSH_OPTION_PATH_PARSED = "\"'\\#"
# a user name, and a rank's ``[user@]host`` target: no character ssh refuses or a shell reads
_SSH_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,255}")
_SSH_TARGET = re.compile(r"(?:[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,255}@)?[A-Za-z0-9_.:%][A-Za-z0-9_.:%-]{0,1023}")


# The largest value of each integer field that is honoured as written, so that a typo is
# refused here, naming the file and key, rather than by ssh on every rank (it names neither)
# or by an overflow at the start. OpenSSH (openssh-portable): ``a2port`` takes 1..65535;
# ConnectTimeout and ServerAliveInterval are read by ``convtime`` (misc.c: at most INT_MAX
# seconds, else "invalid time value"), but ssh.c caps the connect timeout at INT_MAX
# milliseconds (commit 819b44e8, bz#3229) and ``ssh_packet_set_timeout`` (packet.c) caps
# interval × count there too, so a larger value is silently cut to ~24.8 days;
# ServerAliveCountMax is read by ``atoi_err`` (misc.c: strtonum 0..INT_MAX).
_INT_MAX = 2**31 - 1
_SSH_SECONDS = _INT_MAX // 1000
# [service] waits: a start or a stop longer than 30 days is a typo, not a plan (and the
# deadline time.monotonic() + it must stay a float; 10**309 overflowed).
MAX_SERVICE_WAIT = 30 * 86400
INTEGER_BOUNDS = {
    "ssh.port": 65535,
    "ssh.connect_timeout": _SSH_SECONDS,
    "ssh.server_alive_interval": _SSH_SECONDS,
    "ssh.server_alive_count_max": _INT_MAX,
    "service.ready_timeout": MAX_SERVICE_WAIT,
    "service.stop_timeout": MAX_SERVICE_WAIT,
}


def ssh_option_problem(option: str) -> str | None:
    """Why ``option`` may not be passed to ``ssh -o``, or None when the allow-list has it."""
    key, equals, value = option.partition("=")
    if not equals or not key.isascii() or not key.isalnum():
        return f"expected Key=Value (an OpenSSH option), got {option!r}"
    if key.lower() in _SSH_OPTIONS_OF_THE_TABLE:
        return f"{key} is set by {_SSH_OPTIONS_OF_THE_TABLE[key.lower()]}, not by ssh.options"
    if key.lower() not in _SSH_OPTIONS_ALLOWED:
        return (
            f"{key} is not an allowed OpenSSH option (a site file may not make ssh run or read "
            f"anything; allowed: {', '.join(sorted(_SSH_OPTIONS_ALLOWED.values()))})"
        )
    if not _SSH_OPTION_VALUE.fullmatch(value):
        return f"{key}: expected a value of letters, digits and @.,_+:- got {value!r}"
    return None


def _ssh_options(reader: _Reader, raw: Any) -> SshOptions:
    table = reader.table(raw, "ssh")
    reader.keys(table, "ssh", set(SshOptions.__dataclass_fields__))
    kwargs: dict[str, Any] = {}
    for key in ("user", "identity_file", "known_hosts_file", "cipher", "strict_host_key_checking"):
        if key in table:
            kwargs[key] = reader.string(table[key], f"ssh.{key}")
    if "options" in table:
        options = reader.strings(table["options"], "ssh.options")
        for index, option in enumerate(options):
            problem = ssh_option_problem(option)
            if problem:
                raise InputError(f"{reader.origin}: ssh.options[{index}]: {problem}")
        kwargs["options"] = tuple(options)
    if "user" in kwargs and not _SSH_USER.fullmatch(kwargs["user"]):
        raise reader.fail("ssh.user", "a user name of letters, digits, '.', '_', '-', '@' (not starting with '-' "
                          "or '@')", kwargs["user"])
    if "cipher" in kwargs and not _SSH_OPTION_VALUE.fullmatch(kwargs["cipher"]):
        raise reader.fail("ssh.cipher", "a cipher list of letters, digits and @.,_+:-", kwargs["cipher"])
    for key, refused in (("identity_file", _SSH_PATH_EXPANDED),
                         ("known_hosts_file", _SSH_PATH_EXPANDED + _SSH_OPTION_PATH_PARSED)):
        path = kwargs.get(key)
        if path is not None and any(char in refused or not char.isprintable() or
                                    (key == "known_hosts_file" and char.isspace()) for char in path):
            shown = " ".join(repr(char) for char in refused)
            spaces = "whitespace, " if key == "known_hosts_file" else ""
            raise reader.fail(f"ssh.{key}", f"a path without {spaces}control characters or {shown} (ssh would "
                              "split or expand them and read another file)", path)
    policy = kwargs.get("strict_host_key_checking", "yes")
    if policy not in ("yes", "accept-new"):
        raise reader.fail("ssh.strict_host_key_checking", '"yes" or "accept-new"', policy)
    for key in ("port", "connect_timeout", "server_alive_interval", "server_alive_count_max"):
        if key in table:
            kwargs[key] = reader.positive_int(table[key], f"ssh.{key}")
    return SshOptions(**kwargs)


def _rank(reader: _Reader, raw: dict[str, Any], where: str) -> Rank:
    reader.keys(raw, where, {"name", "ssh", "management", "data_dir", "fabric", "engine_args", "agent", "rank",
                             "env_file"})
    for required in ("name", "ssh", "management", "data_dir"):
        if required not in raw:
            raise InputError(f"{reader.origin}: {where}.{required}: missing")
    name = reader.name(raw["name"], f"{where}.name")
    management = reader.address(raw["management"], f"{where}.management")
    fabric_table = reader.table(raw.get("fabric", {}), f"{where}.fabric")
    fabric = {
        reader.name(link, f"{where}.fabric"): reader.address(address, f"{where}.fabric.{link}")
        for link, address in fabric_table.items()
    }
    ssh_target = reader.string(raw["ssh"], f"{where}.ssh")
    if ssh_target.startswith("-"):  # ssh would read it as an option (-oProxyCommand=...)
        raise reader.fail(f"{where}.ssh", "[user@]host, not an option", ssh_target)
    if not _SSH_TARGET.fullmatch(ssh_target):  # ssh refuses (or a ProxyCommand's shell reads) the rest
        raise reader.fail(f"{where}.ssh", "[user@]host of letters, digits, '.', '_', '-', ':', '%' "
                          "(a host name or address)", ssh_target)
    data_dir = reader.string(raw["data_dir"], f"{where}.data_dir")
    if not data_dir.startswith("/"):
        raise InputError(f"{reader.origin}: {where}.data_dir: expected an absolute path, got {data_dir!r}")
    agent = raw.get("agent")
    return Rank(
        name=name,
        ssh=ssh_target,
        management=management,
        data_dir=data_dir,
        fabric=fabric,
        engine_args=tuple(reader.strings(raw.get("engine_args", []), f"{where}.engine_args")),
        agent=None if agent is None else tuple(reader.strings(agent, f"{where}.agent", nonempty=True)),
        number=rank_number(reader, raw["rank"], f"{where}.rank") if "rank" in raw else None,
        env_file=rank_env_file(reader, raw["env_file"], f"{where}.env_file") if "env_file" in raw else None,
    )


def _link(reader: _Reader, raw: dict[str, Any], where: str) -> Link:
    reader.keys(raw, where, {"name", "endpoints"})
    if "name" not in raw:
        raise InputError(f"{reader.origin}: {where}.name: missing")
    endpoints = reader.strings(raw.get("endpoints"), f"{where}.endpoints")
    if len(endpoints) != 2:
        raise InputError(
            f"{reader.origin}: {where}.endpoints: a link has exactly two endpoints, got {len(endpoints)}"
        )
    return Link(name=reader.name(raw["name"], f"{where}.name"), endpoints=(endpoints[0], endpoints[1]))


def _claim_address(origin: str, claimed: dict[str, str], address: str, where: str) -> None:
    canonical = str(ipaddress.ip_address(address))
    if canonical in claimed:
        raise InputError(f"{origin}: {where}: address {address} is already used by {claimed[canonical]}")
    claimed[canonical] = where


def _no_duplicates(origin: str, where: str, values: list[str]) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise InputError(f"{origin}: {where}: duplicate {value!r}")
        seen.add(value)


class _Reader:
    """Typed access to a parsed TOML document; every refusal names the origin and path."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, where: str, expected: str, value: Any) -> InputError:
        return InputError(f"{self.origin}: {where}: expected {expected}, got {value!r}")

    def keys(self, table: dict[str, Any], where: str, allowed: set[str]) -> None:
        unknown = sorted(set(table) - allowed)
        if unknown:
            prefix = f"{where}." if where else ""
            raise InputError(
                f"{self.origin}: {prefix}{unknown[0]}: unknown key (allowed: {sorted(allowed)})"
            )

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "a table", value)
        return value

    def table_list(self, value: Any, where: str, *, allow_empty: bool = False) -> list[dict[str, Any]]:
        if value is None:
            raise InputError(f"{self.origin}: {where}: missing")
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self.fail(where, "an array of tables", value)
        if not value and not allow_empty:
            raise InputError(f"{self.origin}: {where}: expected at least one entry")
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, "a non-empty string", value)
        if "\x00" in value:
            raise self.fail(where, "a string without NUL", value)
        return value

    def strings(self, value: Any, where: str, *, nonempty: bool = False) -> list[str]:
        if value is None:
            raise InputError(f"{self.origin}: {where}: missing")
        if not isinstance(value, list):
            raise self.fail(where, "an array of strings", value)
        if nonempty and not value:
            raise InputError(f"{self.origin}: {where}: expected at least one entry")
        return [self.string(item, f"{where}[{index}]") for index, item in enumerate(value)]

    def name(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        if not all(char.isascii() and (char.isalnum() or char in "-_.") for char in text):
            raise self.fail(where, "a name of ASCII letters, digits, '-', '_' or '.'", value)
        return text

    def address(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            raise self.fail(where, "an IPv4 or IPv6 address", value) from None
        if not zone_names_interface(address):
            raise self.fail(where, "an IPv6 zone id after '%' that is an interface name or index", value)
        return str(address)

    def positive_int(self, value: Any, where: str) -> int:
        """An integer 1..the bound of the field ``where`` (``INTEGER_BOUNDS``)."""
        maximum = INTEGER_BOUNDS[where]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
            raise InputError(f"{self.origin}: {where}: expected a positive integer 1..{maximum}, got {shown_integer(value)}")
        return value


def shown_integer(value: Any) -> str:
    """``value`` in a message; a TOML integer may have thousands of digits, and then its
    size is what the message needs."""
    digits = len(str(abs(value))) if isinstance(value, int) else 0
    return f"an integer of {digits} digits" if digits > 40 else repr(value)
