# legacyPackages.<system> of the stand-in: the nixpkgs package-set surface around sparkflake
# (callPackage, runCommand, mkShell, python3 with withPackages, python3Packages, ruff, nix,
# nixfmt-rfc-style), each a plain `derivation`, modeled on nixpkgs at the revision flake.lock
# pins: python3 is Python 3.13 and bare, withPackages a symlink tree, python3Packages and ruff
# at that revision's versions (docs/architecture.md says what is and is not modeled). Builders
# are Python scripts in ./builders run by the host venv's interpreter; only runCommand and
# mkShell use bash, because their nixpkgs contract is a bash script.
{ lib, system }:
let
  host = import ./host.nix;
  # Nix's built-in fetcher, as <nix/fetchurl.nix> uses it (the stand-in is its own flake: the
  # project's nix/ is not beside it in the store).
  fetchurl =
    { url, sha256, ... }:
    derivation {
      name = baseNameOf url;
      system = "builtin";
      builder = "builtin:fetchurl";
      inherit url;
      outputHashMode = "flat";
      outputHashAlgo = "sha256";
      outputHash = sha256;
      executable = false;
      unpack = false;
      preferLocalBuild = true;
    };
  sitePackages = "lib/python${host.python3Version}/site-packages";

  # A derivation built by one of ./builders/*.py; meta and passthru stay out of its environment.
  hostBuilt =
    {
      name,
      builder,
      env ? { },
      meta ? { },
      passthru ? { },
    }:
    derivation (
      env
      // {
        inherit name system;
        builder = host.python;
        args = [
          "-I"
          "-B"
          builder
        ];
        inherit sitePackages;
        # Nix starts the builder as argv[0] "python"; found on PATH, it is the venv's
        # interpreter, so Python sees the venv (its packages) rather than the base install.
        PATH = "${host.venv}/bin:${host.path}";
      }
    )
    // passthru
    // {
      inherit meta;
    };

  # Programs of the host, linked into $out/bin under their names.
  hostPrograms =
    {
      name,
      programs,
      mainProgram,
      execPrograms ? { },
      directories ? { },
    }:
    let
      pairs = links: builtins.concatStringsSep " " (builtins.attrValues (builtins.mapAttrs (link: target: "${link}=${target}") links));
    in
    hostBuilt {
      inherit name;
      builder = ./builders/link_host_programs.py;
      env = {
        programs = pairs programs;
        execPrograms = pairs execPrograms;
        directories = pairs directories;
      };
      meta = {
        inherit mainProgram;
      };
    };

  # The wheels PyPI publishes for the versions nixpkgs has at the pinned revision
  # (d7600c77, 2025-08-30), as issue #15 read them there: installer 0.7.0
  # (python-modules/installer), packaging 25.0 (python-modules/packaging), zstandard 0.23.0
  # (python-modules/zstandard), ruff 0.12.11 (by-name/ru/ruff; ruff 0.13.1 followed in
  # September). The search tool's stored nixpkgs copies are at other commits and could not
  # confirm the revision itself. Only x86_64-linux wheels are kept (this machine and CI).
  atRevision = {
    installer = {
      version = "0.7.0";
      url = "https://files.pythonhosted.org/packages/e5/ca/1172b6638d52f2d6caa2dd262ec4c811ba59eee96d54a7701930726bce18/installer-0.7.0-py3-none-any.whl";
      sha256 = "05d1933f0a5ba7d8d6296bb6d5018e7c94fa473ceb10cf198a92ccea19c27b53";
    };
    packaging = {
      version = "25.0";
      url = "https://files.pythonhosted.org/packages/20/12/38679034af332785aac8774540895e234f4d07f7545804097de4b666afd8/packaging-25.0-py3-none-any.whl";
      sha256 = "29572ef2b1f17581046b3a2227d5c611fb25ec70ca1ba8554b24b0e69331a484";
    };
    zstandard = {
      version = "0.23.0";
      url = "https://files.pythonhosted.org/packages/fa/18/89ac62eac46b69948bf35fcd90d37103f38722968e2981f752d69081ec4d/zstandard-0.23.0-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl";
      sha256 = "6f77fa49079891a4aab203d0b1744acc85577ed16d767b52fc089d83faf8d8ed";
    };
    ruff = {
      version = "0.12.11";
      url = "https://files.pythonhosted.org/packages/68/ab/2542b14890d0f4872dd81b7b2a6aed3ac1786fae1ce9b17e11e6df9e31e3/ruff-0.12.11-py3-none-musllinux_1_2_x86_64.whl";
      sha256 = "e07fbb89f2e9249f219d88331c833860489b49cdf4b032b8e4432e9b13e8a4b9";
    };
  };
  fetchedWheel =
    name:
    if system == "x86_64-linux" then
      fetchurl atRevision.${name}
    else
      throw "the offline nixpkgs stand-in has ${name}'s wheel for x86_64-linux only, not ${system}";

  # python3Packages.<name>: the wheel installed by the revision's own installer, run by the
  # stand-in's python3 (3.13).
  wheelPackage =
    pname: importCheck:
    derivation {
      name = "python${host.python3Version}-${pname}-${atRevision.${pname}.version}";
      inherit system sitePackages importCheck;
      builder = "${python3}/bin/python${host.python3Version}";
      args = [
        "-B"
        ./builders/install_wheel.py
      ];
      wheel = fetchedWheel pname;
      wheelName = baseNameOf atRevision.${pname}.url;
      PYTHONPATH = fetchedWheel "installer";
      PATH = host.path;
    }
    // {
      inherit pname;
      inherit (atRevision.${pname}) version;
      pythonModule = python3;
    };

  withPackages =
    select:
    hostBuilt {
      name = "python${host.python3Version}-env";
      builder = ./builders/python_env.py;
      env = {
        pythonPackages = select python3Packages;
        # the interpreter itself (not python3's exec script), so that it finds $out/pyvenv.cfg
        interpreter = host.python3;
      };
      passthru = {
        inherit sitePackages;
      };
    };

  # What nixpkgs' stdenv puts on every build's PATH and nothing else of the machine
  # (pkgs/stdenv/generic/common-path.nix: coreutils findutils diffutils gnused gnugrep gawk
  # gnutar gzip bzip2 gnumake bash patch xz file), from the Debian packages that are them:
  # a runCommand that calls any other host program fails here as it would with nixpkgs.
  stdenvPrograms = hostBuilt {
    name = "stdenv-programs-host";
    builder = ./builders/link_debian_packages.py;
    env = {
      packages = "coreutils findutils diffutils sed grep gawk tar gzip bzip2 make bash patch xz-utils file";
      aliases = "awk=gawk";
    };
  };

  # The interpreter alone, as nixpkgs' python3 is: no package on its path but the stdlib.
  python3 =
    hostPrograms {
      name = "python3-${host.python3Version}";
      programs = { };
      execPrograms = {
        "python${host.python3Version}" = host.python3;
        python3 = host.python3;
      };
      # Its stdlib beside bin/, as in nixpkgs' python3: a venv of it (home = this bin/)
      # finds lib/python3.13/os.py from there.
      directories."lib/python${host.python3Version}" = host.python3Lib;
      mainProgram = "python3";
    }
    // {
      inherit sitePackages withPackages;
      pythonVersion = host.python3Version;
      pkgs = python3Packages;
      executable = "python${host.python3Version}";
      interpreter = "${python3}/bin/python${host.python3Version}";
      stdenv.hostPlatform.system = system;
    };

  # What the flake may take from nixpkgs' Python package set, at the revision's versions and
  # under nixpkgs' attribute names. Nothing else is modeled: an attribute missing here
  # (buildPythonApplication, pytest, …) fails evaluation, as a lock-only flake should.
  python3Packages = {
    python = python3;
    toPythonModule = package: package // { pythonModule = python3; };
    installer = wheelPackage "installer" "installer";
    packaging = wheelPackage "packaging" "packaging";
    zstandard = wheelPackage "zstandard" "zstandard";
  };

  pkgs = {
    inherit
      lib
      system
      python3
      python3Packages
      ;

    callPackage =
      fn: overrides:
      let
        f = if builtins.isFunction fn then fn else import fn;
      in
      f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // overrides);

    # nixpkgs' contract: `buildCommand` is a bash script; $out must be created; the bin
    # directories of nativeBuildInputs/buildInputs are on PATH, then stdenv's programs.
    runCommand =
      name: env: buildCommand:
      derivation (
        builtins.removeAttrs env [
          "meta"
          "passthru"
        ]
        // {
          inherit name system;
          builder = host.bash;
          args = [
            "-e"
            "-u"
            "-o"
            "pipefail"
            "-c"
            # A trailing builtin keeps bash from exec'ing the script's last command: coreutils
            # close stdout/stderr before they exit, Nix 2.8 then takes the build as finished
            # and kills the still-running builder (signal 9).
            "${buildCommand}\n:"
          ];
          PATH = lib.makeBinPath ((env.nativeBuildInputs or [ ]) ++ (env.buildInputs or [ ]) ++ [ stdenvPrograms ]);
        }
      );

    # `nix develop` runs the derivation's builder (bash) with its own script; plain builds
    # record the PATH the shell would have.
    mkShell =
      {
        packages ? [ ],
        nativeBuildInputs ? [ ],
        buildInputs ? [ ],
        shellHook ? "",
        name ? "nix-shell",
        ...
      }:
      let
        shellPath = lib.makeBinPath (packages ++ nativeBuildInputs ++ buildInputs) + ":" + host.path;
      in
      derivation {
        inherit name system shellHook;
        # get-env.sh of `nix develop` writes the environment to each of $outputs.
        outputs = [ "out" ];
        builder = host.bash;
        args = [
          "-e"
          "-c"
          "printf '%s\\n' \"$PATH\" > \"$out\""
        ];
        PATH = shellPath;
      };

    # The interactive shell of `nix develop`.
    bashInteractive = hostPrograms {
      name = "bash-host";
      programs.bash = host.bash;
      mainProgram = "bash";
    };

    # nixpkgs' ruff at the revision (0.12.x), not the locked one: a check that ran it would
    # report what the locked ruff does not.
    ruff = hostBuilt {
      name = "ruff-${atRevision.ruff.version}";
      builder = ./builders/wheel_program.py;
      env = {
        wheel = fetchedWheel "ruff";
        member = "ruff-${atRevision.ruff.version}.data/scripts/ruff";
      };
      meta.mainProgram = "ruff";
    };

    # nixpkgs' bubblewrap: bin/bwrap (the runtime check's sandbox, checks/runtime-check-fixture.nix).
    bubblewrap = hostPrograms {
      name = "bubblewrap-host";
      programs.bwrap = "/usr/bin/bwrap";
      mainProgram = "bwrap";
    };

    # nixpkgs' zstd: bin/zstd (the flake's unit tests decompress our layers with it).
    zstd = hostPrograms {
      name = "zstd-host";
      programs.zstd = "/usr/bin/zstd";
      mainProgram = "zstd";
    };

    nix = hostPrograms {
      name = "nix-host";
      programs = {
        nix = "${host.nixBin}/nix";
        nix-build = "${host.nixBin}/nix-build";
        nix-instantiate = "${host.nixBin}/nix-instantiate";
        nix-store = "${host.nixBin}/nix-store";
      };
      mainProgram = "nix";
    };

    # Formatting that needs no network: whitespace normalization, refused wherever it would
    # change what the file parses to. The real nixfmt replaces it when nixpkgs is not overridden.
    nixfmt-rfc-style = hostBuilt {
      name = "nixfmt-offline-stand-in";
      builder = ./builders/install_script.py;
      env = {
        script = ./nixfmt.py;
        programName = "nixfmt";
        nixInstantiate = "${host.nixBin}/nix-instantiate";
      };
      meta.mainProgram = "nixfmt";
    };
  };
in
pkgs
