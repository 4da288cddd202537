"""rollhub-gateway: the rollhub token capture gateway."""

__version__ = "0.1.0"
