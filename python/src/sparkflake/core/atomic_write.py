"""Atomic outputs: write beside the target, fsync, rename. An interrupted run leaves the
previous good state, never a half-written file under the final name. Also the one
in-kernel byte copy between open files (``copy_bytes``) the writers share.

The staging names of the large outputs (``atomic_directory``, ``atomic_stream``) and the
run directories carry the host, the process id, a random token and a check of all that:
``.NAME.<host>.pid<N>.<token><check>.partial`` (``generated_name``). Cleanup removes only
names whose check holds, so an operator's ``.out.myhost.pid1.backup.old`` is never taken
for a leftover. A run killed
outright (SIGKILL, power loss) cannot clean up after itself; the next run for the same
target on the same host removes what a dead process left there (``remove_leftovers``),
and if a directory swap was cut between its two renames, puts the previous directory
back first. A directory is swapped in with one ``renameat2(RENAME_EXCHANGE)`` where the
file system has it (ext4, xfs, btrfs, tmpfs), so the target never goes missing.

An output directory an operator names carries a marker (``OUTPUT_MARKER``) listing every
path written into it, each file with its size and modification time; it is replaced only
while it holds nothing else and nothing listed changed (``check_replaceable_output``). A
file sparkflake rewrites there later stays listed (``_entry_record``), one it adds is
listed by ``record_written_entry``, in the marker before the file is renamed into place.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from .direct_write import DirectWriter
from .directory_lock import updating_output
from .documents import file_kind
from .errors import InputError
from .interrupts import interrupts_held

# re-exported: the marker's name, where its callers have always found it
from .output_marker import OUTPUT_MARKER as OUTPUT_MARKER
from .output_marker import check_replaceable_output as check_marked_output
from .output_marker import marker_bytes, output_paths, read_marker, written_state

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


def host_tag() -> str:
    """This host's name as it stands in staging names (letters, digits, ``_``, ``-``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def generated_name(prefix: str, suffix: str = "", pid: int | None = None) -> str:
    """``PREFIX.<host>.pid<N>.<token><check>SUFFIX``: 8 random hex digits, then 8 of the
    sha256 of what precedes them, so ``generated_name_parts`` recognises exactly the names made here."""
    base = f"{prefix}.{host_tag()}.pid{os.getpid() if pid is None else pid}.{secrets.token_hex(4)}"
    return base + _name_check(base) + suffix


def _name_check(base: str) -> str:
    return hashlib.sha256(b"sparkflake generated name\0" + base.encode()).hexdigest()[:8]


_GENERATED = re.compile(r"(?P<base>(?P<prefix>.+)\.(?P<host>[A-Za-z0-9_-]+)\.pid(?P<pid>[0-9]+)\.[0-9a-f]{8})"
                        r"(?P<check>[0-9a-f]{8})(?P<suffix>\.partial|\.old)?")


def generated_name_parts(name: str) -> re.Match[str] | None:
    """The parts of a name ``generated_name`` made (its check holds), else None."""
    match = _GENERATED.fullmatch(name)
    return match if match is not None and match["check"] == _name_check(match["base"]) else None


def _make_generated(parent: Path, prefix: str, suffix: str, make: Callable[[Path], None]) -> Path:
    """``make`` (an exclusive create) a fresh generated name in ``parent``."""
    while True:
        path = parent / generated_name(prefix, suffix)
        try:
            make(path)
        except FileExistsError:
            continue
        return path


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one that is not ours counts)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: the number does not fit a pid_t
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(target: Path) -> list[Path]:
    """Remove the staging and retired entries of ``target`` left by processes of this host
    that are gone; returns what was removed. If ``target`` is missing and a dead process
    left a retired directory (a swap cut between its renames), that one is moved back
    to ``target`` first (the newest, when there are several)."""
    host = host_tag()
    prefix = f".{target.name}"
    dead: list[tuple[Path, str]] = []
    try:
        siblings = [entry for entry in os.scandir(target.parent) if entry.name.startswith(prefix + ".")]
    except FileNotFoundError:
        return []
    for entry in siblings:
        match = generated_name_parts(entry.name)
        if (match and match["prefix"] == prefix and match["suffix"] and match["host"] == host
                and int(match["pid"]) != os.getpid() and not process_alive(int(match["pid"]))):
            dead.append((Path(entry.path), match["suffix"]))
    retired = sorted((path for path, kind in dead if kind == ".old"), key=lambda path: path.lstat().st_mtime_ns)
    if retired and not os.path.lexists(target):
        os.replace(retired[-1], target)
        dead = [(path, kind) for path, kind in dead if path != retired[-1]]
    for path, _ in dead:
        _remove(path)
    return [path for path, _ in dead]


