"""Offline assembly of a small real composition: .deb files built with dpkg-deb, wheels
with a real RECORD; two runs give byte-identical trees; every bad input is refused by name
and leaves nothing behind."""

from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
from fixtures.inputs import (
    EM_X86_64,
    RawMember,
    elf_stub,
    make_deb,
    make_raw_deb,
    make_wheel,
    tree_snapshot,
)
from fixtures.ld_so_cache import parse_cache

from sparkflake.compose.debian_base import DebInput, assemble_base
from sparkflake.compose.elf import check_machine, iter_elf_files
from sparkflake.compose.locked_inputs import load_policy, policy_path_for
from sparkflake.compose.package_license import StatedLicense, wheel_license
from sparkflake.compose.python_env import (
    CollisionRule,
    RecordWaiver,
    WheelInput,
    assemble_python_env,
)
from sparkflake.compose.source_overlay import wheel_native_files
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.core.tree_digest import nar_hash
from sparkflake.lock.lock_file import load_lock
from sparkflake.oci.tree_paths import host_path_of

MULTIARCH = "usr/lib/aarch64-linux-gnu"
REPO = Path(__file__).resolve().parents[3]


def _deb_input(deb) -> DebInput:  # noqa: ANN001 (fixture record)
    return DebInput(deb.package, deb.version, deb.architecture, deb.path)


def _wheel_input(wheel) -> WheelInput:  # noqa: ANN001
    return WheelInput(wheel.name, wheel.version, wheel.filename, wheel.path)


@pytest.fixture
def composition(tmp_path: Path) -> tuple[list[DebInput], list[WheelInput]]:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    passwd = b"root:*:0:0:root:/root:/bin/bash\nnobody:*:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    debs = [
        make_deb(
            inputs,
            "base-files",
            "12.4",
            files={"etc/debian_version": b"12.4\n", "usr/lib/os-release": b'ID=debian\nVERSION_ID="12"\n'},
            symlinks={"etc/os-release": "../usr/lib/os-release"},
        ),
        make_deb(
            inputs,
            "base-passwd",
            "3.6.1",
            files={"usr/share/base-passwd/passwd.master": passwd, "usr/share/base-passwd/group.master": b"root:*:0:\n"},
        ),
        make_deb(
            inputs,
            "libc6",
            "2.36-9",
            files={
                f"{MULTIARCH}/libc.so.6": elf_stub(soname="libc.so.6"),
                "etc/ld.so.conf.d/aarch64-linux-gnu.conf": b"/usr/local/lib/aarch64-linux-gnu\n/lib/aarch64-linux-gnu\n",
                "lib/ld-linux-aarch64.so.1": elf_stub(soname="ld-linux-aarch64.so.1"),
            },
            compression="zstd",
        ),
        make_deb(
            inputs,
            "libdemo1",
            "1.0-1",
            files={f"{MULTIARCH}/libdemo.so.1.0.0": elf_stub(soname="libdemo.so.1")},
            symlinks={f"{MULTIARCH}/libdemo.so.1": "libdemo.so.1.0.0"},
            compression="gzip",
        ),
        make_deb(
            inputs,
            "python3.11-minimal",
            "3.11.2-6",
            files={"usr/bin/python3.11": elf_stub(elf_type=2)},
            executables=("usr/bin/python3.11",),
            postinst="#!/bin/sh\necho must not run > /tmp/sparkflake-postinst-ran\n",
        ),
        make_deb(
            inputs,
            "tzdata",
            "2026a",
            architecture="all",
            files={"usr/share/zoneinfo/Etc/UTC": b"TZif2 fixture\n"},
        ),
        make_deb(
            inputs,
            "ca-certificates",
            "20250419",
            architecture="all",
            files={
                "usr/share/ca-certificates/mozilla/B_Root.crt": b"-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----",
                "usr/share/ca-certificates/mozilla/A_Root.crt": b"-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n",
            },
        ),
    ]
    wheels = [
        make_wheel(
            inputs,
            "demo-app",
            "1.0",
            files={"demo_app/__init__.py": b"def main():\n    return 0\n"},
            entry_points={"demo-app": "demo_app:main"},
            scripts={"demo-tool": b"#!python\nprint('tool')\n"},
        ),
        make_wheel(
            inputs,
            "demo-native",
            "2.0",
            tag="cp311-cp311-manylinux_2_28_aarch64",
            files={
                "demo_native/__init__.py": b"",
                "demo_native/_core.abi3.so": elf_stub(),
                "shared/LICENSE": b"same bytes\n",
            },
        ),
        make_wheel(
            inputs,
            "demo-extra",
            "0.1",
            files={"demo_extra/__init__.py": b"", "shared/LICENSE": b"same bytes\n"},
        ),
    ]
    return [_deb_input(d) for d in debs], [_wheel_input(w) for w in wheels]


