"""Resolution of a profile's inputs for its target: Python distributions with uv, Debian
packages from the archive's signed indices. Results are plain pins (urls, sha256, size)."""