def check_replaceable_output(target: Path, *, force: bool = False) -> None:
    """``output_marker.check_replaceable_output``, after the run directories of this host's
    sparkflake runs inside the output ``target`` are dealt with (an export's work directory
    beside the archive it writes into OUT): a dead run's is removed, and a live run's is
    refused naming it. Both were refused as entries sparkflake did not write, with --force
    offered: a killed export left one that stopped every later build into OUT."""
    if not force and target.is_dir() and not target.is_symlink() and read_marker(target) is not None:
        remove_dead_run_directories(target, ".")
        for entry in sorted(os.listdir(target)):
            match = generated_name_parts(entry)
            if match is not None and not match["suffix"] and match["host"] == host_tag():
                raise InputError(f"{target}: another sparkflake run (pid {match['pid']}) is writing into it "
                                 f"({entry}); run this again once it has finished")
    check_marked_output(target, force=force)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def remove_tree(path: Path) -> None:
    """``rmtree`` that also empties directories without write permission (a tree holding
    a package's 0555 directory cannot be removed by a non-root user otherwise)."""

    def writable_and_retry(function: Callable[[str], object], failed_path: str, _exc_info: object) -> None:
        parent = os.path.dirname(failed_path)
        with contextlib.suppress(OSError):
            os.chmod(parent, os.stat(parent).st_mode | 0o700)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, os.stat(failed_path).st_mode | 0o700)
            function(failed_path)

    try:
        shutil.rmtree(path, onerror=writable_and_retry)
    except RecursionError:  # Python 3.11's rmtree recurses once per directory level
        raise InputError(f"{path}: a tree too deep to remove here (a chain of directories beyond Python's "
                         "recursion limit); sparkflake left it as it is: remove it by hand (rm -rf)") from None


def remove_dead_run_directories(parent: Path, prefix: str = "") -> list[Path]:
    """Remove the run directories in ``parent`` (names starting with ``prefix``) whose
    recorded process is gone on this host: what a killed run left. A live run's, another
    host's (a shared cache) or a name of another shape is never touched."""
    removed: list[Path] = []
    host = host_tag()
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        match = generated_name_parts(entry.name)
        if not entry.name.startswith(prefix) or match is None or match["suffix"] or match["host"] != host:
            continue
        pid = int(match["pid"])
        if pid != os.getpid() and not process_alive(pid) and entry.is_dir(follow_symlinks=False):
            remove_tree(Path(entry.path))
            removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def run_directory(parent: Path, name: str) -> Iterator[Path]:
    """``make_run_directory``'s directory for the body, removed after it whatever ends the
    body; an interrupt cannot land between the directory's making and this cover
    (``interrupts_held``)."""
    made: Path | None = None
    try:
        with interrupts_held():
            made = make_run_directory(parent, name)
        yield made
    finally:
        if made is not None:
            with interrupts_held():  # an interrupt during the removal is delivered after it
                remove_tree(made)


def make_run_directory(parent: Path, name: str) -> Path:
    """A fresh directory ``parent/NAME.<host>.pid<N>.<token><check>`` for this run, after
    what dead runs left in ``parent`` is removed. The caller removes it when done."""
    parent.mkdir(parents=True, exist_ok=True)
    remove_dead_run_directories(parent, f"{name}.")
    return _make_generated(parent, name, "", lambda path: path.mkdir(0o700))


