"""Console scripts that are one fixed `sparkflake` command, for Nix apps.

`nix run .#launch-rank -- RANK runtime.env` runs `sparkflake-launch-rank`, which is
`sparkflake launch-rank RANK runtime.env`; a console script needs no shell wrapper.
"""

from __future__ import annotations

import sys

from . import main


def launch_rank() -> int:
    return main(["launch-rank", *sys.argv[1:]])