def test_two_runs_give_identical_trees(tmp_path: Path, composition) -> None:  # noqa: ANN001
    debs, wheels = composition
    for run in ("one", "two"):
        assemble_base(debs, tmp_path / run / "base")
        assemble_python_env(wheels, tmp_path / run / "python", workers=2 if run == "one" else 1)
    for part in ("base", "python"):
        assert tree_snapshot(tmp_path / "one" / part) == tree_snapshot(tmp_path / "two" / part)
        assert nar_hash(tmp_path / "one" / part) == nar_hash(tmp_path / "two" / part)


def test_base_tree_contents(tmp_path: Path, composition) -> None:  # noqa: ANN001
    debs, _ = composition
    manifest = assemble_base(debs, tmp_path / "base")
    root = tmp_path / "base"
    assert os.readlink(root / "lib") == "usr/lib"
    assert (root / "usr/lib/ld-linux-aarch64.so.1").is_file()  # written through the merged-usr link
    assert os.readlink(root / "etc/os-release") == "../usr/lib/os-release"
    assert (root / "usr/bin/python3.11").stat().st_mode & 0o777 == 0o755
    assert os.readlink(root / "usr/bin/python3") == "python3.11"
    assert not Path("/tmp/sparkflake-postinst-ran").exists()
    assert (root / "etc/passwd").read_text().startswith("root:*:0:0:")
    assert (root / "etc/shadow").read_text().splitlines()[1].startswith("nobody:*:")
    assert (root / "etc/shadow").stat().st_mode & 0o777 == 0o640
    bundle = (root / "etc/ssl/certs/ca-certificates.crt").read_bytes()
    assert bundle.index(b"AAA") < bundle.index(b"BBB") and bundle.endswith(b"-----END CERTIFICATE-----\n")
    assert os.readlink(root / "etc/ssl/certs/A_Root.pem") == "/usr/share/ca-certificates/mozilla/A_Root.crt"
    assert os.readlink(root / "etc/localtime") == "/usr/share/zoneinfo/Etc/UTC"
    status = (root / "var/lib/dpkg/status").read_text()
    assert "Package: libdemo1\nStatus: install ok installed\n" in status
    assert "/usr/lib/aarch64-linux-gnu/libdemo.so.1\n" in (root / "var/lib/dpkg/info/libdemo1.list").read_text()
    entries = {e.soname: e for e in parse_cache((root / "etc/ld.so.cache").read_bytes())}
    assert entries["libdemo.so.1"].path == "/lib/aarch64-linux-gnu/libdemo.so.1"
    assert entries["libc.so.6"].flags == 0x0A03
    assert manifest.ld_so_cache_entries == len(entries) >= 3
    # the host's glibc tools read the generated cache (a host binary reading data, not a target binary)
    printed = subprocess.run(["ldconfig", "-p", "-C", str(root / "etc/ld.so.cache")], capture_output=True, text=True, check=True).stdout
    assert "libdemo.so.1 (libc6,AArch64) => /lib/aarch64-linux-gnu/libdemo.so.1" in printed


