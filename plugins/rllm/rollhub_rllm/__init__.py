"""rollhub-rllm: the rollhub rLLM backend."""

__version__ = "0.1.0"
