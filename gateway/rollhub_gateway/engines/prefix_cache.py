"""Reuse of key/value states across requests that share a token prefix.

Agent sessions re-send their whole history every turn, and the samples of a GRPO group
share their prompt: without reuse, the embedded engine prefills the same few hundred
tokens again for every sample and every turn, which on a CPU costs more than the decoding.
The cache keeps the key/value states of recent prompts and of finished rows (prompt plus
sampled tokens), and a new request forwards only what follows its longest common prefix
with one of them.

Keys and values of a causal model at position ``i`` depend only on tokens ``0..i``, so a
common prefix of any length is reusable, even with an entry that diverges afterwards. At
least one token is always forwarded: its logits give the first sampled token. States are
valid for one set of weights: :meth:`PrefixCache.clear` runs when the weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["PrefixCache", "common_prefix"]

#: shorter matches are not worth a cache rebuild
MIN_REUSE = 16


def common_prefix(a: tuple[int, ...], b: list[int] | tuple[int, ...]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if a[:n] == tuple(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == tuple(b[:mid]):
            lo = mid
        else:
            hi = mid
    return lo


class PrefixCache:
    """An LRU of key/value states keyed by the tokens they encode.

    :param max_tokens: total tokens held over all entries (0 disables the cache). One token
        of SmolLM2-135M costs 46 KiB (30 layers × keys and values × 3 heads × 64 × 4 bytes).
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._tokens = 0
        self.stats = {"hits": 0, "misses": 0, "reused_tokens": 0}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens(self) -> int:
        """Tokens held over all entries."""
        return self._tokens

    def lookup(self, prompt: list[int]) -> tuple[int, list[tuple[Any, Any]] | None]:
        """``(n, layers)``: the states of ``prompt[:n]``, or ``(0, None)`` on a miss.

        ``n`` stops one short of the whole prompt, so the caller forwards at least one token.
        """
        best, best_key = 0, None
        limit = len(prompt) - 1
        for key in self._entries:
            n = min(common_prefix(key, prompt), limit)
            if n > best:
                best, best_key = n, key
        if best_key is None or best < MIN_REUSE:
            self.stats["misses"] += 1
            return 0, None
        self._entries.move_to_end(best_key)
        self.stats["hits"] += 1
        self.stats["reused_tokens"] += best
        layers = [(k[:, :, :best], v[:, :, :best]) for k, v in self._entries[best_key]]
        return best, layers

    def store(self, tokens: list[int] | tuple[int, ...], layers: list[tuple[Any, Any]]) -> None:
        """Keep the states of ``tokens`` (one ``(keys, values)`` pair per layer, batch 1).

        Entries that are a prefix of ``tokens`` are dropped: the new one covers them.
        """
        if self.max_tokens <= 0 or not tokens or len(tokens) > self.max_tokens:
            return
        key = tuple(tokens)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._drop(old)
        self._entries[key] = layers
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        """Forget every entry (the weights changed)."""
        self._entries.clear()
        self._tokens = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        del self._entries[key]
        self._tokens -= len(key)
