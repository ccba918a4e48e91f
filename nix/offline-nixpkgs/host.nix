# Where the stand-in finds its host tools. These are fixed absolute paths, never the checkout:
# CI clones the repository elsewhere. bin/bootstrap makes them: the venv from python/uv.lock
# with Debian 12's python3 (it runs the stand-in's own builders), and the Debian 13 root whose
# Python 3.13 is the stand-in's python3, as nixpkgs at the pinned revision has
# (pkgs/top-level/all-packages.nix: python3 = python313). Debian's nix-bin provides nix.
# Builds run unsandboxed (sandbox = false on Debian), so builders may execute these paths; a
# sandboxed build needs them as extra-sandbox-paths (see python/tests/nix/test_build_nix.py).
rec {
  venv = "/opt/sparkflake/venv";
  python = "${venv}/bin/python";
  python3 = "/opt/sparkflake/debian13/usr/bin/python3.13";
  python3Version = "3.13";
  python3Lib = "/opt/sparkflake/debian13/usr/lib/python3.13";
  bash = "/bin/bash";
  nixBin = "/usr/bin";
  # PATH of the stand-in's own builders (runCommand scripts get stdenv's programs only).
  path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
}
