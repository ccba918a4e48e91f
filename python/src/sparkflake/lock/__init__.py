"""Every input pinned: the lock records, their TOML and PEP 751 forms, and the resolution of
a profile's inputs for its target (Python distributions with uv, Debian packages from the
archive's signed indices, their dependency closure). Results are plain pins."""
