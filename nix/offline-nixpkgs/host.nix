# Where the stand-in finds its host tools. These are fixed absolute paths, never the checkout:
# CI clones the repository elsewhere. ./bin/test creates the venv from python/uv.lock
# (pytest, hypothesis, ruff, setuptools and sparkflake's runtime dependencies) with Debian's
# python3; Debian's nix-bin provides nix. Builds run unsandboxed (sandbox = false on Debian),
# so builders may execute these paths.
rec {
  venv = "/opt/sparkflake/venv";
  python = "${venv}/bin/python";
  pythonVersion = "3.11";
  bash = "/bin/bash";
  nixBin = "/usr/bin";
  # Base PATH for runCommand scripts: Debian's coreutils, findutils, grep, sed.
  path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
}
