# The runtime dependencies of python/pyproject.toml as packages of a nixpkgs Python package set.
# pyproject.toml stays the one list: "zstandard>=0.19" becomes ps.zstandard (nixpkgs names
# Python packages by their distribution names). A dependency nixpkgs does not have is built from
# the pure-Python wheel that python/uv.lock pins (url + sha256), fetched by the built-in fetchurl.
ps:
let
  fetchLocked = import ./fetch-locked.nix;
  pyproject = builtins.fromTOML (builtins.readFile ../python/pyproject.toml);
  uvLock = builtins.fromTOML (builtins.readFile ../python/uv.lock);

  distributionName =
    requirement: builtins.head (builtins.match "[[:space:]]*([A-Za-z0-9._-]+).*" requirement);

  lockedWheel =
    name:
    let
      locked = builtins.filter (package: package.name == name) uvLock.package;
      package =
        if locked == [ ] then
          throw "python/uv.lock has no package ${name}: run `uv lock` in python/"
        else
          builtins.head locked;
      pureWheels = builtins.filter (wheel: builtins.match ".*-none-any\\.whl" wheel.url != null) (
        package.wheels or [ ]
      );
      wheel =
        if pureWheels == [ ] then
          throw "python/uv.lock pins no pure-Python wheel of ${name}, and nixpkgs has no ${name}"
        else
          builtins.head pureWheels;
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

  fromPackageSet = name: ps.${name} or (lockedWheel name);
in
map (requirement: fromPackageSet (distributionName requirement)) pyproject.project.dependencies
