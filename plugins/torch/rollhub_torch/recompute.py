"""Recomputing the trained layers' activations in the backward pass.

A response batch forwarded on its prompt's states would otherwise keep, for every trained
layer, the MLP's intermediates, the keys and values repeated over the query heads and the
attention's inputs until its backward pass: about 0.5 MB a token at SmolLM2's size, most
of the main job's peak memory. Under :func:`recomputed` each trained layer keeps only its
input and runs again when the backward pass reaches it (one more forward of the top
layers, a few percent of a step).

A replayed layer would append its keys and values to the cache a second time, so the
batch's cache is a :class:`ReplayableCache`: an update returns the fixed prefix followed by
the new states and stores nothing (the batch is the sequences' end: no later token reads
them), so a replay sees what the first pass saw.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

__all__ = ["ReplayableCache", "recomputed"]


class ReplayableCache(DynamicCache):
    """A cache over fixed per-layer ``prefix`` states whose updates may run twice; it
    keeps no states of its own."""

    def __init__(self, prefix: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        super().__init__(ddp_cache_data=prefix)
        self._prefix = list(prefix)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
        *args: Any, **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's states: its prefix followed by ``key_states``/``value_states``."""
        keys, values = self._prefix[layer_idx]
        return torch.cat([keys, key_states], dim=-2), torch.cat([values, value_states], dim=-2)


@contextmanager
def recomputed(layers: Sequence[torch.nn.Module]) -> Iterator[None]:
    """Within the block, each layer with a trained parameter keeps only its inputs for the
    backward pass and recomputes the rest there."""
    trained = [m for m in layers if any(p.requires_grad for p in m.parameters())]
    for module in trained:
        # an instance attribute shadows the class's forward for this module only
        module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
    try:
        yield
    finally:
        for module in trained:
            del module.forward
