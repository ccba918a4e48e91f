"""Git inputs by commit into the content-addressed cache, bound by their tree id.

A ``git`` lock input pins ``rev`` (a commit id) and ``tree`` (the tree that commit names).
``fetch_git`` gets exactly that commit into a scratch bare repository (``git fetch --depth 1
URL REV``: a fetch by commit id, which GitHub and git daemon serve; a full fetch when the
server cannot serve a shallow one, as git's dumb HTTP cannot), then:

1. hashes the commit object's bytes itself (``sha1("commit <size>\\0" + body)``) and
   requires that id to be ``rev``, so a server answering with another commit is refused;
2. reads the tree id from the commit's ``tree`` header and requires the pin's ``tree``;
3. writes the tree's files from git's objects (``ls-tree`` + ``cat-file --batch``: no
   checkout, so no ``.gitattributes`` conversion, filter or hook runs), computes the git
   tree id of what it wrote with ``sparkflake.core.tree_digest.git_tree_id`` and requires ``tree``
   again; then the optional ``nar_hash``;
4. renames the checkout into ``git/trees/<tree>`` and writes ``git/commits/<rev>``.

Everything happens in ``partial/git-<rev>.<pid>.*`` first, so an interrupted fetch leaves
nothing unverified in ``git/``; a later fetch removes the staging directories of processes
that are gone and starts again. A cached tree is re-hashed (its git tree id recomputed)
whenever it is used.

git runs from argv lists with no system or global configuration, hooks off, protocols
limited to file, git, http(s) and ssh (``ext::`` and other remote helpers refused),
object checks on (``transfer.fsckObjects``), no terminal prompts, and a time bound.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..core.atomic_write import process_alive, write_bytes_atomic
from ..core.documents import read_regular_file
from ..core.errors import CheckFailed, InputError
from ..core.own_files import holding_lock
from ..core.tree_digest import git_tree_id, nar_hash
from ..lock.pins import GitPin
from .git_archive import ArchiveRefused, checked_relative, download, extract_archive

GIT_TIMEOUT = 600.0  # seconds for one fetch; vLLM's tree at depth 1 is ~30 MB
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"
_HEX40 = re.compile(rb"^[0-9a-f]{40}$")
# A fetch's staging directory: git-<rev>.<pid>.<random> (tempfile.mkdtemp's prefix below);
# housekeeping recognises it by this pattern too.
STAGING_NAME = re.compile(r"git-[0-9a-f]{40}\.(?P<pid>[0-9]+)\.")
# Say why a server cannot give the commit, in git's own words (upload-pack.c, fetch-pack.c,
# http-walker); anything else is reported with git's last line.
_SHALLOW_REFUSED = ("dumb http transport does not support shallow capabilities",)


@dataclass(frozen=True)
class GitOutcome:
    name: str
    rev: str
    tree: str
    source: str  # "cache", "fetch", "archive" or "import" (a checkout given with --from)
    url: str | None = None
    files: int = 0


COMMIT_RECORD_LIMIT = 4096  # a commit record is "tree <id>\n": under 80 bytes


def recorded_tree(path: Path) -> str | None:
    """The tree a commit record (``git/commits/<rev>``) names; None when there is no
    readable record: it is read from a regular file only and within a bound (a FIFO there
    would hang the read, a huge file or /dev/zero would be read whole)."""
    try:
        text = read_regular_file(path, "a git commit record", COMMIT_RECORD_LIMIT).decode("ascii")
    except (InputError, UnicodeDecodeError):
        return None
    return text.removeprefix("tree ").strip() if text.startswith("tree ") else None


class GitCache:
    """Checkouts named by their tree id, and the commits known to name them."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.tree_dir = self.root / "git" / "trees"
        self.commit_dir = self.root / "git" / "commits"
        self.partial_dir = self.root / "partial"

    def tree_path(self, tree: str) -> Path:
        return self.tree_dir / tree

    def commit_path(self, rev: str) -> Path:
        return self.commit_dir / rev

    def holds(self, pin: GitPin) -> bool:
        """The commit is recorded as naming the pin's tree and the tree is present."""
        return recorded_tree(self.commit_path(pin.rev)) == pin.tree and self.tree_path(pin.tree).is_dir()

    def verified_tree(self, pin: GitPin) -> Path:
        """The checkout of ``pin`` after recomputing its git tree id; an altered entry is
        moved out of the cache and refused by name."""
        path = self.tree_path(pin.tree)
        if not self.holds(pin):
            raise InputError(
                f"{pin.name}: commit {pin.rev} (tree {pin.tree}) is not in the cache "
                f"{self.tree_dir}; run `sparkflake fetch` first",
                check_id="fetch-missing",
            )
        actual = git_tree_id(path)
        if actual != pin.tree:
            self.evict(pin.tree)
            raise CheckFailed(
                f"{pin.name}: cache entry {path} was altered (git tree {actual}, the lock says "
                f"{pin.tree}); evicted, run `sparkflake fetch` again",
                check_id="cache-entry",
            )
        return path

    def evict(self, tree: str) -> None:
        """Move a bad checkout into the staging area and remove it there."""
        self.partial_dir.mkdir(parents=True, exist_ok=True)
        doomed = Path(tempfile.mkdtemp(prefix=f"git-{'0' * 40}.{os.getpid()}.evict-", dir=self.partial_dir))
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.tree_path(tree), doomed / "tree")
        _remove_tree(doomed)