def regular_output(path: str | os.PathLike[str]) -> Path:
    """The file an output written to ``path`` replaces: ``path`` with its symlinks resolved
    (a link stays a link; the file it names gets the new bytes), which must be absent or a
    regular file. A device, a FIFO, a socket or a directory is refused (InputError): the
    rename that makes a write atomic would replace the node itself (a host's /dev/full was
    turned into a JSON file this way)."""
    shown = os.fspath(path)
    resolved = Path(os.path.realpath(shown))
    try:
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        return resolved
    except OSError as exc:
        raise InputError(f"{shown}: cannot write: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        through = f" (through a symlink to {resolved})" if os.fspath(resolved) != os.path.abspath(shown) else ""
        raise InputError(f"{shown}: is {file_kind(mode)}{through}; an output is written to a regular file "
                         "only (choose a file path)")
    return resolved


@contextlib.contextmanager
def _staged_fd(target: Path, mode: int, *, tagged: bool = False, listed: bool = False) -> Iterator[int]:
    """A temporary file beside ``target``; on clean exit fsynced and renamed onto it.
    ``tagged``: the name carries host and pid (see the module docstring); ``listed``: see
    ``write_bytes_atomic``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd: int | None = None
    tmp_name: str | None = None
    try:
        # held back until the file made is named here, for the except below
        with interrupts_held():
            if tagged:
                created: list[int] = []
                tmp_name = os.fspath(_make_generated(
                    target.parent, f".{target.name}", ".partial", lambda path: created.append(
                        os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))))
                fd = created[0]
            else:
                fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
        try:
            yield fd
            os.fsync(fd)
        finally:
            os.close(fd)
            fd = None
        os.chmod(tmp_name, mode)
        # in an output (its marker beside it): from the marker's read to the rename, one writer
        # of OUT at a time, as an export is (two at once each rewrote the marker from what it
        # had read before the other wrote, and one's entry was lost)
        with updating_output(target.parent) if _in_output(target) else contextlib.nullcontext():
            record = _entry_record(target, listed)
            # the marker's record and the rename, both or neither: an interrupt between them
            # left a marker listing a file that was never renamed in, and OUT not replaceable
            with interrupts_held():
                if record is not None:
                    record(Path(tmp_name))  # before the rename: a marker that cannot be written leaves both as they were
                os.replace(tmp_name, target)
    except BaseException:
        with interrupts_held():  # an interrupt during the cleanup is delivered after it
            if fd is not None:
                os.close(fd)
            if tmp_name is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_name)
        raise


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: int = 0o644, *, listed: bool = False) -> Iterator[BinaryIO]:
    """Yield a binary file object; on clean exit it replaces ``path`` (``regular_output``)
    atomically. Its write errors name ``path`` (``NamedWrites``); ``listed``: see
    ``write_bytes_atomic``."""
    target = regular_output(path)
    with _staged_fd(target, mode, listed=listed) as fd, NamedWrites(fd, target) as handle:
        yield handle


class NamedWrites(io.BufferedWriter):
    """A buffered writer of ``fd`` (closed with it only if ``closefd``) whose OS errors
    writing, flushing or closing name ``name``: the kernel's error (a full disk) names no
    file, and the one line the CLI prints of it would say "No space left on device" and not
    where."""

    def __init__(self, fd: int, name: str | os.PathLike[str], *, closefd: bool = False) -> None:
        super().__init__(io.FileIO(fd, "wb", closefd=closefd))
        self.shown = os.fspath(name)

    def write(self, data: ReadableBuffer) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            raise self._named(exc) from exc

    def flush(self) -> None:  # close() flushes through this too
        try:
            super().flush()
        except OSError as exc:
            raise self._named(exc) from exc

    def _named(self, exc: OSError) -> OSError:
        if exc.filename is not None or exc.errno is None:
            return exc
        return OSError(exc.errno, exc.strerror, self.shown)  # the errno's own subclass


@contextlib.contextmanager
def atomic_stream(path: str | os.PathLike[str], mode: int = 0o644, *, direct: bool = True) -> Iterator[DirectWriter]:
    """Like ``atomic_file`` for long sequential outputs: yields a ``DirectWriter`` (bytes
    and file ranges, written past the page cache unless ``direct`` is False). Errors
    writing, syncing or renaming are ``InputError``s naming ``path``."""
    target = regular_output(path)
    try:
        remove_leftovers(target)
        with _staged_fd(target, mode, tagged=True) as fd:
            writer = DirectWriter(fd, os.fspath(target), direct=direct)
            try:
                yield writer
            except BaseException:
                writer.abort()
                raise
            writer.finish()
    except OSError as exc:  # creating, fsyncing or renaming the staged file
        raise InputError(f"{target}: cannot write: {exc.strerror or exc}") from exc


def open_new_file(path: str | os.PathLike[str]) -> NamedWrites:
    """``path`` created or truncated for writing, as ``open(path, "wb")`` opens it: a file of
    a staging directory, made whole by that directory's rename. An error writing it (a full
    disk) names ``path`` (``NamedWrites``)."""
    name = os.fspath(path)  # an error opening it names it as NamedWrites does: one string
    return NamedWrites(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666), name, closefd=True)


def write_new_file(path: str | os.PathLike[str], content: bytes) -> None:
    """``content`` at ``path`` (``open_new_file``), as ``Path.write_bytes`` writes it."""
    with open_new_file(path) as handle:
        handle.write(content)


def write_bytes_atomic(path: str | os.PathLike[str], content: bytes, mode: int = 0o644, *, listed: bool = False) -> None:
    """``content`` atomically at ``path``. ``listed``: a file a command adds to an output
    directory, recorded in its marker (``record_written_entry``) before it is renamed into
    place, so that the next build may replace the output; a file already listed unchanged
    is recorded anew whatever ``listed`` says."""
    with atomic_file(path, mode, listed=listed) as handle:
        handle.write(content)


def check_output_parent(target: Path) -> None:
    """Make ``target``'s parent directory, or refuse with an ``InputError`` naming
    ``target`` when it cannot be made or written (callers run this before long work)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{target}: cannot write here: {exc.strerror or exc}") from exc
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise InputError(f"{target}: cannot write here: {target.parent} is not writable")


