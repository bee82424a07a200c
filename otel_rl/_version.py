"""The package version: one place, read by the build (pyproject.toml) and by the instrumentation scope."""

__version__ = "0.1.0"
