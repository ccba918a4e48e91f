# One locked git input (docs/lock-format.md, kind "git") as a checkout in the store: Nix's
# builtins.fetchGit at the locked commit, fetched by its id from the first URL (allRefs: the
# commit need not be a branch tip; no submodules; the result has no .git). Nix 2.8 binds the
# result by `rev` and, when the record has `nar_hash`, by that NAR hash (Nix refuses any
# other). Nix does not compute git tree ids (its git object hashing came after 2.8), so the
# tree -- the binding the seeds give -- is checked where the checkout is used: sparkflake
# takes it with `--from` (fetch/git.py, import_checkouts) and admits it only when its git
# tree id is the lock's `tree`.
#
# The argument is a lock record: `urls` (a list; the first is fetched), `rev`, `tree`,
# optionally `nar_hash`. Other fields are ignored.
record:
builtins.fetchGit (
  {
    url = builtins.head record.urls;
    inherit (record) rev;
    allRefs = true;
    submodules = false;
  }
  // (if record ? nar_hash then { narHash = record.nar_hash; } else { })
)