class _Unserved(Exception):
    """One URL did not give the commit; the reason goes into the final report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def git_environment(home: Path) -> dict[str, str]:
    """The environment every git command runs in: nothing from the caller's git setup."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
        "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS,
        "GIT_PROTOCOL_FROM_USER": "0",
        # ssh: never ask, fail when no key works (the caller's agent and known_hosts are kept)
        "GIT_SSH_VARIANT": "ssh",
        **{key: os.environ[key] for key in ("SSH_AUTH_SOCK",) if key in os.environ},
    }


_CONFIG = (
    "-c", "core.hooksPath=" + os.devnull,
    "-c", "protocol.allow=never",
    *(arg for protocol in ALLOWED_PROTOCOLS.split(":") for arg in ("-c", f"protocol.{protocol}.allow=always")),
    "-c", "transfer.fsckObjects=true",
    "-c", "fetch.fsckObjects=true",
    "-c", "core.fsmonitor=false",
    "-c", "credential.helper=",
    # git's default: follow a redirect of the first request only (a renamed repository on
    # a forge); the ids, not the host, bind what is fetched
    "-c", "http.followRedirects=initial",
)


def _git(repo: Path, env: dict[str, str], *args: str, timeout: float, stdin: bytes | None = None) -> bytes:
    argv = ["git", *_CONFIG, "--git-dir", str(repo), *args]
    try:
        completed = subprocess.run(
            argv, input=stdin, capture_output=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise _Unserved(f"no answer within {timeout:.0f} s") from None
    if completed.returncode != 0:
        lines = [line.strip() for line in completed.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        reason = "; ".join(dict.fromkeys(lines))  # git often says the same thing twice
        raise _Unserved(reason[:600] if reason else f"git {args[0]} exited {completed.returncode}")
    return completed.stdout


def commit_tree(body: bytes) -> str:
    """The tree id a commit object's body names (its first header line, ``tree <hex>``)."""
    first, _, _rest = body.partition(b"\n")
    kind, _, value = first.partition(b" ")
    if kind != b"tree" or not _HEX40.fullmatch(value):
        raise InputError(f"not a commit object: first line {first[:80]!r}, expected 'tree <40 hex digits>'")
    return value.decode("ascii")


def git_object_id(kind: bytes, body: bytes) -> str:
    """The SHA-1 object id git gives ``body`` of this kind (``git hash-object -t KIND``)."""
    return hashlib.sha1(kind + b" %d\0" % len(body) + body).hexdigest()


@dataclass(frozen=True)
class TreeEntry:
    mode: str  # 100644, 100755, 120000 or 160000
    kind: str  # blob or commit
    object_id: str
    path: str


def parse_ls_tree(output: bytes) -> list[TreeEntry]:
    """``git ls-tree -r -z`` output: ``<mode> SP <type> SP <object> TAB <path> NUL`` records."""
    entries: list[TreeEntry] = []
    for record in output.split(b"\0"):
        if not record:
            continue
        meta, tab, raw_path = record.partition(b"\t")
        fields = meta.split(b" ")
        if not tab or len(fields) != 3 or not _HEX40.fullmatch(fields[2]):
            raise InputError(f"git ls-tree: unexpected record {record[:120]!r}")
        try:
            path = raw_path.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"git ls-tree: path {raw_path[:120]!r} is not UTF-8") from None
        entries.append(TreeEntry(fields[0].decode(), fields[1].decode(), fields[2].decode(), path))
    return entries


def write_tree(repo: Path, env: dict[str, str], rev: str, destination: Path, timeout: float) -> int:
    """The files of ``rev``'s tree under ``destination``, from git's objects (no checkout);
    returns the number of entries written. Submodules are refused: their files are not in
    this repository, so the tree id could not bind them."""
    entries = parse_ls_tree(_git(repo, env, "ls-tree", "-r", "-z", "--full-tree", rev, timeout=timeout))
    for entry in entries:
        if entry.kind != "blob":
            raise InputError(f"{entry.path}: a {entry.kind} entry (submodule) in the tree; not supported")
    destination.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        ["git", *_CONFIG, "--git-dir", str(repo), "cat-file", "--batch"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        for entry in entries:
            relative = checked_relative(entry.path)
            process.stdin.write(entry.object_id.encode() + b"\n")
            process.stdin.flush()
            header = process.stdout.readline().split()
            if len(header) != 3 or header[0].decode() != entry.object_id or header[1] != b"blob":
                raise InputError(f"{entry.path}: git cat-file answered {b' '.join(header)[:120]!r}")
            size = int(header[2])
            target = destination.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            if entry.mode == "120000":
                if size > SYMLINK_TARGET_LIMIT:  # no file system takes a longer one (PATH_MAX)
                    raise InputError(f"{entry.path}: a symlink whose target is {size} bytes long")
                os.symlink(_read_exactly(process.stdout, size), target)
            elif entry.mode in ("100644", "100755"):
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as handle:
                    # in pieces: a source tree may hold a blob of gigabytes
                    for start in range(0, size, COPY_CHUNK):
                        handle.write(_read_exactly(process.stdout, min(COPY_CHUNK, size - start)))
                os.chmod(target, 0o755 if entry.mode == "100755" else 0o644)
            else:
                raise InputError(f"{entry.path}: git mode {entry.mode} is not a file or a symlink")
            if _read_exactly(process.stdout, 1) != b"\n":  # cat-file ends each object with LF
                raise InputError(f"{entry.path}: git cat-file answered more than the {size} bytes it announced")
    finally:
        process.stdin.close()
        process.stdout.close()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return len(entries)


COPY_CHUNK = 1 << 20
SYMLINK_TARGET_LIMIT = 4096


def _read_exactly(stream: IO[bytes], size: int) -> bytes:  # a binary pipe
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise InputError("git cat-file ended early")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _fetch_commit(repo: Path, env: dict[str, str], url: str, rev: str, timeout: float) -> None:
    """``git fetch --depth 1 URL REV``; a full fetch of REV where shallow is not served."""
    try:
        _git(repo, env, "fetch", "--quiet", "--no-tags", "--depth", "1", "--", url, rev, timeout=timeout)
    except _Unserved as refusal:
        if not any(text in refusal.reason for text in _SHALLOW_REFUSED):
            raise
        _git(repo, env, "fetch", "--quiet", "--no-tags", "--", url, rev, timeout=timeout)


def _verify_commit(repo: Path, env: dict[str, str], pin: GitPin, url: str, timeout: float) -> None:
    kind = _git(repo, env, "cat-file", "-t", pin.rev, timeout=timeout).strip()
    if kind != b"commit":
        raise _Unserved(f"{pin.rev} is a {kind.decode(errors='replace')}, not a commit")
    body = _git(repo, env, "cat-file", "commit", pin.rev, timeout=timeout)
    actual = git_object_id(b"commit", body)
    if actual != pin.rev:
        raise _Unserved(f"answered with another commit: its bytes hash to {actual}, the lock says {pin.rev}")
    named = commit_tree(body)
    if named != pin.tree:
        raise CheckFailed(
            f"{pin.name}: commit {pin.rev} from {url} names tree {named}, the lock says tree "
            f"{pin.tree}: refused, nothing entered the cache",
            check_id="fetch-tree",
        )


def remove_stale_staging(cache: GitCache) -> list[Path]:
    """Staging directories of git fetches whose process is gone (an interrupted fetch)."""
    removed: list[Path] = []
    if not cache.partial_dir.is_dir():
        return removed
    for entry in sorted(cache.partial_dir.iterdir()):
        match = STAGING_NAME.match(entry.name)
        if match is None or not entry.is_dir() or process_alive(int(match["pid"])):
            continue
        _remove_tree(entry)
        removed.append(entry)
    return removed


def _remove_tree(path: Path) -> None:
    """Remove a staging directory this module made."""
    shutil.rmtree(path, ignore_errors=True)


def fetch_git(
    pin: GitPin,
    cache: GitCache,
    *,
    extra_urls: Sequence[str] = (),
    timeout: float = GIT_TIMEOUT,
    offline: bool = False,
) -> GitOutcome:
    """Make ``pin`` a verified cache entry: the cache when it holds the commit, else each of
    ``extra_urls`` (mirrors and local repositories given on the command line) and then the
    lock's URLs in order (not when ``offline``: then only ``file://`` extra URLs). Raises ``MissingGitInput`` naming every URL tried and why, or
    ``CheckFailed`` when a commit names another tree than the pin."""
    lock_dir = cache.root / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with holding_lock(lock_dir / f"git-{pin.rev}", "the lock of a git fetch"):
        if cache.holds(pin):
            try:
                cache.verified_tree(pin)
            except CheckFailed:
                pass  # evicted: fetch it again below
            else:
                return GitOutcome(pin.name, pin.rev, pin.tree, "cache")
        remove_stale_staging(cache)
        tried: list[str] = []
        urls = [url for url in extra_urls if url.startswith("file://")] if offline else [*extra_urls, *pin.urls]
        if offline:
            tried.append("the lock's URLs: not tried (offline)")
        # git URLs first; forge archives when none served the commit (a forge that refuses
        # fetch by id, or none reachable)
        archives = [url for url in pin.archive_urls if not offline or url.startswith("file://")]
        attempts = [(url, "fetch", _fetch_into_cache) for url in urls] + [
            (url, "archive", _archive_into_cache) for url in archives
        ]
        for url, source, attempt in attempts:
            try:
                files = attempt(pin, cache, url, timeout)
            except _Unserved as refusal:
                tried.append(f"{url}: {refusal.reason}")
                continue
            return GitOutcome(pin.name, pin.rev, pin.tree, source, url, files)
        raise MissingGitInput(pin, tried)


def _fetch_into_cache(pin: GitPin, cache: GitCache, url: str, timeout: float) -> int:
    cache.partial_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"git-{pin.rev}.{os.getpid()}.", dir=cache.partial_dir))
    try:
        env = git_environment(staging)
        repo = staging / "repo.git"
        _git(repo, env, "init", "--quiet", "--bare", timeout=timeout)
        _fetch_commit(repo, env, url, pin.rev, timeout)
        _verify_commit(repo, env, pin, url, timeout)
        checkout = staging / "tree"
        files = write_tree(repo, env, pin.rev, checkout, timeout)
        _admit(pin, cache, checkout, f"the files of commit {pin.rev} from {url}")
        return files
    finally:
        _remove_tree(staging)


