# legacyPackages.<system> of the stand-in: the nixpkgs package-set surface sparkflake uses
# (callPackage, runCommand, mkShell, python3 / python3Packages with buildPythonApplication and
# withPackages, ruff, nix, nixfmt-rfc-style), each a plain `derivation` whose builder is a host
# program. Builders are Python scripts in ./builders run by the host venv's interpreter; only
# runCommand and mkShell use bash, because their nixpkgs contract is a bash script.
{ lib, system }:
let
  host = import ./host.nix;
  sitePackages = "lib/python${host.pythonVersion}/site-packages";

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

  # A Python distribution that the host venv provides; building it checks that it is there.
  hostPythonPackage =
    distribution:
    hostBuilt {
      name = "host-python3-${distribution}";
      builder = ./builders/host_python_package.py;
      env = {
        inherit distribution;
      };
      passthru = {
        pname = distribution;
        pythonModule = python3;
      };
    };

  # Programs of the host, linked into $out/bin under their names.
  hostPrograms =
    {
      name,
      programs,
      mainProgram,
    }:
    hostBuilt {
      inherit name;
      builder = ./builders/link_host_programs.py;
      env.programs = builtins.concatStringsSep " " (
        builtins.attrValues (builtins.mapAttrs (link: target: "${link}=${target}") programs)
      );
      meta = {
        inherit mainProgram;
      };
    };

  withPackages =
    select:
    hostBuilt {
      name = "python${host.pythonVersion}-env";
      builder = ./builders/python_env.py;
      env = {
        pythonPackages = select python3Packages;
      };
      passthru = {
        inherit sitePackages;
      };
    };

  python3 =
    withPackages (_: [ ])
    // {
      inherit sitePackages withPackages system;
      inherit (host) pythonVersion;
      pkgs = python3Packages;
      executable = "python${host.pythonVersion}";
    };

  buildPythonApplication =
    {
      pname,
      version,
      src,
      pyproject ? false,
      format ? null,
      build-system ? [ ],
      dependencies ? [ ],
      pythonImportsCheck ? [ ],
      meta ? { },
      ...
    }:
    assert
      pyproject || format == "wheel" || throw "the offline stand-in builds pyproject = true or format = \"wheel\" only";
    hostBuilt {
      name = "${pname}-${version}";
      builder = ./builders/build_python_application.py;
      env = {
        inherit
          pname
          version
          src
          dependencies
          ;
        buildSystem = build-system;
        format = if format == null then "pyproject" else format;
        pythonImportsCheck = builtins.concatStringsSep " " pythonImportsCheck;
      };
      inherit meta;
      passthru = {
        inherit pname version dependencies;
        pythonModule = python3;
      };
    };

  python3Packages = {
    python = python3;
    inherit buildPythonApplication;
    buildPythonPackage = buildPythonApplication;
    toPythonModule = package: package // { pythonModule = python3; };
    setuptools = hostPythonPackage "setuptools";
    zstandard = hostPythonPackage "zstandard";
    # the host venv holds the exact wheel python/uv.lock pins (bin/bootstrap, uv sync)
    deflate = hostPythonPackage "deflate" // {
      lockedWheel = true;
    };
    installer = hostPythonPackage "installer";
    packaging = hostPythonPackage "packaging";
    pytest = hostPythonPackage "pytest";
    hypothesis = hostPythonPackage "hypothesis";
    sparkcache = hostPythonPackage "sparkcache";
    # sign/verify: ECDSA and scrypt (cryptography), nacl/secretbox of cosign's key files (pynacl)
    cryptography = hostPythonPackage "cryptography";
    pynacl = hostPythonPackage "pynacl";
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
    # directories of nativeBuildInputs/buildInputs are on PATH.
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
          PATH =
            lib.makeBinPath ((env.nativeBuildInputs or [ ]) ++ (env.buildInputs or [ ])) + ":" + host.path;
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

    ruff = hostPrograms {
      name = "ruff-host";
      programs.ruff = "${host.venv}/bin/ruff";
      mainProgram = "ruff";
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
