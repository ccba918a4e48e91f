"""The shared vocabulary every stage uses: errors, digests and hash forms, canonical JSON and
TOML, atomic and direct writes, file hashes, bounded document reads, worker processes.
Nothing here imports another sparkflake package."""
