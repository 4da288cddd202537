"""Where the embedded engine keeps key/value states: shared spans and per-row slots.

A row's context is at most two pieces, both allocated ahead of the steps that fill them:

- a :class:`Span`: the states of a prompt prefix, written once by a prefill and then only
  read, shared by reference by every row (and prefix-cache entry) that starts with those
  tokens: the ~300-token prompt of a GRPO group is held and read once per step, not once
  per sample;
- its slot in :class:`SlotCache`: one pre-allocated tensor for all rows, ``[layers, slots,
  kv heads, capacity, head dim]``, holding what the row adds after its span (the rest of
  its prompt, then each sampled token). A decoding step writes one position per row in
  place; nothing is concatenated.

Rows occupy slots ``0 .. rows - 1`` in order: a row that leaves is replaced by the last
one (its few private positions are copied over), so a decoding step reads one contiguous
block of slots. The capacity grows by doubling when a row needs more positions; when the
batch empties the slots are given back and the next row allocates the initial capacity
again, so neither a long generation nor an idle engine (on-policy training runs while the
engine waits) holds the memory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["SlotCache", "Span"]

log = logging.getLogger(__name__)


class Span:
    """Key/value states of ``length`` tokens: ``keys``/``values`` ``[layers, kv, cap, dim]``.

    Positions ``0 .. length - 1`` are filled; a span under construction (a prefill in
    chunks) grows ``length`` up to its capacity, and is never written after that.
    """

    __slots__ = ("keys", "length", "values")

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        self.keys, self.values, self.length = keys, values, length

    @classmethod
    def empty(cls, shape: tuple[int, int, int], capacity: int, dtype: torch.dtype) -> Span:
        """An unfilled span for ``capacity`` tokens; ``shape`` is (layers, kv heads, dim)."""
        import torch

        layers, kv, dim = shape
        keys = torch.empty((layers, kv, capacity, dim), dtype=dtype)
        return cls(keys, torch.empty_like(keys), 0)

    @property
    def capacity(self) -> int:
        """Positions allocated."""
        return int(self.keys.shape[2])

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return 2 * self.keys.numel() * self.keys.element_size()

    def copy_from(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Append states ``[layers, kv, n, dim]`` after the filled positions."""
        n = int(keys.shape[2])
        self.keys[:, :, self.length : self.length + n] = keys
        self.values[:, :, self.length : self.length + n] = values
        self.length += n


class SlotCache:
    """Per-row private states of the batch: one tensor, one slot per row.

    :param shape: (layers, kv heads, head dim) of the model.
    :param slots: rows decoded together (the engine's ``max_batch_size``).
    :param capacity: positions per slot to start with; doubled on demand.
    """

    def __init__(self, shape: tuple[int, int, int], slots: int, capacity: int, dtype: torch.dtype) -> None:
        self.shape, self.slots, self.dtype = shape, slots, dtype
        self.initial = capacity
        self.keys: torch.Tensor
        self.values: torch.Tensor
        self._allocate(capacity)

    @property
    def capacity(self) -> int:
        """Positions each slot holds now."""
        return int(self.keys.shape[3])

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return 2 * self.keys.numel() * self.keys.element_size()

    def _allocate(self, capacity: int, keep: int = 0) -> None:
        import torch

        layers, kv, dim = self.shape
        keys = torch.zeros((layers, self.slots, kv, capacity, dim), dtype=self.dtype)
        values = torch.zeros_like(keys)
        if keep:
            keys[:, :, :, :keep] = self.keys[:, :, :, :keep]
            values[:, :, :, :keep] = self.values[:, :, :, :keep]
        self.keys, self.values = keys, values

    def reserve(self, positions: int, filled: int) -> None:
        """Make every slot hold at least ``positions``, keeping the first ``filled``."""
        if positions <= self.capacity:
            return
        capacity = max(self.capacity, self.initial)
        while capacity < positions:
            capacity *= 2
        log.debug("slot capacity %d -> %d positions", self.capacity, capacity)
        self._allocate(capacity, keep=filled)

    def release(self) -> None:
        """Give the memory back (the batch is empty); :meth:`reserve` allocates again."""
        if self.capacity:
            self._allocate(0)

    def move(self, source: int, target: int, length: int) -> None:
        """Copy the first ``length`` positions of slot ``source`` into slot ``target``."""
        if length:
            self.keys[:, target, :, :length] = self.keys[:, source, :, :length]
            self.values[:, target, :, :length] = self.values[:, source, :, :length]

    def write(self, slot: int, start: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Put states ``[layers, kv, n, dim]`` at positions ``start ..`` of ``slot``."""
        n = int(keys.shape[2])
        self.keys[:, slot, :, start : start + n] = keys
        self.values[:, slot, :, start : start + n] = values

    def span(self, slot: int, length: int) -> Span:
        """A copy of the first ``length`` positions of ``slot`` as a span of its own."""
        keys = self.keys[:, slot, :, :length].clone()
        return Span(keys, self.values[:, slot, :, :length].clone(), length)
