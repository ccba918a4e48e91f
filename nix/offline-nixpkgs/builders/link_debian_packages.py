"""Builder: the programs of named Debian packages linked into $out/bin, as nixpkgs' stdenv
puts exactly its own packages' bin/ on a build's PATH (pkgs/stdenv/generic/common-path.nix)
and nothing else of the machine.

`packages` names Debian packages whose executables under /bin and /usr/bin are linked
(dpkg's own file list: a package that is not installed is an error naming it); `aliases`
("<name>=<program> ...") adds names Debian gives through alternatives, such as awk."""

import os
import pathlib
import subprocess
import sys

out = pathlib.Path(os.environ["out"])
bin_dir = out / "bin"
bin_dir.mkdir(parents=True)
for package in os.environ["packages"].split():
    listed = subprocess.run(["dpkg-query", "--listfiles", package], capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        sys.exit(f"Debian package {package} is not installed: run ./bin/bootstrap ({listed.stderr.strip()})")
    for line in listed.stdout.splitlines():
        path = pathlib.Path(line)
        if path.parent.as_posix() not in ("/bin", "/usr/bin") or (bin_dir / path.name).exists():
            continue  # merged /usr: /bin/x and /usr/bin/x are one program
        if path.is_file() and os.access(path, os.X_OK):
            (bin_dir / path.name).symlink_to(path)
for pair in os.environ.get("aliases", "").split():
    link_name, program = pair.split("=", 1)
    if not (bin_dir / program).exists():
        sys.exit(f"alias {link_name}: no program {program} among the linked packages")
    (bin_dir / link_name).symlink_to(program)
