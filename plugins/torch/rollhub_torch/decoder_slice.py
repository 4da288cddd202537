"""A slice of a decoder's layers, forwarded on hidden states instead of token ids.

The trainer splits its model where the trained layers begin (:mod:`rollhub_torch.frozen_ahead`):
the frozen layers run ahead of the step, the trained ones in it. :func:`forward_layers`
runs any slice of the layers as the Hugging Face decoder's own forward runs all of them
(positions after the cache's, its causal mask, its rotary embeddings), so the two halves
compose to the same computation; :func:`~rollhub_torch.frozen_ahead.split_matches` checks
that against this ``transformers`` version before a run relies on it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["forward_layers"]


def forward_layers(
    decoder: Any, hidden: torch.Tensor, layers: Sequence[Any], *,
    attention_mask: torch.Tensor | None,
    cache: Any, cache_kw: str,
) -> torch.Tensor:
    """``hidden`` (``[rows, tokens, hidden]``) through ``layers`` of ``decoder``, after the
    positions ``cache`` holds: what the decoder's own forward does between its embedding
    and its final norm, for a slice of its layers."""
    import torch
    from transformers.masking_utils import create_causal_mask

    past = cache.get_seq_length()
    position_ids = (torch.arange(hidden.shape[1]) + past).unsqueeze(0)
    mask = create_causal_mask(
        config=decoder.config, inputs_embeds=hidden, attention_mask=attention_mask,
        position_ids=position_ids, **{_mask_cache_kw(create_causal_mask): cache},
    )
    positions = decoder.rotary_emb(hidden, position_ids=position_ids)
    for layer in layers:
        hidden = layer(
            hidden, attention_mask=mask, position_embeddings=positions,
            position_ids=position_ids, use_cache=True, **{cache_kw: cache},
        )
    return hidden


@functools.cache
def _mask_cache_kw(create_causal_mask: Any) -> str:
    """The name ``create_causal_mask`` takes the cache by in this ``transformers``."""
    return "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