def record_written_entry(directory: Path, name: str, staged: Path | None = None) -> None:
    """Record ``name`` in the marker of output ``directory`` with what is there now: a file
    a later command of sparkflake wrote into the output (the runtime check's capabilities,
    a publish record, an exported archive), which the next build may then replace. A
    directory without a marker is left as it is. ``staged``: the file about to be renamed
    to ``name``, recorded instead (its size and modification time go with it), so that a
    marker that cannot be written (a full disk) fails the command before the output holds a
    file its marker does not list, which the next build would refuse to replace."""
    marker = read_marker(directory)
    if marker is None:
        return
    entries = sorted({*marker.entries, name})
    if marker.paths is None:
        if name not in marker.entries:  # an earlier sparkflake's marker: the names alone
            write_bytes_atomic(directory / OUTPUT_MARKER, marker_bytes(entries, None))
        return
    path = directory / name if staged is None else staged
    try:
        state = written_state(path, os.lstat(path))
    except FileNotFoundError:
        return
    write_bytes_atomic(directory / OUTPUT_MARKER, marker_bytes(entries, {**marker.paths, name: state}))


def _in_output(target: Path) -> bool:
    """Whether ``target`` is a file of an output directory other than its marker."""
    return target.name != OUTPUT_MARKER and os.path.lexists(target.parent / OUTPUT_MARKER)


def _entry_record(target: Path, listed: bool) -> Callable[[Path], None] | None:
    """For a file about to be written in an output directory, ``listed`` (see
    ``write_bytes_atomic``) or replacing one its marker lists unchanged (the runtime check
    adding to ``receipt.json``): what records the staged file's size and time for it, so
    the file stays sparkflake's. None for any other target, an operator's edit included."""
    if not _in_output(target):
        return None
    if listed:
        return lambda staged: record_written_entry(target.parent, target.name, staged)
    marker = read_marker(target.parent)
    recorded = marker.paths.get(target.name) if marker is not None and marker.paths is not None else None
    try:
        unchanged = recorded is not None and recorded == written_state(target, os.lstat(target))
    except FileNotFoundError:
        return None
    return (lambda staged: record_written_entry(target.parent, target.name, staged)) if unchanged else None


def _write_output_marker(staging: Path) -> None:
    entries = [name for name in os.listdir(staging) if name != OUTPUT_MARKER]
    write_new_file(staging / OUTPUT_MARKER, marker_bytes(entries, output_paths(staging)))


