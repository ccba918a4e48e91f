"""The site file's service part (distribute/site_service.py): rank numbers 0..N-1 without a
gap or a duplicate, known keys only, digests as digests; a broken service site is refused
by `sparkflake service` with exit 2 naming the file and field, before any connection."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.distribute.site import SCHEMA, Link, Rank, Site, dump_site, parse_site
from sparkflake.distribute.site_service import ServiceSettings

IMAGE = "sha256:" + "c" * 64
MANIFEST = "sha256:" + "d" * 64


def four_ranks(service: str = "", ranks: tuple[str, ...] = ("rank = 0", "rank = 1", "rank = 2", "rank = 3")) -> str:
    text = f'schema = "{SCHEMA}"\norder = ["s0", "s1", "s2", "s3"]\n'
    for index, extra in enumerate(ranks):
        text += (f'\n[[ranks]]\nname = "s{index}"\nssh = "root@192.0.2.{10 + index}"\n'
                 f'management = "192.0.2.{10 + index}"\ndata_dir = "/var/lib/sparkflake"\n{extra}\n')
    links = "".join(f'\n[[links]]\nname = "l{i}{i + 1}"\nendpoints = ["s{i}", "s{i + 1}"]\n' for i in range(3))
    fabric = {0: 'fabric = { l01 = "10.0.1.1" }', 1: 'fabric = { l01 = "10.0.1.2", l12 = "10.0.2.1" }',
              2: 'fabric = { l12 = "10.0.2.2", l23 = "10.0.3.1" }', 3: 'fabric = { l23 = "10.0.3.2" }'}
    for index, line in fabric.items():
        text = text.replace(f'management = "192.0.2.{10 + index}"\n', f'management = "192.0.2.{10 + index}"\n{line}\n')
    return text + links + (f"\n[service]\n{service}\n" if service else "")


GOOD_SERVICE = f'profile = "glm53-dflash7"\nenv_file = "/etc/sparkflake/runtime.env"\nimage = "{IMAGE}"\n' \
               f'manifest = "{MANIFEST}"\nready_timeout = 900'


def test_a_service_site_parses_with_its_numbers_and_settings() -> None:
    site = parse_site(four_ranks(GOOD_SERVICE), origin="site.toml")
    assert [rank.number for rank in site.ranks] == [0, 1, 2, 3]
    assert site.service == ServiceSettings(profile="glm53-dflash7", env_file="/etc/sparkflake/runtime.env",
                                           image=IMAGE, manifest=MANIFEST, ready_timeout=900)
    assert parse_site(dump_site(site)) == site


@pytest.mark.parametrize(("service", "ranks", "message"), [
    (GOOD_SERVICE, ("rank = 0", "rank = 1", "rank = 1", "rank = 3"),
     r"site.toml: ranks\[2\].rank: duplicate rank number 1 \(ranks\[1\] has it too\)"),
    (GOOD_SERVICE, ("rank = 0", "rank = 1", "rank = 3", "rank = 4"),
     r"site.toml: ranks\[\].rank: rank numbers must be 0..3 without a gap; missing 2"),
    (GOOD_SERVICE, ("rank = 1", "rank = 2", "rank = 3", "rank = 4"), r"missing 0"),
    (GOOD_SERVICE, ("rank = 0", "rank = 1", "rank = 2", ""), r"site.toml: ranks\[3\].rank: missing"),
    (GOOD_SERVICE, ("rank = 0", "rank = 1", "rank = 2", 'rank = "3"'), r"ranks\[3\].rank: expected a rank number"),
    (GOOD_SERVICE, ("rank = 0", "rank = 1", "rank = 2", "rank = 3\nport = 22"),
     r"site.toml: ranks\[3\].port: unknown key"),
    (GOOD_SERVICE + "\nimage_id = 1", None, r"site.toml: service.image_id: unknown key"),
    ('image = "sha256:abc"', None, r"site.toml: service.image: expected sha256:<64 lowercase hex>"),
    ('engine = "lxc"\nenv_file = "/e"', None, r"site.toml: service.engine: expected podman or docker"),
    ('env_file = "runtime.env"', None, r"site.toml: service.env_file: expected an absolute path"),
    ("ready_timeout = 0", None, r"site.toml: service.ready_timeout: expected a positive integer"),
    ("ready_timeout = 5", None, r"site.toml: ranks\[0\].env_file: missing \(and service.env_file is not set\)"),
    (GOOD_SERVICE + '\ntrusted_key = "cosign.pub"', None,
     r"site.toml: service.signatures: expected a value: service.trusted_key needs it"),
    (GOOD_SERVICE + '\nregistry_insecure = "yes"', None, r"site.toml: service.registry_insecure: expected true or false"),
])
def test_a_broken_service_site_is_refused_naming_the_field(service, ranks, message) -> None:
    text = four_ranks(service, ranks) if ranks else four_ranks(service)
    with pytest.raises(InputError, match=message):
        parse_site(text, origin="site.toml")


def test_a_fanout_site_needs_no_service_and_no_numbers() -> None:
    site = parse_site(four_ranks("", ("", "", "", "")))
    assert site.service is None and {rank.number for rank in site.ranks} == {None}


def service_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", "service", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("command", ["up", "down", "status", "rollback"])
def test_the_cli_refuses_a_broken_site_with_exit_2_before_any_connection(tmp_path: Path, command: str) -> None:
    site = tmp_path / "site.toml"
    # 192.0.2.0/24 is TEST-NET-1: were anything sent, it would go nowhere; nothing may be
    site.write_text(four_ranks(GOOD_SERVICE, ("rank = 0", "rank = 1", "rank = 1", "rank = 3")))
    refused = service_cli(command, str(site))
    assert refused.returncode == 2, refused.stderr
    assert f"{site}: ranks[2].rank: duplicate rank number 1" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "deployments").exists()


def test_an_unreachable_rank_is_bad_input_naming_its_ssh_field(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    site = tmp_path / "site.toml"
    text = four_ranks(GOOD_SERVICE).replace('ssh = "root@192.0.2.12"', 'ssh = "root@127.0.0.1"')
    site.write_text(text + f"\n[ssh]\nport = {port}\nconnect_timeout = 2\n")
    refused = service_cli("up", str(site))
    assert refused.returncode == 2, refused.stderr
    assert f"{site}: ranks[2].ssh: root@127.0.0.1 is unreachable" in refused.stderr, refused.stderr
    assert not (tmp_path / "deployments").exists()


def test_a_site_without_a_service_table_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(four_ranks("", ("", "", "", "")))
    refused = service_cli("up", str(site))
    assert refused.returncode == 2 and f"{site}: service: missing" in refused.stderr


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1,
                max_size=20)
_digest = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)


@st.composite
def service_sites(draw) -> Site:
    count = draw(st.integers(1, 5))
    numbers = draw(st.permutations(list(range(count))))
    own_env = draw(st.lists(st.none() | _text.map(lambda t: "/" + t), min_size=count, max_size=count))
    shared_env = draw(st.none() | _text.map(lambda t: "/" + t))
    if shared_env is None:
        own_env = [path or "/etc/runtime.env" for path in own_env]
    ranks = tuple(
        Rank(name=f"r{i}", ssh=f"root@10.9.0.{i + 1}", management=f"10.9.0.{i + 1}", data_dir="/d",
             fabric={**({f"l{i - 1}": f"10.8.{i}.2"} if i else {}), **({f"l{i}": f"10.8.{i + 1}.1"} if i < count - 1 else {})},
             number=numbers[i], env_file=own_env[i])
        for i in range(count)
    )
    links = tuple(Link(f"l{i}", (f"r{i}", f"r{i + 1}")) for i in range(count - 1))
    keyed = draw(st.none() | st.tuples(_text, _text))
    signing = {"registry_insecure": draw(st.booleans())}
    if keyed is not None:
        signing.update(trusted_key=keyed[0], signatures=keyed[1])
    service = ServiceSettings(
        name=draw(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True)), profile=draw(_text),
        env_file=shared_env, engine=draw(st.sampled_from(["podman", "docker"])), image=draw(st.none() | _digest),
        manifest=draw(st.none() | _digest), ready_timeout=draw(st.integers(1, 10**6)),
        stop_timeout=draw(st.integers(1, 600)), agent=tuple(draw(st.lists(_text, min_size=1, max_size=3))),
        record_dir=draw(_text), **signing)
    return Site(ranks=ranks, links=links, order=tuple(f"r{i}" for i in range(count)), service=service)


@given(service_sites())
def test_dump_then_parse_is_identity_with_a_service(site: Site) -> None:
    text = dump_site(site)
    assert parse_site(text) == site
    assert dump_site(parse_site(text)) == text


@given(service_sites(), st.data())
def test_any_duplicate_or_gap_in_the_numbers_is_refused(site: Site, data) -> None:
    count = len(site.ranks)
    victim = data.draw(st.integers(0, count - 1))
    other = data.draw(st.integers(0, count))  # a duplicate, or count (a gap)
    if other == site.ranks[victim].number:
        return
    ranks = list(site.ranks)
    ranks[victim] = dataclasses.replace(ranks[victim], number=other)
    with pytest.raises(InputError, match=r"ranks\[\d*\]\.rank: (duplicate rank number|rank numbers must be)"):
        parse_site(dump_site(dataclasses.replace(site, ranks=tuple(ranks))))
