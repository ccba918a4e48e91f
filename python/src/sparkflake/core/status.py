"""The status vocabularies, each defined once.

- ``STATUSES``: what a profile or an evidence record claims for a configuration
  (qualified > implemented > research-only > unsupported); a launch with settings other
  than the qualified ones is ``UNQUALIFIED_CONFIGURATION``.
- ``CLAIM_STATUSES``: what is known of an upstream identity a profile records (a commit, a
  tree, an image digest): unverified, verified (an input of the build has it), contradicted.
"""

from __future__ import annotations

STATUSES = ("qualified", "implemented", "research-only", "unsupported")
UNQUALIFIED_CONFIGURATION = "implemented-unqualified-configuration"
CLAIM_STATUSES = ("unverified", "verified", "contradicted")
