"""The KV cache of a left-padded batch: rows joining it and rows leaving it.

Each row's states are the last ``length`` columns of the batch; the attention mask (one row
per batch row) hides the padding to their left. Used by :mod:`.batching` between decoding
steps; torch and transformers are imported when a batch is first built.
"""

from __future__ import annotations

import logging
from typing import Any

from rollhub.errors import GatewayError

__all__ = ["merge_row", "select_rows"]

log = logging.getLogger(__name__)


def merge_row(cache: Any, mask: Any, row_cache: Any, length: int) -> tuple[Any, Any]:
    """The batch with one more row: ``row_cache`` (one row of ``length`` positions),
    left-padded with the batch to the longer of the two. ``mask`` None: the batch is empty
    and becomes this row (``cache`` is then ignored).

    :raises GatewayError: the model has sliding-window cache layers (they cannot be merged).
    """
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    if mask is None:
        return row_cache, torch.ones((1, length), dtype=torch.long)
    if any(getattr(layer, "is_sliding", False) for layer in row_cache.layers):
        raise GatewayError(
            "this model has sliding-window cache layers, which cannot be merged into a "
            "batch: set the engine option max_batch_size=1",
            engine="transformers",
        )
    old_len = mask.shape[1]
    width = max(old_len, length)
    pad_old, pad_new = width - old_len, width - length
    layers = []
    for old, new in zip(cache.layers, row_cache.layers, strict=True):
        keys = torch.cat([F.pad(old.keys, (0, 0, pad_old, 0)), F.pad(new.keys, (0, 0, pad_new, 0))])
        values = torch.cat(
            [F.pad(old.values, (0, 0, pad_old, 0)), F.pad(new.values, (0, 0, pad_new, 0))]
        )
        layers.append((keys, values))
    new_mask = torch.ones((1, length), dtype=torch.long)
    merged = torch.cat([F.pad(mask, (pad_old, 0)), F.pad(new_mask, (pad_new, 0))])
    return DynamicCache(ddp_cache_data=layers), merged


def select_rows(cache: Any, mask: Any, keep: list[int]) -> tuple[Any, Any]:
    """The batch of rows ``keep`` only (in place for the cache), with the leading columns
    that are padding in every remaining row cut off so the cache stays tight."""
    import torch

    cache.batch_select_indices(torch.tensor(keep, dtype=torch.long))
    mask = mask[keep]
    used = torch.nonzero(mask.sum(dim=0)).flatten()
    first = int(used[0]) if used.numel() else 0
    if first > 0:
        mask = mask[:, first:]
        for layer in cache.layers:
            layer.keys = layer.keys[:, :, first:]
            layer.values = layer.values[:, :, first:]
    return cache, mask
