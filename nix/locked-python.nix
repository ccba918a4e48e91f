# Python environments from python/uv.lock: every distribution the tool, its tests and its lint
# run with is the wheel uv.lock pins (a fixed-output fetch, ./fetch-locked.nix), installed by
# pypa/installer (the locked version, run from its wheel: ./install_wheels.py) into a venv of
# nixpkgs' interpreter. nixpkgs gives the interpreter and runCommand only, never a Python
# package: its python3Packages are other versions (installer 0.7.0 writes another RECORD
# order and keeps __pycache__, packaging 25.0 accepts `vllm===`; docs/architecture.md), and
# these libraries decide image bytes and check results.
#
#   sparkflake    the CLI: runtime dependencies + sparkflake, the profiles bundled under
#                 share/sparkflake/profiles (found by the CLI from any directory)
#   tools         the same plus the `test` extra (pytest, hypothesis, ruff, mypy): checks,
#                 devShell
#   wheelOf       name -> the fetched wheel uv.lock pins for this interpreter and platform
{ runCommand, python3 }:
let
  system = python3.stdenv.hostPlatform.system or python3.system;
  fetchLocked = import ./fetch-locked.nix;
  uvLock = builtins.fromTOML (builtins.readFile ../python/uv.lock);
  pyproject = builtins.fromTOML (builtins.readFile ../python/pyproject.toml);
  inherit (pyproject.project) version;

  lockedPackage =
    name:
    let
      found = builtins.filter (package: package.name == name) uvLock.package;
    in
    if found == [ ] then
      throw "python/uv.lock has no package ${name}: run `uv lock` in python/"
    else
      builtins.head found;

  # Markers of uv.lock dependency edges, evaluated for Linux; any other marker is refused
  # rather than guessed.
  markerHolds =
    package: dependency:
    let
      marker = dependency.marker or null;
    in
    if marker == null then
      true
    else if marker == "sys_platform == 'win32'" then
      false
    else if marker == "sys_platform != 'win32'" then
      true
    # nixpkgs' python3 is CPython (cffi and pycparser, dependencies of cryptography)
    else if
      marker == "platform_python_implementation != 'PyPy'" || marker == "implementation_name != 'PyPy'"
    then
      true
    else
      throw "python/uv.lock: dependency ${dependency.name} of ${package.name} has marker \"${marker}\", which nix/locked-python.nix does not evaluate";

  dependencyNames =
    package: extras:
    map (dependency: dependency.name) (
      builtins.filter (markerHolds package) (
        (package.dependencies or [ ])
        ++ builtins.concatLists (map (extra: package.optional-dependencies.${extra}) extras)
      )
    );

  # The names of `roots` and of everything they depend on, sorted.
  closure =
    roots:
    let
      walk =
        seen: pending:
        if pending == [ ] then
          seen
        else
          let
            name = builtins.head pending;
            rest = builtins.tail pending;
          in
          if builtins.elem name seen then
            walk seen rest
          else
            walk (seen ++ [ name ]) (rest ++ dependencyNames (lockedPackage name) [ ]);
    in
    builtins.sort builtins.lessThan (walk [ ] roots);

  pythonTag = "cp" + builtins.replaceStrings [ "." ] [ "" ] python3.pythonVersion;
  arch = builtins.head (builtins.split "-" system);
  # Preferred first: this interpreter's own ABI, the stable ABI, then interpreter-independent
  # wheels. A py3-none wheel with a platform tag carries a program, not an extension module:
  # its musllinux build is statically linked and so runs where /lib64/ld-linux-* does not
  # exist (NixOS, the Nix sandbox).
  wheelPatterns = [
    ".*-${pythonTag}-${pythonTag}-manylinux[^-]*_${arch}\\.whl"
    ".*-cp3[0-9]+-abi3-manylinux[^-]*_${arch}\\.whl"
    ".*-py3-none-musllinux_[0-9]+_[0-9]+_${arch}\\.whl"
    ".*-py3-none-manylinux[^-]*_${arch}\\.whl"
    ".*-(py3|py2\\.py3)-none-any\\.whl"
  ];

  wheelOf =
    name:
    let
      package = lockedPackage name;
      wheels = package.wheels or [ ];
      matching =
        pattern: builtins.filter (wheel: builtins.match pattern (baseNameOf wheel.url) != null) wheels;
      candidates = builtins.concatLists (map matching wheelPatterns);
      wheel =
        if candidates == [ ] then
          throw "python/uv.lock pins no wheel of ${name} ${package.version} for CPython ${python3.pythonVersion} on ${system} (it has ${toString (builtins.length wheels)} wheels, none of: ${builtins.concatStringsSep " " wheelPatterns})"
        else
          builtins.head candidates;
    in
    fetchLocked {
      inherit (wheel) url;
      sha256 = builtins.replaceStrings [ "sha256:" ] [ "" ] wheel.hash;
    };

  # Installs wheels (and wheel files matched by a glob) into the venv at `venv`.
  installWheels = venv: wheels: ''
    PYTHONPATH=${wheelOf "installer"} ${venv}/bin/python -B ${./install_wheels.py} ${builtins.concatStringsSep " " wheels}
  '';
  makeVenv = path: "${python3}/bin/python${python3.pythonVersion} -m venv --without-pip ${path}";

  source = builtins.path {
    path = ../python;
    name = "sparkflake-python-source";
    filter =
      path: _type:
      !(builtins.elem (baseNameOf path) [
        "__pycache__"
        ".hypothesis"
        ".pytest_cache"
        ".ruff_cache"
        ".mypy_cache"
        "build"
        ".venv"
      ])
      && builtins.match ".*\\.egg-info" (baseNameOf path) == null;
  };

  # sparkflake's own wheel, built by the locked setuptools (the PEP 517 backend of
  # pyproject.toml) with a fixed SOURCE_DATE_EPOCH, so its zip is the same on every build.
  wheel = runCommand "sparkflake-${version}-wheel" { } ''
    ${makeVenv "$TMPDIR/build-env"}
    cd "$TMPDIR"
    ${installWheels "$TMPDIR/build-env" (map wheelOf (closure [ "setuptools" ]))}
    cp -r ${source} "$TMPDIR/source"
    chmod -R u+w "$TMPDIR/source"
    cd "$TMPDIR/source"
    mkdir "$out"
    SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 "$TMPDIR/build-env/bin/python" -c \
      'import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])' "$out"
  '';

  environment =
    { name, extras }:
    runCommand name
      {
        meta.mainProgram = "sparkflake";
      }
      ''
        ${makeVenv "$out"}
        cd "$TMPDIR"
        ${installWheels "$out" (
          map wheelOf (
            closure (
              builtins.filter (dependency: dependency != "sparkflake") (
                dependencyNames (lockedPackage "sparkflake") extras
              )
            )
          )
          ++ [ "${wheel}/*.whl" ]
        )}
        mkdir -p "$out/share/sparkflake"
        cp -r ${../profiles} "$out/share/sparkflake/profiles"
        "$out/bin/python" -I -c 'import sparkflake'
      '';
in
{
  inherit wheelOf wheel;
  sparkflake = environment {
    name = "sparkflake-${version}";
    extras = [ ];
  };
  tools = environment {
    name = "sparkflake-${version}-tools";
    extras = [ "test" ];
  };
}
