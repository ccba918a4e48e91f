"""What a composition is: ``profiles/<name>/profile.toml`` read into a validated record."""
