"""The OS base writes member and certificate names into its files (/etc/ca-certificates.conf,
dpkg's *.list) as the bytes the names have in the tree, whatever the locale: under an
ISO-8859-1 locale the names were decoded as ISO-8859-1 and written back as UTF-8, so
ca-certificates' "Főtanúsítvány" became "FÅtanÃºsÃ­tvÃ¡ny" in both files (another
os-base layer, and a tree cache kept it for later builds); under LC_ALL=C with
PYTHONUTF8=0 the assembly failed with a UnicodeEncodeError traceback. The CLI runs in
UTF-8 mode; assemble_base refuses any other file system encoding."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from fixtures.inputs import make_deb

from sparkflake.compose.debian_base import DebInput, assemble_base
from sparkflake.core.errors import InputError

CERTIFICATE = "usr/share/ca-certificates/mozilla/NetLock_Arany_=Class_Gold=_Főtanúsítvány.crt"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> DebInput:
    deb = make_deb(tmp_path_factory.mktemp("debs"), "ca-certificates", "1", architecture="all",
                   files={CERTIFICATE: b"-----BEGIN CERTIFICATE-----\n"})
    return DebInput(deb.package, deb.version, deb.architecture, deb.path)


def test_certificate_names_are_written_as_their_bytes_in_the_tree(certificates: DebInput, tmp_path: Path) -> None:
    assemble_base([certificates], tmp_path / "base")
    base = tmp_path / "base"
    name = CERTIFICATE.encode("utf-8")
    on_disk = os.listdir(os.fsencode(base / "usr/share/ca-certificates/mozilla"))
    assert on_disk == [name.rpartition(b"/")[2]]
    assert name.removeprefix(b"usr/share/ca-certificates/") + b"\n" in (base / "etc/ca-certificates.conf").read_bytes()
    assert b"/" + name + b"\n" in (base / "var/lib/dpkg/info/ca-certificates.list").read_bytes()


@pytest.mark.parametrize("encoding", ["iso8859-1", "ascii"])
def test_another_file_system_encoding_is_refused_before_anything_is_written(
    certificates: DebInput, encoding: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: encoding)
    with pytest.raises(InputError, match=f"file system encoding is {encoding}, not UTF-8"):
        assemble_base([certificates], tmp_path / "base")
    assert not (tmp_path / "base").exists()
