"""nixfmt stand-in for offline machines: whitespace normalization of .nix files.

Trailing whitespace is removed, line endings become LF and a file ends in exactly one newline.
A change is written only if `nix-instantiate --parse` gives the same expression before and
after (whitespace inside a multi-line string is content, so such a file is left as it is and
named). `--check` writes nothing and exits 1 if a file would change. Directories are searched
for *.nix files; with no argument, the current directory.
"""

import os
import pathlib
import subprocess
import sys
import tempfile

NIX_INSTANTIATE = "@nixInstantiate@"


def parsed(path: pathlib.Path) -> bytes:
    result = subprocess.run(
        [NIX_INSTANTIATE, "--parse", "--store", "dummy://", str(path)],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"nixfmt: {path}: does not parse:\n{result.stderr.decode(errors='replace')}"
        )
    return result.stdout


def normalized(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).rstrip("\n") + "\n"


def nix_files(arguments: list[str]) -> list[pathlib.Path]:
    files: list[pathlib.Path] = []
    for argument in arguments or ["."]:
        path = pathlib.Path(argument)
        if path.is_dir():
            files.extend(
                sorted(p for p in path.rglob("*.nix") if ".git" not in p.parts)
            )
        else:
            files.append(path)
    return files


def main(argv: list[str]) -> int:
    check_only = "--check" in argv
    would_change: list[pathlib.Path] = []
    for path in nix_files([a for a in argv if a != "--check"]):
        original = path.read_bytes().decode("utf-8")  # bytes: keep "\r\n" visible
        formatted = normalized(original)
        if formatted == original:
            continue
        with tempfile.NamedTemporaryFile(
            suffix=".nix", dir=path.parent, delete=False
        ) as tmp:
            tmp.write(formatted.encode("utf-8"))
        candidate = pathlib.Path(tmp.name)
        try:
            if parsed(candidate) != parsed(path):
                print(
                    f"nixfmt: {path}: left unchanged, its strings hold trailing whitespace",
                    file=sys.stderr,
                )
                continue
            would_change.append(path)
            if not check_only:
                candidate.chmod(path.stat().st_mode & 0o7777)
                os.replace(candidate, path)
        finally:
            candidate.unlink(missing_ok=True)
    for path in would_change:
        print(
            f"nixfmt: {path}: {'needs formatting' if check_only else 'formatted'}",
            file=sys.stderr,
        )
    return 1 if check_only and would_change else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
