"""gpuwait's version, apart from the package face so any layer may read it."""

__version__ = "0.1.0"
