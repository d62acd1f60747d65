"""The package version: one place, read by ``setup.cfg`` and the run records."""

__version__ = "0.2.0"
