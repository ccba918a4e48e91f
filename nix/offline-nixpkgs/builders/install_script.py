"""Builder: a Python script installed as $out/bin/<programName>, run by the host interpreter.

`@name@` placeholders in the script are replaced by the derivation's attributes of that name,
as nixpkgs' substituteAll does.
"""

import os
import pathlib
import re
import sys

text = pathlib.Path(os.environ["script"]).read_text(encoding="utf-8")
text = re.sub(r"@([A-Za-z]+)@", lambda match: os.environ[match.group(1)], text)
body = text.split("\n", 1)[1] if text.startswith("#!") else text
program = pathlib.Path(os.environ["out"]) / "bin" / os.environ["programName"]
program.parent.mkdir(parents=True)
program.write_text(f"#!{sys.executable}\n{body}", encoding="utf-8")
program.chmod(0o555)
