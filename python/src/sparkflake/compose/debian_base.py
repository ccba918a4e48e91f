"""The OS base tree from .deb files, without dpkg and without running any target binary.

Each package's data member is unpacked into the staging tree: symlinks kept, permission
bits of files kept, directories writable by their owner. Owners, setuid/setgid/sticky bits
are never applied to the tree (a build without the right to set them, as in Nix's sandbox,
makes the same tree); the entries that carry them are recorded in the manifest. The layer
writer decides the modes and owners in the image (``oci/layer_tree``). Maintainer scripts
are not run. What they would have done that a container
needs is done here, declaratively, in this order (docs/inputs.md lists the same steps):

1. merged /usr: ``bin``, ``sbin``, ``lib`` are symlinks into ``usr/`` before unpacking, as
   debootstrap makes them for bookworm;
2. ``/etc/passwd``, ``/etc/group`` copied from base-passwd's masters (base-passwd's
   postinst), ``/etc/shadow`` and ``/etc/gshadow`` with locked passwords;
3. ``/etc/ld.so.conf`` (libc-bin's content) and ``/etc/ld.so.cache`` generated in Python;
4. ca-certificates: ``/etc/ca-certificates.conf``, ``/etc/ssl/certs/*.pem`` links and the
   ``ca-certificates.crt`` bundle (update-ca-certificates);
5. tzdata: ``/etc/localtime`` → ``/usr/share/zoneinfo/Etc/UTC``, ``/etc/timezone``;
6. the ``python3`` alternative ``/usr/bin/python3`` (shipped by python3-minimal; checked);
7. dpkg's database: ``/var/lib/dpkg/status`` and ``info/<package>.list`` / ``.md5sums``,
   so package scanners and ``dpkg -l`` in the container see what is installed.

Bytecode for the Debian Python stdlib is not compiled (python3.11-minimal's postinst would):
absent bytecode is deterministic; see docs/inputs.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..core.atomic_write import atomic_directory, write_new_file
from ..core.elf_machines import EM_AARCH64
from ..core.errors import CheckFailed
from ..core.file_names import require_utf8_names
from ..core.progress import ProgressCallback
from ..oci.tree_paths import check_link_target, host_path_of, normalize_member, resolve_parent
from .deb_archive import ARCHIVE_ERRORS, ar_members, find_member, open_tar_member, read_control
from .elf import PLATFORM_MACHINE, check_machine
from .ld_so_cache import write_ld_so_cache

MERGED_USR = (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"))
DEFAULT_TIMEZONE = "Etc/UTC"
LD_SO_CONF = "include /etc/ld.so.conf.d/*.conf\n\n"
SHADOW_LASTCHANGE = "19000"  # fixed day number: the tree must not depend on the build date

DECLARATIVE_STEPS = (
    "merged-usr symlinks bin, sbin, lib -> usr/*",
    "/etc/passwd, /etc/group from base-passwd masters; /etc/shadow, /etc/gshadow locked",
    "/etc/ld.so.conf and /etc/ld.so.cache generated (no ldconfig run)",
    "ca-certificates: /etc/ca-certificates.conf, /etc/ssl/certs/*.pem, ca-certificates.crt",
    "tzdata: /etc/localtime -> /usr/share/zoneinfo/Etc/UTC, /etc/timezone",
    "python3 alternative /usr/bin/python3 -> python3.11 (checked)",
    "dpkg database: /var/lib/dpkg/status, info/*.list, info/*.md5sums",
)


@dataclass(frozen=True)
class DebInput:
    """One locked package and the verified file holding it."""

    package: str
    version: str
    architecture: str
    path: Path


@dataclass
class BaseManifest:
    packages: list[dict[str, object]] = field(default_factory=list)
    # Entries whose owner is not root or whose mode has setuid/setgid/sticky bits, as the
    # package says; neither is applied to the tree.
    ownership: list[dict[str, object]] = field(default_factory=list)
    ld_so_cache_entries: int = 0
    elf_files: int = 0
    steps: tuple[str, ...] = DECLARATIVE_STEPS


@dataclass
class _Owner:
    package: str
    sha256: str | None  # None for directories and symlinks
    link: str | None = None


@contextlib.contextmanager
def _writing(target: Path, source: str) -> Iterator[None]:
    """Writing the tree failed (no space, no permission): say so with the path. Errors
    reading the package stay outside, reported as a damaged member."""
    try:
        yield
    except OSError as exc:
        raise CheckFailed(
            f"{source}: cannot write {target} in the OS base tree: {exc.strerror or exc}",
            check_id="base-tree-write",
        ) from exc


def _copy_hashing(stream: IO[bytes], destination: Path, mode: int, source: str) -> tuple[str, str]:  # a tar member
    """Write the member, returning (sha256, md5) of its bytes from the same pass."""
    hasher = hashlib.sha256()
    md5 = hashlib.md5()  # noqa: S324 (dpkg's md5sums format, an integrity check, not security)
    with _writing(destination, source):
        out = open(destination, "wb")  # noqa: SIM115 (closed below; the read is outside _writing)
    try:
        while chunk := stream.read(1 << 20):
            hasher.update(chunk)
            md5.update(chunk)
            with _writing(destination, source):
                out.write(chunk)
    finally:
        # the close writes what is still buffered: its error (a full disk) is the tree's too,
        # never taken for the package's (a flush that failed once fails again at the close)
        with _writing(destination, source):
            out.close()
    with _writing(destination, source):
        os.chmod(destination, mode)
    return hasher.hexdigest(), md5.hexdigest()


def parse_md5sums(text: str) -> dict[str, str]:
    """dpkg's md5sums: ``<md5>  <path>\n`` lines. A line ends at ``\n`` only, as dpkg reads
    it: a path may hold ``\r``, ``\x0b``, ``\x1c``-``\x1e``, U+0085 or U+2028, which
    ``str.splitlines`` would also break at, losing that member's md5 (and its check)."""
    sums: dict[str, str] = {}
    for line in text.split("\n"):
        digest, _, path = line.partition("  ")
        if digest and path:
            sums[path.removeprefix("./").lstrip("/")] = digest
    return sums