def _archive_into_cache(pin: GitPin, cache: GitCache, url: str, timeout: float) -> int:
    """A forge archive of the commit (``git archive`` format, .tar.gz): downloaded with a size
    bound, its pax ``comment`` (the commit id git archive records) required to be ``rev``
    when present, its files written under the single top directory, then admitted by tree
    id like a fetched checkout. An archive made with export-ignore/export-subst attributes
    has other files than the tree and is refused by its tree id."""
    cache.partial_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"git-{pin.rev}.{os.getpid()}.", dir=cache.partial_dir))
    try:
        archive = staging / "archive.tar.gz"
        checkout = staging / "tree"
        try:
            download(url, archive, timeout)
            files = extract_archive(archive, checkout, pin.rev)
        except ArchiveRefused as refusal:
            raise _Unserved(refusal.reason) from None
        _admit(pin, cache, checkout, f"the files of the archive {url}")
        return files
    finally:
        _remove_tree(staging)


def _admit(pin: GitPin, cache: GitCache, checkout: Path, what: str) -> None:
    """Rename a staged checkout into the cache once its own tree id (and NAR hash, when
    pinned) is the lock's; then record that ``rev`` names that tree."""
    written = git_tree_id(checkout)
    if written != pin.tree:
        raise CheckFailed(
            f"{pin.name}: {what} have git tree {written}, the lock says {pin.tree}: refused, "
            "nothing entered the cache",
            check_id="fetch-tree",
        )
    if pin.nar_hash is not None:
        nar = nar_hash(checkout).sri
        if nar != pin.nar_hash:
            raise CheckFailed(
                f"{pin.name}: {what} have NAR hash {nar}, the lock says {pin.nar_hash}: refused, "
                "nothing entered the cache",
                check_id="fetch-tree",
            )
    cache.tree_dir.mkdir(parents=True, exist_ok=True)
    target = cache.tree_path(pin.tree)
    if target.is_dir() and git_tree_id(target) != pin.tree:  # an altered entry
        cache.evict(pin.tree)
    if not target.is_dir():
        os.rename(checkout, target)
    write_bytes_atomic(cache.commit_path(pin.rev), f"tree {pin.tree}\n".encode("ascii"))