def test_python_env_contents(tmp_path: Path, composition) -> None:  # noqa: ANN001
    _, wheels = composition
    manifest = assemble_python_env(wheels, tmp_path / "env")
    venv = tmp_path / "env/opt/venv"
    site = venv / "lib/python3.11/site-packages"
    script = (venv / "bin/demo-app").read_text()
    assert script.startswith("#!/opt/venv/bin/python\n") and "demo_app" in script
    assert (venv / "bin/demo-tool").read_text() == "#!/opt/venv/bin/python\nprint('tool')\n"
    assert (venv / "bin/demo-app").stat().st_mode & 0o777 == 0o755
    assert (site / "demo_app-1.0.dist-info/INSTALLER").read_bytes() == b"sparkflake\n"
    record = (site / "demo_app-1.0.dist-info/RECORD").read_text()
    assert "demo_app/__init__.py,sha256=" in record and "../../../bin/demo-app,sha256=" in record
    assert os.readlink(venv / "bin/python") == "/usr/bin/python3.11"
    assert "home = /usr/bin\n" in (venv / "pyvenv.cfg").read_text()
    assert not list(venv.rglob("*.pyc")) and not list(venv.rglob("__pycache__"))
    assert (site / "shared/LICENSE").read_bytes() == b"same bytes\n"
    assert manifest.shared_identical == [
        {"path": "/opt/venv/lib/python3.11/site-packages/shared/LICENSE", "wheels": ["demo_extra-0.1-py3-none-any.whl", "demo_native-2.0-cp311-cp311-manylinux_2_28_aarch64.whl"]}
    ]
    assert manifest.owners["/opt/venv/lib/python3.11/site-packages/demo_native/_core.abi3.so"].startswith("demo_native-2.0")
    elves = list(iter_elf_files(tmp_path / "env", with_sha256=True))
    assert [e.path for e in elves] == ["opt/venv/lib/python3.11/site-packages/demo_native/_core.abi3.so"]
    assert elves[0].machine_name == "aarch64" and len(elves[0].sha256) == 64


# ----------------------------------------------------------------------------- refusals


def _refused(call, match: str, output: Path) -> CheckFailed:  # noqa: ANN001
    with pytest.raises(CheckFailed, match=match) as caught:
        call()
    assert not output.exists(), "a refused assembly must leave nothing behind"
    assert not [p for p in output.parent.iterdir() if p.name.startswith(f".{output.name}.")]
    return caught.value


def test_deb_for_another_architecture(tmp_path: Path, composition) -> None:  # noqa: ANN001
    debs, _ = composition
    amd64 = make_deb(tmp_path, "libx", "1.0", architecture="amd64", files={"usr/lib/x": b"x"})
    out = tmp_path / "base"
    _refused(lambda: assemble_base([*debs, _deb_input(amd64)], out), r"libx \(libx_1.0_amd64.deb\): built for 'amd64'", out)


@pytest.mark.parametrize("soname", ["../../../../../../../../../escaped.so.1", "sub/libx.so.1", ".."])
def test_a_soname_that_is_a_path_is_refused(tmp_path: Path, composition, soname: str) -> None:  # noqa: ANN001
    debs, _ = composition
    evil = make_deb(tmp_path, "libevil1", "1.0", files={f"{MULTIARCH}/libevil.so.1.0": elf_stub(soname=soname)})
    out = tmp_path / "base"
    _refused(lambda: assemble_base([*debs, _deb_input(evil)], out),
             rf"/libevil\.so\.1\.0: its DT_SONAME '{re.escape(soname)}' is not a file name", out)
    assert not Path("/escaped.so.1").exists()


def test_corrupt_data_member(tmp_path: Path) -> None:
    members = [RawMember(f"./usr/share/doc/f{i}", content=os.urandom(4096)) for i in range(8)]
    deb = make_raw_deb(tmp_path, "broken", "1.0", members, corrupt_data=True)
    out = tmp_path / "base"
    _refused(lambda: assemble_base([_deb_input(deb)], out), r"broken .*data.tar.gz is damaged", out)


@pytest.mark.parametrize(
    ("members", "match"),
    [
        ([RawMember("./../escape", content=b"x")], r"contains '\.\.'"),
        ([RawMember("/etc/evil", content=b"x")], r"absolute path"),
        ([RawMember("./usr/out", kind="symlink", link="../../../../tmp")], r"points outside the image root"),
        ([RawMember("./dev/fifo", kind="fifo")], r"FIFO"),
    ],
)
def test_deb_member_escapes(tmp_path: Path, members: list[RawMember], match: str) -> None:
    deb = make_raw_deb(tmp_path, "evil", "1.0", members)
    out = tmp_path / "base"
    _refused(lambda: assemble_base([_deb_input(deb)], out), match, out)


