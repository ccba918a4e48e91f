"""Where profiles are: a name looked up in the profiles directory (environment, checkout,
the installation's bundled copy) or a path; profiles side by side never share a served-model
name or a cache or JIT root."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.documents import file_kind
from ..core.errors import InputError
from ..core.records import describe
from .model import CHECKOUT_PROFILES_ENV, PROFILE_FILE, PROFILE_NAME, PROFILES_DIR_ENV, Profile


def bundled_profiles_dir() -> Path:
    """Where an installation carries its own profiles: the Nix package installs them at
    ``<prefix>/share/sparkflake/profiles`` (nix/locked-python.nix), so ``nix run
    .#launch-rank`` works from any directory."""
    return Path(sys.prefix) / "share" / "sparkflake" / "profiles"


def find_profiles_dir(start: str | os.PathLike[str] | None = None) -> Path:
    """``$SPARKFLAKE_PROFILES_DIR``, else the nearest ``profiles/`` holding a profile,
    searching upward from ``start`` (default: the working directory), else
    ``$SPARKFLAKE_CHECKOUT_PROFILES`` (the checkout ``bin/sparkflake`` belongs to), else the
    profiles bundled with the installation."""
    from_env = os.environ.get(PROFILES_DIR_ENV)
    if from_env:
        directory = Path(from_env)
        if not directory.is_dir():
            raise InputError(f"{PROFILES_DIR_ENV}={from_env}: not a directory")
        return directory
    here = Path(start if start is not None else Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "profiles"
        if candidate.is_dir() and any(candidate.glob(f"*/{PROFILE_FILE}")):
            return candidate
    checkout = os.environ.get(CHECKOUT_PROFILES_ENV)
    if checkout and Path(checkout).is_dir():
        return Path(checkout)
    bundled = bundled_profiles_dir()
    if bundled.is_dir() and any(bundled.glob(f"*/{PROFILE_FILE}")):
        return bundled
    raise InputError(
        f"no profiles directory found: set {PROFILES_DIR_ENV} or run inside a checkout "
        f"(searched upward from {here} for profiles/*/{PROFILE_FILE}, and {bundled})"
    )


def list_profiles(profiles_dir: str | os.PathLike[str]) -> list[str]:
    return sorted(path.parent.name for path in Path(profiles_dir).glob(f"*/{PROFILE_FILE}"))


def profile_path(
    name_or_path: str | os.PathLike[str], profiles_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Where a profile lives: an existing file or directory path as given, else a name
    looked up in the profiles directory."""
    text = os.fspath(name_or_path)
    candidate = Path(text)
    looks_like_path = "/" in text or text.endswith(".toml") or text in (".", "..")
    if looks_like_path or (not PROFILE_NAME.fullmatch(text) and candidate.exists()):
        if candidate.is_dir():
            candidate = candidate / PROFILE_FILE
        return _regular_profile_file(candidate, lambda: f"{text}: no such profile file")
    if not PROFILE_NAME.fullmatch(text):
        raise InputError(f"{text!r}: not a profile name ([a-z0-9-]) nor a path to a profile.toml")
    directory = Path(profiles_dir) if profiles_dir is not None else find_profiles_dir()
    path = directory / text / PROFILE_FILE
    return _regular_profile_file(path, lambda: f"no profile named {text!r} in {directory} (profiles: "
                                 f"{', '.join(list_profiles(directory)) or 'none'})")


def _regular_profile_file(path: Path, missing: Callable[[], str]) -> Path:
    """``path`` when a regular file stands there (a symlink followed), else an InputError:
    ``missing()`` when nothing does, else what does stand there. A FIFO, a directory or a
    symlink to /dev/zero was reported as missing, which sent the operator looking for a
    file that is there."""
    try:
        mode = os.stat(path).st_mode  # stat, never open: a FIFO without a writer would block
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(missing()) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        through = "a symlink to " if path.is_symlink() else ""
        raise InputError(f"{path}: is {through}{file_kind(mode)}, expected {PROFILE_FILE} (a regular file)")
    return path


def check_profiles_distinct(profiles: Sequence[Profile]) -> None:
    """Profiles side by side never share a served-model name, a cache root or a JIT root
    (nor nest one root inside another profile's)."""
    roots: list[tuple[str, str, Profile]] = []
    names: dict[str, Profile] = {}
    for profile in profiles:
        other = names.get(profile.served_model_name)
        if other is not None:
            raise InputError(
                f"{profile.shown()}: served_model_name: {describe(profile.served_model_name)} is also used by {other.shown()}"
            )
        names[profile.served_model_name] = profile
        for key in ("cache_root", "jit_root"):
            root = getattr(profile, key)
            for other_key, other_root, other_profile in roots:
                if other_profile is profile:
                    continue
                if root == other_root or _nests(root, other_root):
                    raise InputError(
                        f"{profile.shown()}: {key}: {describe(root)} overlaps {other_key} "
                        f"{describe(other_root)} of {other_profile.shown()}"
                    )
            roots.append((key, root, profile))


def _nests(first: str, second: str) -> bool:
    return first.startswith(second.rstrip("/") + "/") or second.startswith(first.rstrip("/") + "/")
