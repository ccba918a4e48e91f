"""Builder: host programs linked into $out/bin, each checked to exist and be executable, and
host directories linked under $out (`directories`: "<path in $out>=<host directory> ...")."""

import os
import pathlib
import sys

out = pathlib.Path(os.environ["out"])
bin_dir = out / "bin"
bin_dir.mkdir(parents=True)
for pair in os.environ["programs"].split():
    link_name, target = pair.split("=", 1)
    if not os.access(target, os.X_OK):
        sys.exit(f"host program {target} is missing or not executable: run ./bin/bootstrap")
    (bin_dir / link_name).symlink_to(target)
for pair in os.environ.get("directories", "").split():
    link_name, target = pair.split("=", 1)
    if not os.path.isdir(target):
        sys.exit(f"host directory {target} is missing: run ./bin/bootstrap")
    (out / link_name).parent.mkdir(parents=True, exist_ok=True)
    (out / link_name).symlink_to(target)
