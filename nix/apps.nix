# `nix run .` runs the CLI; `nix run .#launch-rank -- RANK runtime.env` runs
# `sparkflake launch-rank RANK runtime.env` through its own console script (no shell wrapper).
{ sparkflake }:
{
  default = {
    type = "app";
    program = "${sparkflake}/bin/sparkflake";
  };
  launch-rank = {
    type = "app";
    program = "${sparkflake}/bin/sparkflake-launch-rank";
  };
}
