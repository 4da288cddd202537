"""rollhub-sandbox: the rollhub sandboxes."""

__version__ = "0.1.0"