@contextlib.contextmanager
def atomic_directory(
    path: str | os.PathLike[str], *, owned_output: bool = False, force: bool = False
) -> Iterator[Path]:
    """Yield a fresh staging directory; on clean exit it replaces ``path``.

    The new directory is exchanged with the previous one in one rename where the file
    system allows it (else the previous one is moved aside first); the previous one is
    removed only after the new one is in place, so at every instant either the old or
    the new tree is complete. ``owned_output``: ``path`` is an operator-named output; it
    is replaced only if ``check_replaceable_output`` allows (checked before staging and
    again before the swap), and the new directory gets the marker that allows it next time.
    """
    target = Path(path)
    check_output_parent(target)
    _check_directory_target(target, owned_output)
    if owned_output:
        check_replaceable_output(target, force=force)
    try:
        remove_leftovers(target)
    except OSError as exc:
        raise InputError(f"{target}: cannot write here: {exc.strerror or exc}") from exc
    staging: Path | None = None
    try:
        # held back until the directory made is named here, for the except below
        with interrupts_held():
            try:
                staging = _make_generated(target.parent, f".{target.name}", ".partial", lambda path: path.mkdir(0o700))
            except OSError as exc:
                raise InputError(f"{target}: cannot write here: {exc.strerror or exc}") from exc
        yield staging
        if owned_output:
            check_replaceable_output(target, force=force)  # it may have changed meanwhile
            _write_output_marker(staging)
        # the swap whole (its renames, then the previous tree's removal): an interrupt waits
        # for it, and then finds the new tree in place and nothing staged
        with interrupts_held():
            try:
                _swap_in(staging, target)
            except OSError as exc:
                raise InputError(f"{target}: cannot replace it: {exc.strerror or exc}") from exc
    except BaseException:
        if staging is not None:
            with interrupts_held():  # an interrupt during the removal is delivered after it
                shutil.rmtree(staging, ignore_errors=True)
        raise


def _check_directory_target(target: Path, owned_output: bool) -> None:
    """A device, a FIFO or a socket is never swapped out for a directory, even forced; a
    regular file only where ``check_replaceable_output`` decides (an operator's output)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    special = not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode))
    if special or (not owned_output and not os.path.isdir(target)):
        kind = file_kind(mode) if special or not stat.S_ISLNK(mode) else "a symlink to no directory"
        raise InputError(f"{target}: is {kind}; this output is a directory (choose another path)")


def _swap_in(staging: Path, target: Path) -> None:
    retired = None
    if os.path.lexists(target):
        if _exchange(staging, target):
            retired = staging  # now holds the previous tree
        else:
            retired = target.parent / generated_name(f".{target.name}", ".old")
            os.rename(target, retired)  # a fresh random name: nothing there to replace
            os.replace(staging, target)
    else:
        os.replace(staging, target)
    if retired is not None:
        _remove(retired)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_LIBC = ctypes.CDLL(None, use_errno=True)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one rename (Linux renameat2 RENAME_EXCHANGE); False where the C
    library or the file system does not offer it."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), os.fspath(first), None, os.fspath(second))


# copy_file_range refused: another file system (EXDEV before Linux 5.19, or between
# file system types), or no support; then the bytes go through plain reads and writes.
_NO_KERNEL_COPY = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def copy_bytes(source_fd: int, target_fd: int, size: int) -> int:
    """Copy up to ``size`` bytes from the current offset of ``source_fd`` to that of
    ``target_fd``, in the kernel where it can; returns the bytes copied (fewer if the
    source ended first). Other OS errors propagate."""
    remaining = size
    try:
        while remaining > 0:
            copied = os.copy_file_range(source_fd, target_fd, min(remaining, 1 << 30))
            if copied == 0:
                return size - remaining
            remaining -= copied
    except OSError as exc:
        if exc.errno not in _NO_KERNEL_COPY:
            raise
        while remaining > 0:
            chunk = os.read(source_fd, min(remaining, 1 << 20))
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(target_fd, view) :]
            remaining -= len(chunk)
    return size - remaining
