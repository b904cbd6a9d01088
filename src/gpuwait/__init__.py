"""gpuwait: why the GPUs wait, and what makes them stop."""

from gpuwait.version import __version__

__all__ = ["__version__"]
