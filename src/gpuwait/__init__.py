"""gpuwait: why the GPUs wait, and what makes them stop."""

__version__ = "0.1.0"
