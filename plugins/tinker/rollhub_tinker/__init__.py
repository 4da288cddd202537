"""rollhub-tinker: the rollhub Tinker backend."""

__version__ = "0.1.0"
