# The sparkflake CLI: a venv of nixpkgs' python3 holding exactly the wheels python/uv.lock pins
# and sparkflake's own wheel, with the profiles bundled (./locked-python.nix).
{ runCommand, python3 }: (import ./locked-python.nix { inherit runCommand python3; }).sparkflake
