"""Builder: python3.withPackages, as nixpkgs' python.buildEnv makes it: a tree of symlinks.

$out/lib/pythonX.Y/site-packages links every top-level entry of each selected package's
site-packages, and $out/bin every program of theirs, so a module imported through the
environment has a path under $out (not under the package's own store path). $out/bin/python*
are the interpreter, with a pyvenv.cfg beside them that puts $out's site-packages on the
path (nixpkgs' wrappers do it with NIX_PYTHONPREFIX).
"""

import os
import pathlib
import sys

out = pathlib.Path(os.environ["out"])
site_packages = out / os.environ["sitePackages"]
site_packages.mkdir(parents=True)
bin_dir = out / "bin"
bin_dir.mkdir()
interpreter = pathlib.Path(os.environ["interpreter"])
for name in (interpreter.name, "python3", "python"):
    (bin_dir / name).symlink_to(interpreter)
(out / "pyvenv.cfg").write_text(
    f"home = {interpreter.parent}\ninclude-system-site-packages = false\n", encoding="utf-8"
)
for package in os.environ.get("pythonPackages", "").split():
    package_site = pathlib.Path(package) / os.environ["sitePackages"]
    if not package_site.is_dir():
        sys.exit(f"{package}: no {os.environ['sitePackages']}: not a package of this Python")
    for entry in sorted(package_site.iterdir()):
        link = site_packages / entry.name
        if link.is_symlink() and os.readlink(link) != str(entry):
            sys.exit(f"{link}: both {os.readlink(link)} and {entry} (buildEnv collision)")
        if not link.is_symlink():
            link.symlink_to(entry)
    package_bin = pathlib.Path(package) / "bin"
    if package_bin.is_dir():
        for program in sorted(package_bin.iterdir()):
            if not (bin_dir / program.name).exists():
                (bin_dir / program.name).symlink_to(program)
