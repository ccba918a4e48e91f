"""Builder: host programs linked into $out/bin, each checked to exist and be executable."""

import os
import pathlib
import sys

bin_dir = pathlib.Path(os.environ["out"]) / "bin"
bin_dir.mkdir(parents=True)
for pair in os.environ["programs"].split():
    link_name, target = pair.split("=", 1)
    if not os.access(target, os.X_OK):
        sys.exit(f"host program {target} is missing or not executable: run ./bin/test")
    (bin_dir / link_name).symlink_to(target)
