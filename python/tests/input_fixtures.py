"""Small real inputs for offline tests: .deb files (built with dpkg-deb), wheels (zip files
with a correct RECORD), ELF header stubs, and a local HTTP server serving them.

Other stages' tests import these to build a fixture composition without the network:

    deb = make_deb(tmp, "libdemo1", "1.0-1", files={"usr/lib/aarch64-linux-gnu/libdemo.so.1": elf_stub()})
    whl = make_wheel(tmp, "demo", "1.0", files={"demo/__init__.py": b"x = 1\\n"})
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import os
import struct
import subprocess
import tarfile
import threading
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FIXED_ZIP_TIME = (2020, 1, 1, 0, 0, 0)
EM_AARCH64 = 183
EM_X86_64 = 62


def elf_stub(machine: int = EM_AARCH64, *, soname: str | None = None, elf_type: int = 3) -> bytes:
    """A minimal 64-bit little-endian ELF file: header, and with ``soname`` a dynamic section
    (section headers: null, .dynstr, .dynamic) so DT_SONAME can be read back."""
    if soname is None:
        header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
        header += struct.pack("<HHIQQQIHHHHHH", elf_type, machine, 1, 0, 0, 0, 0, 64, 56, 0, 64, 0, 0)
        return header + b"\0" * 64
    dynstr = b"\0" + soname.encode() + b"\0"
    dynamic = struct.pack("<qQ", 14, 1) + struct.pack("<qQ", 0, 0)
    dynstr_offset = 64
    dynamic_offset = dynstr_offset + len(dynstr)
    dynamic_offset += (-dynamic_offset) % 8
    shoff = dynamic_offset + len(dynamic)
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", elf_type, machine, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 3, 0)
    body = bytearray(header)
    body += dynstr
    body += b"\0" * (dynamic_offset - len(body))
    body += dynamic
    sections = [
        struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, dynstr_offset, len(dynstr), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dynamic_offset, len(dynamic), 1, 0, 8, 16),
    ]
    for section in sections:
        body += section
    return bytes(body)


# ----------------------------------------------------------------------------- .deb


@dataclass(frozen=True)
class DebFile:
    path: Path
    package: str
    version: str
    architecture: str
    sha256: str
    size: int


def make_deb(
    directory: Path,
    package: str,
    version: str,
    *,
    architecture: str = "arm64",
    files: Mapping[str, bytes] | None = None,
    symlinks: Mapping[str, str] | None = None,
    executables: tuple[str, ...] = (),
    depends: str = "",
    provides: str = "",
    compression: str = "xz",
    postinst: str | None = None,
) -> DebFile:
    """Build a real .deb with ``dpkg-deb --build`` (root-owned, fixed mtimes)."""
    tree = directory / f"{package}_{version}_{architecture}.tree"
    (tree / "DEBIAN").mkdir(parents=True)
    control = [
        f"Package: {package}",
        f"Version: {version}",
        f"Architecture: {architecture}",
        "Maintainer: sparkflake tests <tests@example.invalid>",
        f"Description: fixture package {package}",
    ]
    if depends:
        control.append(f"Depends: {depends}")
    if provides:
        control.append(f"Provides: {provides}")
    (tree / "DEBIAN/control").write_text("\n".join(control) + "\n", encoding="utf-8")
    if postinst is not None:
        script = tree / "DEBIAN/postinst"
        script.write_text(postinst, encoding="utf-8")
        script.chmod(0o755)
    md5 = []
    for relative, content in sorted((files or {}).items()):
        path = tree / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(0o755 if relative in executables else 0o644)
        md5.append(f"{hashlib.md5(content).hexdigest()}  {relative}\n")  # noqa: S324 (dpkg's format)
    for relative, target in sorted((symlinks or {}).items()):
        path = tree / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    if md5:
        (tree / "DEBIAN/md5sums").write_text("".join(md5), encoding="utf-8")
    for path in [tree, *tree.rglob("*")]:
        if not path.is_symlink():
            os.utime(path, (1_600_000_000, 1_600_000_000))
    output = directory / f"{package}_{version}_{architecture}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", f"-Z{compression}", "--build", str(tree), str(output)],
        check=True,
        capture_output=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": "1600000000"},
    )
    content = output.read_bytes()
    return DebFile(output, package, version, architecture, hashlib.sha256(content).hexdigest(), len(content))


def packages_stanza(deb: DebFile, *, depends: str = "", provides: str = "", filename: str | None = None) -> str:
    lines = [
        f"Package: {deb.package}",
        f"Version: {deb.version}",
        f"Architecture: {deb.architecture}",
        f"Filename: {filename or 'pool/main/' + deb.path.name}",
        f"Size: {deb.size}",
        f"SHA256: {deb.sha256}",
    ]
    if depends:
        lines.append(f"Depends: {depends}")
    if provides:
        lines.append(f"Provides: {provides}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- wheels


@dataclass(frozen=True)
class WheelFileFixture:
    path: Path
    name: str
    version: str
    filename: str
    sha256: str
    size: int


def _record_hash(content: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode().rstrip("=")


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    *,
    files: Mapping[str, bytes] | None = None,
    tag: str = "py3-none-any",
    entry_points: Mapping[str, str] | None = None,
    scripts: Mapping[str, bytes] | None = None,
    executables: tuple[str, ...] = (),
    record_override: Mapping[str, str] | None = None,
    extra_members: Mapping[str, bytes] | None = None,
) -> WheelFileFixture:
    """Write a wheel zip with WHEEL, METADATA, RECORD (fixed timestamps, sorted members).

    ``record_override`` replaces RECORD lines by path (to make a lying RECORD);
    ``extra_members`` adds zip members that RECORD does not list.
    """
    distribution = name.replace("-", "_")
    dist_info = f"{distribution}-{version}.dist-info"
    data_dir = f"{distribution}-{version}.data"
    members: dict[str, bytes] = dict(files or {})
    members[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    root_is_purelib = "true" if tag.endswith("-any") else "false"
    members[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: sparkflake-tests\nRoot-Is-Purelib: {root_is_purelib}\nTag: {tag}\n"
    ).encode()
    if entry_points:
        lines = ["[console_scripts]"] + [f"{k} = {v}" for k, v in sorted(entry_points.items())]
        members[f"{dist_info}/entry_points.txt"] = ("\n".join(lines) + "\n").encode()
    for script, content in (scripts or {}).items():
        members[f"{data_dir}/scripts/{script}"] = content
    record_lines = []
    for path, content in sorted(members.items()):
        line = f"{path},{_record_hash(content)},{len(content)}"
        if record_override and path in record_override:
            line = record_override[path]
        record_lines.append(line)
    record_lines.append(f"{dist_info}/RECORD,,")
    members[f"{dist_info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    members.update(extra_members or {})
    filename = f"{distribution}-{version}-{tag}.whl"
    output = directory / filename
    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(members, key=lambda p: (p.startswith(dist_info), p)):
            info = zipfile.ZipInfo(path, FIXED_ZIP_TIME)
            executable = path in executables or path.startswith(f"{data_dir}/scripts/")
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, members[path])
    content = output.read_bytes()
    return WheelFileFixture(output, name, version, filename, hashlib.sha256(content).hexdigest(), len(content))


# ----------------------------------------------------------------------------- HTTP server


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[str, bytes]] = {}

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        return

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        behaviour, content = self.routes.get(self.path, ("404", b""))
        if behaviour == "404":
            self.send_error(404)
            return
        if behaviour == "truncate":
            self.send_response(200)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content[: len(content) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        start = 0
        range_header = self.headers.get("Range")
        if behaviour == "range" and range_header and range_header.startswith("bytes="):
            start = int(range_header[len("bytes=") :].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        else:
            self.send_response(200)
        body = content[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclass
class FixtureServer:
    base_url: str
    routes: dict[str, tuple[str, bytes]]
    requests: list[str]

    def serve(self, path: str, content: bytes, behaviour: str = "ok") -> str:
        """Serve ``content`` at ``path``; behaviour: ok, range, truncate, 404."""
        self.routes[path] = (behaviour, content)
        return self.base_url + path


@contextmanager
def fixture_server() -> Iterator[FixtureServer]:
    """A threaded HTTP server on 127.0.0.1 (free port), stopped on exit."""
    routes: dict[str, tuple[str, bytes]] = {}
    handler = type("FixtureHandler", (_Handler,), {"routes": routes})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield FixtureServer(f"http://127.0.0.1:{server.server_address[1]}", routes, [])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def tree_snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``root``: kind, permission bits, and bytes (files) or target (links)."""
    snapshot: dict[str, tuple[str, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        status = path.lstat()
        if path.is_symlink():
            snapshot[relative] = ("link", 0, os.readlink(path).encode())
        elif path.is_dir():
            snapshot[relative] = ("dir", status.st_mode & 0o7777, b"")
        else:
            snapshot[relative] = ("file", status.st_mode & 0o7777, path.read_bytes())
    return snapshot


def zip_bytes(members: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            archive.writestr(zipfile.ZipInfo(name, FIXED_ZIP_TIME), content)
    return buffer.getvalue()


@dataclass(frozen=True)
class RawMember:
    """A tar member for ``make_raw_deb``: kind file, dir, symlink or hardlink."""

    name: str
    kind: str = "file"
    content: bytes = b""
    link: str = ""
    mode: int = 0o644


def _ar_entry(name: str, content: bytes) -> bytes:
    header = f"{name:<16}{0:<12}{0:<6}{0:<6}{0o100644:<8o}{len(content):<10}`\n".encode()
    return header + content + (b"\n" if len(content) % 2 else b"")


def make_raw_deb(
    directory: Path,
    package: str,
    version: str,
    members: list[RawMember],
    *,
    architecture: str = "arm64",
    corrupt_data: bool = False,
) -> DebFile:
    """A .deb written member by member (ar + gzip tars), for inputs dpkg-deb refuses to build:
    absolute or ``..`` member names, symlinks out of the tree, damaged data members."""

    def tar_of(entries: list[tarfile.TarInfo], contents: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as archive:
            for info in entries:
                archive.addfile(info, io.BytesIO(contents[info.name]) if info.isreg() else None)
        return buffer.getvalue()

    control_text = (
        f"Package: {package}\nVersion: {version}\nArchitecture: {architecture}\n"
        "Maintainer: sparkflake tests <tests@example.invalid>\nDescription: raw fixture\n"
    ).encode()
    control_info = tarfile.TarInfo("./control")
    control_info.size = len(control_text)
    control_tar = tar_of([control_info], {"./control": control_text})
    infos = []
    contents: dict[str, bytes] = {}
    for member in members:
        info = tarfile.TarInfo(member.name)
        info.mode = member.mode
        info.mtime = 1_600_000_000
        if member.kind == "dir":
            info.type = tarfile.DIRTYPE
        elif member.kind == "symlink":
            info.type = tarfile.SYMTYPE
            info.linkname = member.link
        elif member.kind == "hardlink":
            info.type = tarfile.LNKTYPE
            info.linkname = member.link
        elif member.kind == "fifo":
            info.type = tarfile.FIFOTYPE
        else:
            info.size = len(member.content)
            contents[member.name] = member.content
        infos.append(info)
    data_tar = tar_of(infos, contents)
    if corrupt_data:
        middle = len(data_tar) // 2
        data_tar = data_tar[:middle] + bytes(b ^ 0x5A for b in data_tar[middle : middle + 64]) + data_tar[middle + 64 :]
    content = (
        b"!<arch>\n"
        + _ar_entry("debian-binary", b"2.0\n")
        + _ar_entry("control.tar.gz", control_tar)
        + _ar_entry("data.tar.gz", data_tar)
    )
    output = directory / f"{package}_{version}_{architecture}.deb"
    output.write_bytes(content)
    return DebFile(output, package, version, architecture, hashlib.sha256(content).hexdigest(), len(content))
