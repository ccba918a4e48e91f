# checks.<system>: `nix flake check` builds every attribute of this set.
#
# Each other checks/<name>.nix file is a check too, named after its file: a function of the
# attribute set below (take what you need, end with `...`; `images` is nix/image.nix's set). The digest-verification records of
# the profiles go here as checks/digest-verification-<profile>.nix.
{
  pkgs,
  src,
  sparkflake,
  fetchLocked,
}:
let
  # The images the checks judge, built once for all of them (nix/image.nix).
  images = import ../nix/image.nix {
    inherit
      pkgs
      src
      sparkflake
      fetchLocked
      ;
  };
  arguments = {
    inherit
      pkgs
      src
      sparkflake
      fetchLocked
      images
      ;
  };

  # The locked tools (python/uv.lock: the runtime dependencies, sparkflake's wheel, pytest,
  # hypothesis, ruff, mypy), never nixpkgs' python3Packages or ruff (nix/locked-python.nix).
  inherit (import ../nix/locked-python.nix { inherit (pkgs) runCommand python3; }) tools;

  builtIn = {
    # The unit tests of the pure stages (hashes, lock and profile models, parsers), run against
    # the package Nix built rather than the source tree, as the unprivileged build user.
    # ./bin/test runs the whole suite directly, as root, with the real tools (umoci, podman,
    # network namespaces, nested nix), which a Nix build cannot offer.
    # Besides Python, the selected tests run nix (hash forms, as Nix itself converts them) and
    # zstd (decompressing our layers): given here, since a build's PATH has nothing else.
    pytest = pkgs.runCommand "sparkflake-pytest" { nativeBuildInputs = [ tools pkgs.nix pkgs.zstd ]; } ''
      cp -r ${src} source
      chmod -R u+w source
      cd source/python
      export HOME=$TMPDIR NIX_STATE_DIR=$TMPDIR/state NIX_LOG_DIR=$TMPDIR/log
      # the tests import the installed wheel of the locked environment, not the source tree
      python -c 'import sparkflake, sys; sys.exit(not sparkflake.__file__.startswith("${tools}/"))'
      # A fixed hypothesis seed: the check's result depends on its inputs only, as a build should.
      # The tests that need nothing but Python carry the nix_sandbox marker (pyproject.toml):
      # selected by marker, so a renamed or moved file keeps its place in this check, and a
      # selection that matches nothing makes pytest exit 5, which fails the check.
      python -m pytest -p no:cacheprovider --basetemp="$TMPDIR/t" --hypothesis-seed=0 \
        -m "nix_sandbox and not root and not slow and not network" tests
      touch $out
    '';

    ruff = pkgs.runCommand "sparkflake-ruff" { nativeBuildInputs = [ tools ]; } ''
      cd ${src}
      ruff check --no-cache .
      touch $out
    '';

    # The library type-checked, strict, as ./bin/test does: pyproject.toml's [tool.mypy] is the
    # configuration (found from python/). Its cache goes to the build's own directory, since
    # the source is read-only in the store.
    mypy = pkgs.runCommand "sparkflake-mypy" { nativeBuildInputs = [ tools ]; } ''
      cd ${src}/python
      mypy --cache-dir "$TMPDIR/mypy-cache"
      touch $out
    '';

    nix-parse = pkgs.runCommand "sparkflake-nix-parse" { nativeBuildInputs = [ pkgs.nix ]; } ''
      export NIX_STATE_DIR=$TMPDIR/state NIX_LOG_DIR=$TMPDIR/log
      find ${src} -name '*.nix' -exec nix-instantiate --parse --store dummy:// {} + > /dev/null
      touch $out
    '';
  };

  checkFiles = builtins.filter (name: name != "default.nix" && builtins.match ".*\\.nix" name != null) (
    builtins.attrNames (builtins.readDir ./.)
  );
  fileChecks = builtins.listToAttrs (
    map (file: {
      name = builtins.head (builtins.match "(.*)\\.nix" file);
      value = import (./. + "/${file}") arguments;
    }) checkFiles
  );
in
builtIn // fileChecks
