"""Builder: host programs linked into $out/bin, each checked to exist and be executable, and
host directories linked under $out (`directories`: "<path in $out>=<host directory> ...").

`execPrograms` are started through a two-line /bin/sh script that execs the host program by
its full path: an interpreter that finds its stdlib from argv[0] (Debian 13's python3.13)
then finds it however it is started (Nix starts a builder with argv[0] = its base name and
no PATH), as nixpkgs' python, whose prefix is compiled in, always does."""

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
for pair in os.environ.get("execPrograms", "").split():
    link_name, target = pair.split("=", 1)
    if not os.access(target, os.X_OK):
        sys.exit(f"host program {target} is missing or not executable: run ./bin/bootstrap")
    (bin_dir / link_name).write_text(f'#!/bin/sh\nexec {target} "$@"\n', encoding="utf-8")
    (bin_dir / link_name).chmod(0o555)
for pair in os.environ.get("directories", "").split():
    link_name, target = pair.split("=", 1)
    if not os.path.isdir(target):
        sys.exit(f"host directory {target} is missing: run ./bin/bootstrap")
    (out / link_name).parent.mkdir(parents=True, exist_ok=True)
    (out / link_name).symlink_to(target)
