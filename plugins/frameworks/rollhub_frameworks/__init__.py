"""rollhub-frameworks: the rollhub agent-framework adapters."""

__version__ = "0.1.0"
