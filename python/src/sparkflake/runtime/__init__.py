"""Runtime conformance: the image's own code judges every launch (see check.py)."""
