# The runtime dependencies of python/pyproject.toml as packages of a nixpkgs Python package set.
# pyproject.toml stays the one list: "zstandard>=0.19" becomes ps.zstandard (nixpkgs names
# Python packages by their distribution names). A dependency nixpkgs does not have is built from
# the pure-Python wheel that python/uv.lock pins (url + sha256), fetched by the built-in fetchurl.
# A dependency whose bytes decide image digests (deflate: the layer compressor, libdeflate
# bundled in the wheel) is always the exact wheel uv.lock pins for this platform, never a
# package set's own build, which would link another libdeflate and give other layer bytes;
# a package set may provide it only as that locked wheel (passthru.lockedWheel = true, as the
# offline stand-in's host venv does).
ps:
let
  fetchLocked = import ./fetch-locked.nix;
  pyproject = builtins.fromTOML (builtins.readFile ../python/pyproject.toml);
  uvLock = builtins.fromTOML (builtins.readFile ../python/uv.lock);

  distributionName =
    requirement: builtins.head (builtins.match "[[:space:]]*([A-Za-z0-9._-]+).*" requirement);

  # The wheel of `name` that python/uv.lock pins and whose URL matches `pattern`, installed
  # as a package of the set; `what` and `why` name the kind of wheel and the reason one is
  # needed in the error when none matches.
  lockedWheelMatching =
    {
      name,
      pattern,
      what,
      why ? "",
    }:
    let
      locked = builtins.filter (package: package.name == name) uvLock.package;
      package =
        if locked == [ ] then
          throw "python/uv.lock has no package ${name}: run `uv lock` in python/"
        else
          builtins.head locked;
      matching = builtins.filter (wheel: builtins.match pattern wheel.url != null) (
        package.wheels or [ ]
      );
      wheel =
        if matching == [ ] then
          throw "python/uv.lock pins no ${what} wheel of ${name}${why}"
        else
          builtins.head matching;
    in
    ps.buildPythonPackage {
      pname = name;
      inherit (package) version;
      format = "wheel";
      src = fetchLocked {
        inherit (wheel) url;
        sha256 = builtins.replaceStrings [ "sha256:" ] [ "" ] wheel.hash;
      };
      dependencies = map (dependency: fromPackageSet dependency.name) (package.dependencies or [ ]);
    };

  lockedWheel =
    name:
    lockedWheelMatching {
      inherit name;
      pattern = ".*-none-any\\.whl";
      what = "pure-Python";
      why = ", and nixpkgs has no ${name}";
    };

  exactWheels = [ "deflate" ];

  system = ps.python.stdenv.hostPlatform.system or ps.python.system;
  wheelArch = builtins.head (builtins.split "-" system);

  lockedPlatformWheel =
    name:
    lockedWheelMatching {
      inherit name;
      pattern = ".*-cp311-abi3-manylinux[^/]*_${wheelArch}\\.whl";
      what = "manylinux ${wheelArch} abi3";
    };

  fromPackageSet =
    name:
    if builtins.elem name exactWheels && !(ps.${name}.lockedWheel or false) then
      lockedPlatformWheel name
    else
      ps.${name} or (lockedWheel name);
in
map (requirement: fromPackageSet (distributionName requirement)) pyproject.project.dependencies
