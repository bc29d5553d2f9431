"""The package version (one place; :mod:`autotune` re-exports it as ``__version__``)."""

__version__ = "0.1.0"