def test_write_through_symlink_that_points_out(tmp_path: Path) -> None:
    members = [
        RawMember("./usr/", kind="dir", mode=0o755),
        RawMember("./usr/share", kind="symlink", link="../../outside"),
        RawMember("./usr/share/evil", content=b"x"),
    ]
    deb = make_raw_deb(tmp_path, "climb", "1.0", members)
    out = tmp_path / "base"
    _refused(lambda: assemble_base([_deb_input(deb)], out), r"climb .*symlink 'usr/share' -> '\.\./\.\./outside' points outside", out)
    assert not (tmp_path / "outside").exists()


def test_resolver_never_follows_a_link_out_of_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    os.symlink("../../..", root / "usr/up")
    os.symlink("/usr", root / "abs")
    with pytest.raises(CheckFailed, match="above the image root"):
        host_path_of(root, "usr/up/etc/passwd", source="test")
    # absolute targets are the image's own root, never the build machine's
    assert host_path_of(root, "abs/lib/x", source="test") == root / "usr/lib/x"


def test_conflicting_files_between_packages(tmp_path: Path) -> None:
    one = make_deb(tmp_path, "one", "1", files={"etc/same": b"one\n"})
    two = make_deb(tmp_path, "two", "1", files={"etc/same": b"two\n"})
    out = tmp_path / "base"
    _refused(lambda: assemble_base([_deb_input(one), _deb_input(two)], out), r"two .*/etc/same differs from the copy one installed", out)


def test_wheel_for_another_platform(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "foreign", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64", files={"foreign/__init__.py": b""})
    out = tmp_path / "env"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out), r"foreign-1.0-cp311-cp311-manylinux_2_17_x86_64.whl: tags .* do not fit", out)


def test_wheel_needing_newer_glibc(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "newer", "1.0", tag="cp311-cp311-manylinux_2_39_aarch64", files={"newer/__init__.py": b""})
    out = tmp_path / "env"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out), r"do not fit", out)


def test_wheel_record_disagrees(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path,
        "liar",
        "1.0",
        files={"liar/__init__.py": b"print('real')\n"},
        record_override={"liar/__init__.py": "liar/__init__.py,sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,14"},
    )
    out = tmp_path / "env"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out, workers=1), r"liar-1.0-py3-none-any.whl: liar/__init__.py does not match its RECORD", out)


def test_wheel_member_missing_from_record(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "sneaky", "1.0", files={"sneaky/__init__.py": b""}, extra_members={"sneaky/hidden.py": b"x"})
    out = tmp_path / "env"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out, workers=1), r"sneaky/hidden.py is not mentioned in RECORD", out)


def test_wheel_member_escapes(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "escaper", "1.0", files={"escaper/__init__.py": b"", "../../etc/evil": b"x"})
    out = tmp_path / "env"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out, workers=1), r"escaper-1.0-py3-none-any.whl: member '\.\./\.\./etc/evil' escapes", out)


def _damage_member(wheel: Path, member: str, how: str) -> None:
    """Damage one member of a zip in place: ``method`` names a compression method zipfile
    lacks (99, in the local and the central header), ``deflate`` flips bytes of its data."""
    data = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as archive:
        local = archive.getinfo(member).header_offset
    if how == "method":
        struct.pack_into("<H", data, local + 8, 99)
        central = data.find(b"PK\x01\x02")
        while central != -1:
            (name_length,) = struct.unpack_from("<H", data, central + 28)
            if data[central + 46 : central + 46 + name_length] == member.encode():
                struct.pack_into("<H", data, central + 10, 99)
            central = data.find(b"PK\x01\x02", central + 4)
    else:
        name_length, extra_length = struct.unpack_from("<HH", data, local + 26)
        start = local + 30 + name_length + extra_length
        data[start + 2 : start + 12] = bytes(byte ^ 0xFF for byte in data[start + 2 : start + 12])
    wheel.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("how", "reason"),
    [("method", "That compression method is not supported"), ("deflate", "Error -3 while decompressing data")],
)
def test_a_damaged_wheel_member_is_refused_by_the_wheels_name(tmp_path: Path, how: str, reason: str) -> None:
    """zipfile raises these outside BadZipFile (NotImplementedError, zlib.error): each reader
    of a wheel names the wheel instead of a traceback."""
    wheel = make_wheel(tmp_path, "demo", "1.0", files={"demo/__init__.py": b"x = 1\n" * 2000, "demo/_core.so": elf_stub()})
    _damage_member(wheel.path, "demo/__init__.py", how)
    out = tmp_path / "env"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out, workers=1),
             rf"^\[wheel-install\] demo-1\.0-py3-none-any\.whl: cannot install: {reason}", out)
    _damage_member(wheel.path, "demo/_core.so", how)
    with pytest.raises(InputError, match=rf"^{re.escape(str(wheel.path))}: cannot read wheel: {reason}"):
        wheel_native_files(wheel.path, "demo")


