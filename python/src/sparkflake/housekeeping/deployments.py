"""The images that are deployed, as far as the project's own records say: every evidence
record of a profile (``profiles/<name>/evidence/*.json``, launch's records of an image that
was run and measured) and every profile's qualified image pin. ``cache gc`` keeps the builds
of these images whatever their age."""

from __future__ import annotations

from pathlib import Path

from ..launch.evidence import load_evidence_dir
from ..profile.lookup import list_profiles, profile_path
from ..profile.profile_file import read_profile


def deployed_images(profiles_dir: Path) -> set[str]:
    """Manifest and config digests of the deployed images the profiles in ``profiles_dir`` name."""
    found: set[str] = set()
    for name in list_profiles(profiles_dir):
        profile = read_profile(profile_path(name, profiles_dir))
        qualified = profile.qualified
        found.update(digest for digest in (qualified.manifest_digest, qualified.config_digest) if digest)
        for record in load_evidence_dir(profiles_dir / name / "evidence"):
            found.update((record.manifest_digest, record.config_digest))
    return found
