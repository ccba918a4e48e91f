"""sparkflake: reproducible GLM-5.3 serving runtimes for four GB10 hosts (linux/arm64)."""

__version__ = "0.1.0"
