"""Where the embedded engine keeps key/value states: shared spans and per-row slots.

A row's context is at most two pieces, both allocated ahead of the steps that fill them:

- a :class:`Span`: the states of a prompt prefix, written once by a prefill and then only
  read, shared by reference by every row (and prefix-cache entry) that starts with those
  tokens: the ~300-token prompt of a GRPO group is held and read once per step, not once
  per sample;
- its slot in :class:`SlotCache`: pre-allocated tensors for all rows, one per layer,
  ``[slots, kv heads, capacity, head dim]``, holding what the row adds after its span (the
  rest of its prompt, then each sampled token). A decoding step writes one position per
  row in place; nothing is concatenated.

Rows occupy slots ``0 .. rows - 1`` in order: a row that leaves is replaced by the last
one (its few private positions are copied over), so a decoding step reads one contiguous
block of slots. The capacity grows by doubling when a row needs more positions, for the
rows present, one layer at a time; when the batch empties the slots are given back and the
next row allocates the initial capacity again, so neither a long generation nor an idle
engine (on-policy training runs while the engine waits) holds the memory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["SLOT_STEP", "SlotCache", "SlotLayers", "Span"]

log = logging.getLogger(__name__)

#: slots are allocated in multiples of this many rows
SLOT_STEP = 8


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


class SlotLayers:
    """One slot's states in every layer: ``[layer]`` is ``[kv heads, capacity, head dim]``."""

    __slots__ = ("_layers", "_slot")

    def __init__(self, layers: list[torch.Tensor], slot: int) -> None:
        self._layers, self._slot = layers, slot

    def __getitem__(self, layer: int) -> torch.Tensor:
        return self._layers[layer][self._slot]


class SlotCache:
    """Per-row private states of the batch: one tensor per layer, one slot per row.

    :param shape: (layers, kv heads, head dim) of the model.
    :param slots: rows decoded together at most (the engine's ``max_batch_size``).
    :param capacity: positions per slot to start with; doubled on demand.

    ``keys[layer]`` and ``values[layer]`` are ``[slots, kv heads, capacity, head dim]``.
    Slots are allocated for the rows present (in multiples of :data:`SLOT_STEP`), and a
    growth reallocates one layer at a time: growing while a few long rows finish costs
    their slots, not the whole batch's, and never two copies of the cache at once.
    """

    def __init__(self, shape: tuple[int, int, int], slots: int, capacity: int, dtype: torch.dtype) -> None:
        self.shape, self.max_slots, self.dtype = shape, slots, dtype
        self.initial = capacity
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self._allocate(0, capacity)

    @property
    def capacity(self) -> int:
        """Positions each slot holds now."""
        return int(self.keys[0].shape[2]) if self.keys else 0

    @property
    def slots(self) -> int:
        """Slots allocated now."""
        return int(self.keys[0].shape[0]) if self.keys else 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(2 * k.numel() * k.element_size() for k in self.keys)

    def _allocate(self, slots: int, capacity: int, keep: int = 0) -> None:
        import torch

        layers, kv, dim = self.shape
        rows = min(slots, self.slots)
        for states in (self.keys, self.values):
            for layer in range(layers):
                new = torch.zeros((slots, kv, capacity, dim), dtype=self.dtype)
                if keep and rows:
                    new[:rows, :, :keep] = states[layer][:rows, :, :keep]
                if layer < len(states):
                    states[layer] = new  # the old layer is freed before the next is made
                else:
                    states.append(new)

    def reserve(self, positions: int, filled: int, rows: int = 1) -> None:
        """Make ``rows`` slots hold at least ``positions`` each, keeping the first
        ``filled`` positions of the slots in use."""
        if positions <= self.capacity and rows <= self.slots:
            return
        capacity = max(self.capacity, self.initial)
        while capacity < positions:
            capacity *= 2
        slots = min(self.max_slots, -(-max(rows, 1) // SLOT_STEP) * SLOT_STEP)
        log.debug("slots %d x %d -> %d x %d positions", self.slots, self.capacity, slots, capacity)
        self._allocate(slots, capacity, keep=filled)

    def release(self) -> None:
        """Give the memory back (the batch is empty); :meth:`reserve` allocates again."""
        if self.capacity:
            self._allocate(0, 0)

    def move(self, source: int, target: int, length: int) -> None:
        """Copy the first ``length`` positions of slot ``source`` into slot ``target``."""
        if length:
            for states in (self.keys, self.values):
                for layer in states:
                    layer[target, :, :length] = layer[source, :, :length]

    def write(self, slot: int, start: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Put states ``[layers, kv, n, dim]`` at positions ``start ..`` of ``slot``."""
        n = int(keys.shape[2])
        for layer, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            k[slot, :, start : start + n] = keys[layer]
            v[slot, :, start : start + n] = values[layer]

    def layers(self, slot: int) -> tuple[SlotLayers, SlotLayers]:
        """``slot``'s keys and values, indexed by layer."""
        return SlotLayers(self.keys, slot), SlotLayers(self.values, slot)

    def span(self, slot: int, length: int) -> Span:
        """A copy of the first ``length`` positions of ``slot`` as a span of its own."""
        import torch

        keys = torch.stack([k[slot, :, :length] for k in self.keys])
        return Span(keys, torch.stack([v[slot, :, :length] for v in self.values]), length)
