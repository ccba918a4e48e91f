"""Builder: a program shipped in a wheel's <name>.data/scripts/ (ruff's wheels carry the
statically linked ruff binary there), extracted to $out/bin."""

import os
import pathlib
import zipfile

bin_dir = pathlib.Path(os.environ["out"]) / "bin"
bin_dir.mkdir(parents=True)
member = os.environ["member"]
with zipfile.ZipFile(os.environ["wheel"]) as wheel:
    target = bin_dir / pathlib.PurePosixPath(member).name
    target.write_bytes(wheel.read(member))
target.chmod(0o555)
