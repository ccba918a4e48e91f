# The sparkflake CLI, built from python/pyproject.toml with nixpkgs' own Python builder.
{ lib, python3Packages }:
let
  pyproject = builtins.fromTOML (builtins.readFile ../python/pyproject.toml);
in
python3Packages.buildPythonApplication {
  pname = pyproject.project.name;
  inherit (pyproject.project) version;
  pyproject = true;
  src = ../python;
  build-system = [ python3Packages.setuptools ];
  dependencies = import ./python-dependencies.nix python3Packages;
  pythonImportsCheck = [ "sparkflake" ];
  meta = {
    inherit (pyproject.project) description;
    license = lib.licenses.asl20;
    mainProgram = "sparkflake";
  };
}