def _check_md5(md5sums: dict[str, str], relative: str, md5: str, source: str) -> None:
    expected = md5sums.get(relative)
    if expected is not None and expected != md5:
        raise CheckFailed(
            f"{source}: member /{relative} is corrupt (md5 {md5}, the package's md5sums say {expected})",
            check_id="deb-archive",
        )


def unpack_deb(
    deb: DebInput,
    root: Path,
    owners: dict[str, _Owner],
    manifest: BaseManifest,
    *,
    architecture: str,
) -> list[str]:
    """Unpack one package's data member into ``root``; returns its dpkg file list."""
    source = f"{deb.package} ({deb.path.name})"
    control = read_control(deb.path)
    if control.architecture not in (architecture, "all"):
        raise CheckFailed(
            f"{source}: built for {control.architecture!r}, the image is {architecture}",
            check_id="deb-architecture",
        )
    if control.package != deb.package or control.version != deb.version:
        raise CheckFailed(
            f"{source}: control says {control.package} {control.version}, lock says "
            f"{deb.package} {deb.version}",
            check_id="deb-identity",
        )
    file_list: list[str] = []
    md5sums = parse_md5sums(control.md5sums)
    with open(deb.path, "rb") as handle:
        member = find_member(ar_members(handle, source=source), "data.tar", source=source)
        try:
            with open_tar_member(handle, member, source=source) as archive:
                for entry in archive:
                    _unpack_entry(archive, entry, root, owners=owners, manifest=manifest, deb=deb,
                                  file_list=file_list, source=source, md5sums=md5sums)
        except ARCHIVE_ERRORS as exc:
            raise CheckFailed(f"{source}: {member.name} is damaged: {exc}", check_id="deb-archive") from exc
    return file_list