def import_checkouts(
    pins: Iterable[GitPin], directories: Sequence[str | os.PathLike[str]], cache: GitCache
) -> list[GitOutcome]:
    """Plain checkouts (no ``.git``: a Nix ``fetchGit`` store path, an unpacked forge
    archive) given with ``--from``: DIR itself or each of its subdirectories is taken for
    the git input whose tree id it has. The binding is the tree (what the files are); the
    commit object is not seen, so ``rev`` is the lock's word for which commit named it."""
    wanted = {pin.tree: pin for pin in pins if not cache.holds(pin)}
    outcomes: list[GitOutcome] = []
    for directory in directories:
        base = Path(directory)
        if not wanted or not base.is_dir() or is_git_repository(base):
            continue
        # subdirectories may be symlinks (a directory of links to Nix store paths)
        candidates = [base, *sorted(p.resolve() for p in base.iterdir() if p.is_dir())]
        for candidate in candidates:
            if is_git_repository(candidate):
                continue
            try:
                tree = git_tree_id(candidate)
            except InputError:
                continue  # not something git would store as one tree
            pin = wanted.pop(tree, None)
            if pin is None:
                continue
            cache.partial_dir.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"git-{pin.rev}.{os.getpid()}.", dir=cache.partial_dir))
            try:
                checkout = staging / "tree"
                shutil.copytree(candidate, checkout, symlinks=True)
                _own_modes(checkout)
                _admit(pin, cache, checkout, f"the files of {candidate}")
            finally:
                _remove_tree(staging)
            outcomes.append(GitOutcome(pin.name, pin.rev, pin.tree, "import", candidate.resolve().as_uri()))
    return outcomes


