"""``rollhub view``: look at a run directory in the browser (curves, episodes, tokens)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