def _unpack_entry(
    archive: tarfile.TarFile,
    entry: tarfile.TarInfo,
    root: Path,
    *,
    owners: dict[str, _Owner],
    manifest: BaseManifest,
    deb: DebInput,
    file_list: list[str],
    source: str,
    md5sums: dict[str, str],
) -> None:
    relative = normalize_member(entry.name, source=source)
    file_list.append("/" + relative if relative else "/.")
    if not relative:
        return
    special_bits = entry.mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
    if entry.uid != 0 or entry.gid != 0 or special_bits:
        manifest.ownership.append(
            {"path": "/" + relative, "mode": f"{entry.mode & 0o7777:04o}", "uid": entry.uid, "gid": entry.gid,
             "user": entry.uname, "group": entry.gname, "package": deb.package}
        )
    target = host_path_of(root, relative, source=source)
    # Permission bits only: the Nix sandbox refuses setuid/setgid modes (base-files'
    # /var/local is 2775), and an unprivileged builder cannot give files away. The layer
    # writer normalizes modes anyway, so the image bytes do not depend on these bits.
    mode = entry.mode & 0o777
    previous = owners.get(relative)
    existing = os.lstat(target) if os.path.lexists(target) else None
    if entry.isdir():
        if existing is None:
            # owner-writable, so an unprivileged builder can unpack into it and remove it
            with _writing(target, source):
                os.mkdir(target, mode | stat.S_IRWXU)
                os.chmod(target, mode | stat.S_IRWXU)
            owners[relative] = _Owner(deb.package, None)
        elif stat.S_ISLNK(existing.st_mode):
            if not target.is_dir():
                raise CheckFailed(f"{source}: directory {relative!r} is a dangling symlink in the tree", check_id="path-conflict")
        elif not stat.S_ISDIR(existing.st_mode):
            raise CheckFailed(
                f"{source}: directory {relative!r} collides with a file from {previous.package if previous else 'the tree'}",
                check_id="path-conflict",
            )
        return
    if entry.issym():
        check_link_target(relative, entry.linkname, source=source)
        if existing is not None:
            if stat.S_ISLNK(existing.st_mode) and os.readlink(target) == entry.linkname:
                return
            raise CheckFailed(
                f"{source}: symlink {relative!r} -> {entry.linkname!r} collides with "
                f"{'a different entry' if previous is None else previous.package}",
                check_id="path-conflict",
            )
        with _writing(target, source):
            os.symlink(entry.linkname, target)
        owners[relative] = _Owner(deb.package, None, entry.linkname)
        return
    if entry.islnk():
        linked = normalize_member(entry.linkname, source=source)
        linked_path = host_path_of(root, linked, source=source)
        if not linked_path.is_file() or linked_path.is_symlink():
            raise CheckFailed(f"{source}: hardlink {relative!r} -> {linked!r}: no such regular file in the tree", check_id="path-escape")
        if existing is not None:
            raise CheckFailed(f"{source}: hardlink {relative!r} collides with an existing entry", check_id="path-conflict")
        with _writing(target, source):
            os.link(linked_path, target)
        owners[relative] = owners.get(linked, _Owner(deb.package, None))
        return
    if not entry.isreg():
        raise CheckFailed(
            f"{source}: member {entry.name!r} is a device, FIFO or other special file; refused",
            check_id="deb-special-file",
        )
    stream = archive.extractfile(entry)
    if stream is None:
        raise CheckFailed(f"{source}: cannot read member {entry.name!r}", check_id="deb-archive")
    if existing is not None:
        if not stat.S_ISREG(existing.st_mode):
            raise CheckFailed(f"{source}: file {relative!r} collides with a non-file entry", check_id="path-conflict")
        staging = target.with_name(target.name + ".sparkflake-new")
        digest, md5 = _copy_hashing(stream, staging, mode, source)
        _check_md5(md5sums, relative, md5, source)
        if previous is not None and previous.sha256 == digest:
            staging.unlink()
            return
        staging.unlink()
        raise CheckFailed(
            f"{source}: /{relative} differs from the copy {previous.package if previous else 'already in the tree'} installed",
            check_id="path-conflict",
        )
    digest, md5 = _copy_hashing(stream, target, mode, source)
    _check_md5(md5sums, relative, md5, source)
    owners[relative] = _Owner(deb.package, digest)


def _write_text(root: Path, relative: str, text: str, mode: int = 0o644) -> None:
    target = host_path_of(root, relative, source="declarative step")
    if os.path.lexists(target):
        os.unlink(target)
    write_new_file(target, text.encode("utf-8"))
    os.chmod(target, mode)


def _symlink(root: Path, relative: str, link: str) -> None:
    target = host_path_of(root, relative, source="declarative step")
    if os.path.lexists(target):
        os.unlink(target)
    os.symlink(link, target)


def _accounts(root: Path) -> None:
    masters = root / "usr/share/base-passwd"
    passwd_master = masters / "passwd.master"
    group_master = masters / "group.master"
    passwd = passwd_master.read_text(encoding="utf-8") if passwd_master.is_file() else "root:x:0:0:root:/root:/bin/sh\n"
    group = group_master.read_text(encoding="utf-8") if group_master.is_file() else "root:x:0:\n"
    _write_text(root, "etc/passwd", passwd)
    _write_text(root, "etc/group", group)
    users = [line.split(":", 1)[0] for line in passwd.splitlines() if line]
    groups = [line.split(":", 1)[0] for line in group.splitlines() if line]
    _write_text(root, "etc/shadow", "".join(f"{u}:*:{SHADOW_LASTCHANGE}:0:99999:7:::\n" for u in users), 0o640)
    _write_text(root, "etc/gshadow", "".join(f"{g}:*::\n" for g in groups), 0o640)


def _ca_certificates(root: Path) -> int:
    certs_dir = root / "usr/share/ca-certificates"
    if not certs_dir.is_dir():
        return 0
    names = sorted(
        str(path.relative_to(certs_dir)).replace(os.sep, "/")
        for path in certs_dir.rglob("*.crt")
        if path.is_file()
    )
    _write_text(
        root,
        "etc/ca-certificates.conf",
        "# Generated by sparkflake (ca-certificates postinst equivalent): every certificate enabled.\n"
        + "".join(f"{name}\n" for name in names),
    )
    bundle = bytearray()
    for name in names:
        content = (certs_dir / name).read_bytes()
        bundle += content if content.endswith(b"\n") else content + b"\n"
        pem = os.path.basename(name)[: -len(".crt")].replace(" ", "_").replace("(", "=").replace(")", "=").replace(",", "_")
        _symlink(root, f"etc/ssl/certs/{pem}.pem", f"/usr/share/ca-certificates/{name}")
    target = host_path_of(root, "etc/ssl/certs/ca-certificates.crt", source="ca-certificates")
    write_new_file(target, bytes(bundle))
    os.chmod(target, 0o644)
    return len(names)