def test_a_wheel_whose_metadata_is_damaged_has_its_license_stated_unreadable(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", files={"demo/__init__.py": b""})
    _damage_member(wheel.path, "demo-1.0.dist-info/METADATA", "method")
    stated = wheel_license(wheel.path)
    assert stated == StatedLicense(None, "metadata unreadable: That compression method is not supported")


def test_two_wheels_write_one_path_differently(tmp_path: Path) -> None:
    first = make_wheel(tmp_path, "first", "1.0", files={"common/data.txt": b"first\n"})
    second = make_wheel(tmp_path, "second", "1.0", files={"common/data.txt": b"second\n"})
    out = tmp_path / "env"
    _refused(
        lambda: assemble_python_env([_wheel_input(first), _wheel_input(second)], out),
        r"/opt/venv/lib/python3.11/site-packages/common/data.txt is written by first-1.0-py3-none-any.whl and by second-1.0-py3-none-any.whl",
        out,
    )


def test_foreign_elf_inside_a_wheel(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "hidden-x86", "1.0", files={"hidden_x86/lib.so": elf_stub(EM_X86_64)})
    out = tmp_path / "env"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out), r"hidden_x86/lib.so \(x86_64\)", out)


def test_check_machine_names_every_file(tmp_path: Path) -> None:
    (tmp_path / "a.so").write_bytes(elf_stub(EM_X86_64))
    (tmp_path / "b.so").write_bytes(elf_stub())
    (tmp_path / "notes.txt").write_bytes(b"\x7fELF but too short")
    with pytest.raises(CheckFailed, match=r"a.so \(x86_64\)") as caught:
        check_machine(tmp_path)
    assert "b.so" not in str(caught.value) and "notes.txt" not in str(caught.value)


def test_check_machine_amd64_refuses_aarch64(tmp_path: Path) -> None:
    (tmp_path / "b.so").write_bytes(elf_stub())
    with pytest.raises(CheckFailed, match=r"b.so \(aarch64\)"):
        check_machine(tmp_path, "linux/amd64")


def test_member_disagreeing_with_md5sums(tmp_path: Path) -> None:
    deb = make_deb(tmp_path, "rotten", "1.0", files={"usr/share/rotten/data": b"good bytes\n"})
    # rebuild the same package with other bytes but the first package's md5sums
    tree = tmp_path / "rotten_1.0_arm64.tree"
    (tree / "usr/share/rotten/data").write_bytes(b"evil bytes\n")
    (tmp_path / "rotten_1.0_arm64.deb").unlink()
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb.path)], check=True, capture_output=True)
    out = tmp_path / "base"
    _refused(lambda: assemble_base([_deb_input(deb)], out), r"rotten .*/usr/share/rotten/data is corrupt", out)


# "da\udcffta": the byte 0xff, no UTF-8 (a name's bytes as Python's file system encoding keeps them)
@pytest.mark.parametrize("name", ["data\r", "da\x85ta", "da\u2028ta", "da\x0bta", "da\x1eta", "da\udcffta"])
def test_member_whose_path_holds_a_line_break_other_than_newline_is_checked(tmp_path: Path, name: str) -> None:
    # dpkg's md5sums lines end at "\n" only: str.splitlines cut this member's line in two,
    # so its md5 was lost and the corrupt member unpacked unchecked
    relative = f"usr/share/rotten/{name}"
    deb = make_deb(tmp_path, "rotten", "1.0", files={relative: b"good bytes\n"})
    tree = tmp_path / "rotten_1.0_arm64.tree"
    (tree / relative).write_bytes(b"evil bytes\n")
    (tmp_path / "rotten_1.0_arm64.deb").unlink()
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb.path)], check=True, capture_output=True)
    out = tmp_path / "base"
    _refused(lambda: assemble_base([_deb_input(deb)], out), rf"rotten .*/{re.escape(relative)} is corrupt", out)