def _own_modes(root: Path) -> None:
    """Writable copies (a Nix store path is read-only) with git's two file modes kept."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)


class MissingGitInput(Exception):
    def __init__(self, pin: GitPin, tried: list[str]) -> None:
        super().__init__(pin.name)
        self.pin = pin
        self.tried = tried

    def describe(self) -> str:
        pin = self.pin
        lines = [f"{pin.name}: git commit {pin.rev} (tree {pin.tree}) could not be fetched"]
        lines += [f"    tried {entry}" for entry in self.tried]
        lines.append(
            f"    supply it: a mirror that serves the commit (`--git-mirror {pin.name}=URL`, tried "
            "before the lock's URLs), or `--from DIR` with DIR a clone holding the commit or a "
            f"checkout of it (git tree {pin.tree})"
        )
        return "\n".join(lines)


def fetch_git_inputs(
    pins: Iterable[GitPin],
    cache: GitCache,
    *,
    mirrors: Mapping[str, Sequence[str]] | None = None,
    local_repositories: Sequence[str | os.PathLike[str]] = (),
    timeout: float = GIT_TIMEOUT,
    offline: bool = False,
) -> list[GitOutcome]:
    """Every git input, or one ``InputError`` naming each that could not be fetched (a
    wrong tree is a ``CheckFailed`` at once: that input is pinned to other bytes)."""
    local = [Path(directory).resolve().as_uri() for directory in local_repositories if is_git_repository(directory)]
    pins = sorted(pins, key=lambda p: p.name)
    outcomes = import_checkouts(pins, local_repositories, cache)
    imported = {outcome.name for outcome in outcomes}
    missing: list[MissingGitInput] = []
    for pin in pins:
        if pin.name in imported:
            continue
        extra = [*(mirrors or {}).get(pin.name, ()), *local]
        try:
            outcomes.append(fetch_git(pin, cache, extra_urls=extra, timeout=timeout, offline=offline))
        except MissingGitInput as failure:
            missing.append(failure)
    if missing:
        raise InputError(
            f"{len(missing)} git input(s) missing:\n" + "\n".join(m.describe() for m in missing),
            check_id="fetch-missing",
        )
    return outcomes


def is_git_repository(directory: str | os.PathLike[str]) -> bool:
    """A work tree with ``.git`` or a bare repository (``HEAD`` and ``objects/``)."""
    path = Path(directory)
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())
