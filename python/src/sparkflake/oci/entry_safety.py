"""Which layer tar entries are safe to unpack: the check the audit's streaming layer scan,
``fanout --import`` and every unpacker (the runtime check's) apply, one entry at a time,
in layer order, so it costs no second pass.

An image's layers are applied in order onto one root. An entry is refused when unpacking
it could write outside that root or through a path it does not name:

- a name that is absolute (``/etc/x``) or has a ``..`` component (``../x``, ``a/../../x``);
  OCI image-layer changesets name paths relative to the root, and tools that strip the
  ``/`` or resolve the ``..`` do not agree on what they then write;
- a name below a symlink made by an earlier entry of this layer or of a lower layer and
  not removed since (symlink-then-write: ``lib -> /host/lib`` then ``lib/x``): a
  changeset made from a file system diff never holds one, since the diff walks the tree;
- a hardlink whose target is absolute, has a ``..`` component or lies below a symlink
  (it would link a host file into the image);
- a whiteout ``.wh.NAME`` whose NAME is empty, ``.`` or ``..`` (a deletion that climbs)
  other than the opaque marker ``.wh..wh..opq``.
Symlinks themselves may point anywhere (absolute targets are ordinary: ``/etc/alternatives``);
what a symlink makes unsafe is a later write through it.

``EntrySafety`` keeps the symlinks the layers so far leave in place; ``check`` gives the
reason an entry is refused, or None. ``check_tar_member`` does the same for a
``tarfile.TarInfo`` (for unpackers built on ``tarfile``).
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field

WHITEOUT_PREFIX = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"

# tar type flags (POSIX ustar, GNU): what an entry is, for the rules above
SYMLINK = "symlink"
HARDLINK = "hardlink"
DIRECTORY = "directory"
OTHER = "other"  # regular files, devices, FIFOs
_KIND_OF_TYPEFLAG = {b"2": SYMLINK, b"1": HARDLINK, b"5": DIRECTORY}


def kind_of_typeflag(typeflag: bytes) -> str:
    return _KIND_OF_TYPEFLAG.get(typeflag, OTHER)


def _components(name: str) -> list[str]:
    return [part for part in name.split("/") if part not in ("", ".")]


ABSOLUTE = "absolute"
DOT_DOT = "dot-dot"


def path_escape(name: str) -> str | None:
    """How an image path named relative to the root could leave it: ``ABSOLUTE`` (a leading
    ``/``), ``DOT_DOT`` (a ``..`` component), or None. The one decision of every reader and
    writer of layer entries and image trees (this module, ``tree_paths``, ``layer_tree``);
    each words its refusal in its own terms."""
    if name.startswith("/"):
        return ABSOLUTE
    if ".." in name.split("/"):
        return DOT_DOT
    return None


def _path_problem(name: str, what: str) -> str | None:
    escape = path_escape(name)
    if escape == ABSOLUTE:
        return f"{what} {name!r} is absolute"
    if escape == DOT_DOT:
        return f"{what} {name!r} has a '..' component"
    return None


@dataclass
class EntrySafety:
    """The unsafe-entry check over an image's layers, fed in order."""

    symlinks: dict[str, str] = field(default_factory=dict)  # path -> link target
    _layer_symlinks: dict[str, str] = field(default_factory=dict)
    _opaque: list[str] = field(default_factory=list)

    def begin_layer(self) -> None:
        """Start the next layer: opaque markers of the one before apply from here on."""
        self._end_layer()

    def settled_symlinks(self) -> dict[str, str]:
        """The symlinks the layers so far leave in place (the last one ended): all a later
        layer's check needs, so ``EntrySafety(symlinks=...)`` resumes there."""
        self._end_layer()
        return dict(self.symlinks)

    def _end_layer(self) -> None:
        for directory in self._opaque:  # lower layers' entries below an opaque dir are gone
            self._forget_below(directory, self.symlinks)
        self.symlinks.update(self._layer_symlinks)
        self._layer_symlinks = {}
        self._opaque = []

    def _forget_below(self, directory: str, table: dict[str, str]) -> None:
        prefix = directory + "/" if directory else ""
        for path in [p for p in table if p.startswith(prefix) and p != directory]:
            del table[path]

    def _below_symlink(self, parts: list[str]) -> str | None:
        if not self.symlinks and not self._layer_symlinks:
            return None
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            target = self._layer_symlinks.get(prefix, self.symlinks.get(prefix))
            if target is not None:
                return f"{prefix} -> {target}"
        return None

    def check(self, name: str, kind: str, link_target: str = "") -> str | None:
        """Why the entry ``name`` (of ``kind``, ``link_target`` for links) must not be
        unpacked, or None; a safe entry updates the symlinks it makes or removes."""
        problem = _path_problem(name, "path")
        if problem:
            return problem
        parts = _components(name)
        via = self._below_symlink(parts)
        if via is not None:
            return f"path {name!r} is below the symlink {via}"
        base = parts[-1] if parts else ""
        if base.startswith(WHITEOUT_PREFIX):
            return self._whiteout(parts, base)
        if kind == HARDLINK:
            problem = _path_problem(link_target, "hardlink target")
            if problem:
                return problem
            via = self._below_symlink(_components(link_target))
            if via is not None:
                return f"hardlink target {link_target!r} is below the symlink {via}"
        path = "/".join(parts)
        for table in (self._layer_symlinks, self.symlinks):
            table.pop(path, None)
            if kind != DIRECTORY:
                self._forget_below(path, table)
        if kind == SYMLINK and path:
            self._layer_symlinks[path] = link_target
        return None

    def _whiteout(self, parts: list[str], base: str) -> str | None:
        directory = "/".join(parts[:-1])
        if base == OPAQUE_WHITEOUT:
            self._opaque.append(directory)
            return None
        hidden = base[len(WHITEOUT_PREFIX) :]
        if hidden in ("", ".", "..") or hidden.startswith(WHITEOUT_PREFIX):
            return f"whiteout {'/'.join(parts)!r} deletes {hidden!r}, not an entry of {directory or '/'}"
        removed = f"{directory}/{hidden}" if directory else hidden
        self.symlinks.pop(removed, None)
        self._forget_below(removed, self.symlinks)
        return None

    def check_tar_member(self, member: tarfile.TarInfo) -> str | None:
        """``check`` for a member read by ``tarfile`` (PAX and GNU long names resolved)."""
        if member.issym():
            return self.check(member.name, SYMLINK, member.linkname)
        if member.islnk():
            return self.check(member.name, HARDLINK, member.linkname)
        return self.check(member.name, DIRECTORY if member.isdir() else OTHER)
