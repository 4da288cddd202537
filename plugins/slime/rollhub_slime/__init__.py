"""rollhub-slime: the rollhub slime backend."""

__version__ = "0.1.0"