def test_collision_rule_keeps_the_named_wheel(tmp_path: Path) -> None:
    first = make_wheel(tmp_path, "first", "1.0", files={"common/data.txt": b"first\n", "junk.py": b"a"})
    second = make_wheel(tmp_path, "second", "1.0", files={"common/data.txt": b"second\n", "junk.py": b"b"})
    site = "/opt/venv/lib/python3.11/site-packages"
    rules = (
        CollisionRule(f"{site}/common/data.txt", keep=second.filename, drop=(first.filename,), reason="test"),
        CollisionRule(f"{site}/junk.py", keep=None, drop=(first.filename, second.filename)),
    )
    manifest = assemble_python_env([_wheel_input(first), _wheel_input(second)], tmp_path / "env", collisions=rules)
    assert (tmp_path / f"env{site}/common/data.txt").read_bytes() == b"second\n"
    assert not (tmp_path / f"env{site}/junk.py").exists()
    assert manifest.owners[f"{site}/common/data.txt"] == second.filename
    assert [c["path"] for c in manifest.collisions] == [f"{site}/common/data.txt", f"{site}/junk.py"]
    stale = (CollisionRule(f"{site}/other.txt", keep=first.filename, drop=(second.filename,)),)
    out = tmp_path / "stale"
    _refused(
        lambda: assemble_python_env([_wheel_input(first), _wheel_input(second)], out, collisions=rules + stale),
        r"collision rule for .*/other.txt names .* but none of them wrote it",
        out,
    )


def test_record_waiver_accepts_exact_bytes_only(tmp_path: Path) -> None:
    content = b"print('real')\n"
    wheel = make_wheel(
        tmp_path,
        "liar",
        "1.0",
        files={"liar/__init__.py": content},
        record_override={"liar/__init__.py": "liar/__init__.py,sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,3"},
    )
    exact = RecordWaiver(wheel.filename, wheel.sha256, "liar/__init__.py", hashlib.sha256(content).hexdigest(), len(content))
    manifest = assemble_python_env([_wheel_input(wheel)], tmp_path / "env", waivers=(exact,), workers=1)
    assert manifest.waived[0]["path"] == "liar/__init__.py"
    record = (tmp_path / "env/opt/venv/lib/python3.11/site-packages/liar-1.0.dist-info/RECORD").read_text()
    assert "AAAAAAAA" not in record  # the installed RECORD describes the installed bytes
    other = RecordWaiver(wheel.filename, wheel.sha256, "liar/__init__.py", "0" * 64, len(content))
    out = tmp_path / "refused"
    _refused(lambda: assemble_python_env([_wheel_input(wheel)], out, waivers=(other,), workers=1), r"the waiver expects sha256 0{64}", out)


def test_policy_file_is_bound_to_the_lock(tmp_path: Path) -> None:
    lock = load_lock(REPO / "profiles" / "glm53.lock")
    policy = load_policy(policy_path_for(REPO / "profiles" / "glm53.lock"), lock)
    assert {w.path.rsplit("/", 1)[-1] for w in policy.waivers} == {
        "PyNvVideoCodec_121.cpython-311-aarch64-linux-gnu.so",
        "PyNvVideoCodec_130.cpython-311-aarch64-linux-gnu.so",
    }
    assert any(rule.keep and rule.keep.startswith("b12x-") for rule in policy.collisions)
    text = policy_path_for(REPO / "profiles" / "glm53.lock").read_text()
    moved = tmp_path / "glm53.assembly-policy.toml"
    moved.write_text(text.replace(policy.waivers[0].wheel_sha256, "1" * 64, 1))
    with pytest.raises(CheckFailed, match="a waiver never carries over to other bytes"):
        load_policy(moved, lock)
