"""Fixtures of the gateway-pool tests: the tokenizer, and a tokenizer directory the replicas
load quickly. Helpers that drive agents and check traces live in ``pool_checks``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rollhub_gateway.models import load_tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def model_dir(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """SmolLM2's tokenizer and chat template as a plain model directory: a replica loads it
    in about a second, where de-quantising the GGUF's vocabulary takes several."""
    path = tmp_path_factory.mktemp("smollm2-tokenizer")
    tokenizer.save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    return str(path)
