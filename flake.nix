# sparkflake's flake: thin wiring. Python does the work (python/); Nix pins nixpkgs (the
# interpreter and runCommand only), installs the CLI from the wheels python/uv.lock pins
# (nix/locked-python.nix), fetches locked artifacts with the built-in fetchurl
# (nix/fetch-locked.nix) and runs the checks (checks/).
#
# nixpkgs is the one input. Where it cannot be fetched, a stand-in kept in this repository
# replaces it (see docs/architecture.md):
#   nix flake check --override-input nixpkgs path:./nix/offline-nixpkgs
{
  description = "sparkflake: reproducible build, verification, distribution and launch of GLM-5.3 serving runtimes";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems =
        f:
        nixpkgs.lib.genAttrs systems (
          system:
          f {
            inherit system;
            pkgs = nixpkgs.legacyPackages.${system};
          }
        );
      fetchLocked = import ./nix/fetch-locked.nix;
      images =
        pkgs: system:
        import ./nix/image.nix {
          inherit pkgs fetchLocked;
          inherit (self.packages.${system}) sparkflake;
          src = self;
        };
    in
    {
      lib = {
        inherit fetchLocked;
      };

      overlays.default = import ./overlays;

      # The CLI, and the images of the profiles with their environment and OS-base trees
      # (nix/image.nix: the CLI's builder over fixed-output fetches of the locks).
      packages = forAllSystems (
        { pkgs, system }:
        rec {
          sparkflake = pkgs.callPackage ./nix/package.nix { };
          default = sparkflake;
        }
        // builtins.removeAttrs (images pkgs system) [ "fixture-digests" ]
      );

      apps = forAllSystems (
        { pkgs, system }:
        import ./nix/apps.nix {
          inherit pkgs;
          inherit (self.packages.${system}) sparkflake;
          images = builtins.intersectAttrs {
            glm53-dflash7 = null;
            glm53-mtp5 = null;
            fixture-image = null;
          } self.packages.${system};
        }
      );

      checks = forAllSystems (
        { pkgs, system }:
        import ./checks {
          inherit pkgs fetchLocked;
          inherit (self.packages.${system}) sparkflake;
          src = self;
        }
        // {
          inherit (images pkgs system) fixture-digests;
        }
      );

      # The locked tools (python/uv.lock: sparkflake, pytest, hypothesis, ruff) and nixfmt.
      devShells = forAllSystems (
        { pkgs, ... }:
        {
          default = pkgs.mkShell {
            packages = [
              (import ./nix/locked-python.nix { inherit (pkgs) runCommand python3; }).tools
              pkgs.nixfmt-rfc-style
            ];
          };
        }
      );

      formatter = forAllSystems ({ pkgs, ... }: pkgs.nixfmt-rfc-style);
    };
}
