"""rollhub-verl: the rollhub verl backend."""

__version__ = "0.1.0"