def _dpkg_database(root: Path, installed: Sequence[tuple[DebInput, dict[str, str], str, list[str]]]) -> None:
    info = resolve_parent(root, "var/lib/dpkg/info/x", source="dpkg database")
    stanzas = []
    for deb, fields, md5sums, file_list in sorted(installed, key=lambda item: item[0].package):
        ordered = {"Package": fields.get("Package", deb.package), "Status": "install ok installed"}
        for key, value in fields.items():
            if key not in ordered:
                ordered[key] = value
        stanzas.append("".join(f"{k}: {v.replace(chr(10), chr(10) + ' ')}\n" for k, v in ordered.items()))
        list_name = deb.package if deb.architecture == "all" or fields.get("Multi-Arch") != "same" else f"{deb.package}:{deb.architecture}"
        # paths are the members' bytes (tarfile and the md5sums reader keep a name that is no
        # UTF-8 as surrogates): written back as they were
        write_new_file(info / f"{list_name}.list",
                       "".join(f"{path.rstrip('/')}\n" if path != "/." else "/.\n" for path in file_list)
                       .encode("utf-8", "surrogateescape"))
        if md5sums:
            write_new_file(info / f"{list_name}.md5sums", md5sums.encode("utf-8", "surrogateescape"))
    status = resolve_parent(root, "var/lib/dpkg/status", source="dpkg database") / "status"
    write_new_file(status, "\n".join(stanzas).encode("utf-8"))
    for name in ("available", "diversions", "statoverride"):
        path = root / "var/lib/dpkg" / name
        if not path.exists():
            write_new_file(path, b"")


def assemble_base(
    debs: Sequence[DebInput],
    output: str | os.PathLike[str],
    *,
    platform: str = "linux/arm64",
    architecture: str = "arm64",
    progress: ProgressCallback | None = None,
) -> BaseManifest:
    """Build the OS base tree at ``output`` (atomically: all or nothing).

    Refused unless Python's file system encoding is UTF-8: member and certificate names
    are written into the tree's files (``/etc/ca-certificates.conf``, dpkg's ``*.list``) as
    UTF-8, so under an ISO-8859-1 locale "Főtanúsítvány" became "FÅtanÃºsÃ­tvÃ¡ny" there,
    and a tree cache keeps such a tree for every later build. The CLI runs in UTF-8 mode."""
    require_utf8_names("the OS base (its file lists name files)")
    manifest = BaseManifest()
    machine = PLATFORM_MACHINE.get(platform, EM_AARCH64)
    ordered = sorted(debs, key=lambda d: d.package)
    with atomic_directory(output) as root:
        os.chmod(root, 0o755)
        for link, target in MERGED_USR:
            (root / target).mkdir(parents=True, exist_ok=True)
            os.symlink(target, root / link)
        owners: dict[str, _Owner] = {}
        installed = []
        for position, deb in enumerate(ordered):
            if progress:
                progress(position, len(ordered), deb.package)
            files = unpack_deb(deb, root, owners, manifest, architecture=architecture)
            control = read_control(deb.path)
            installed.append((deb, control.fields, control.md5sums, files))
            manifest.packages.append(
                {"package": deb.package, "version": deb.version, "architecture": deb.architecture, "files": len(files)}
            )
        if progress:
            progress(len(ordered), len(ordered), "declarative steps")
        _accounts(root)
        conf = root / "etc/ld.so.conf"
        if not conf.exists():
            _write_text(root, "etc/ld.so.conf", LD_SO_CONF)
        manifest.ld_so_cache_entries = len(write_ld_so_cache(root, machine))
        _ca_certificates(root)
        if (root / "usr/share/zoneinfo" / DEFAULT_TIMEZONE).exists():
            _symlink(root, "etc/localtime", f"/usr/share/zoneinfo/{DEFAULT_TIMEZONE}")
            _write_text(root, "etc/timezone", DEFAULT_TIMEZONE + "\n")
        python3 = root / "usr/bin/python3"
        if not os.path.lexists(python3) and (root / "usr/bin/python3.11").exists():
            os.symlink("python3.11", python3)
        _dpkg_database(root, installed)
        manifest.elf_files = check_machine(root, platform)
        manifest.ownership.sort(key=lambda o: str(o["path"]))
    return manifest

