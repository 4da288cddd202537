"""Reuse of key/value states across requests that share a token prefix.

Agent sessions re-send their whole history every turn, and the samples of a GRPO group
share their prompt: without reuse, the embedded engine prefills the same few hundred
tokens again for every sample and every turn, which on a CPU costs more than the decoding.

An entry covers a token sequence with at most two pieces of states: a prefix of a shared
:class:`~.kv_store.Span` (a prompt prefilled once, referenced, never copied) and a private
tail (what one row added after it: the rest of its prompt and its sampled tokens). A
group's ~300-token prompt is therefore held once however many samples and turns continue
it, and a session's next turn finds its previous turn as the shared prompt plus its own
short tail.

Keys and values of a causal model at position ``i`` depend only on tokens ``0..i``, so a
common prefix of any length is reusable, even with an entry that diverges afterwards. At
least one token is always forwarded: its logits give the first sampled token. States are
valid for one set of weights: :meth:`PrefixCache.clear` runs when the weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .kv_store import Span

__all__ = ["Hit", "PrefixCache", "common_prefix", "waits_for_prefill"]

#: shorter matches are not worth a lookup's bookkeeping
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


@dataclass(frozen=True)
class Hit:
    """States of the first ``length`` tokens of a prompt: ``span[:span_len]`` (shared) and
    then ``tail[:length - span_len]`` (to copy), ``tail`` None when the span covers all."""

    length: int
    span: Span
    span_len: int
    tail: Span | None

    @property
    def tail_len(self) -> int:
        """Positions to take from the tail."""
        return self.length - self.span_len


@dataclass(frozen=True)
class _Entry:
    span: Span
    span_len: int
    tail: Span | None


class PrefixCache:
    """An LRU of key/value states keyed by the tokens they encode.

    :param max_tokens: positions held over all spans and tails (0 disables the cache); a
        span shared by many entries counts once. One token of SmolLM2-135M costs 46 KiB in
        float32 (30 layers × keys and values × 3 heads × 64 × 4 bytes).
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._refs: dict[int, tuple[Span, int]] = {}  # id(span) -> (span, entries holding it)
        self._tokens = 0
        self.stats = {"hits": 0, "misses": 0, "reused_tokens": 0}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens(self) -> int:
        """Positions held over all distinct spans and tails."""
        return self._tokens

    def lookup(self, prompt: list[int], *, count: bool = True) -> Hit | None:
        """The states of the longest cached prefix of ``prompt``, or None on a miss.

        The prefix stops one short of the whole prompt, so the caller forwards at least one
        token. ``count=False`` is a peek: no statistics, no change to the LRU order.
        """
        best, best_key = 0, None
        limit = len(prompt) - 1
        for key in self._entries:
            n = min(common_prefix(key, prompt), limit)
            if n > best:
                best, best_key = n, key
        if best_key is None or best < MIN_REUSE:
            self.stats["misses"] += count
            return None
        if count:
            self._entries.move_to_end(best_key)
            self.stats["hits"] += 1
            self.stats["reused_tokens"] += best
        entry = self._entries[best_key]
        if best <= entry.span_len:
            return Hit(best, entry.span, best, None)
        return Hit(best, entry.span, entry.span_len, entry.tail)

    def store(
        self,
        tokens: list[int] | tuple[int, ...],
        span: Span,
        span_len: int,
        tail: Span | None = None,
    ) -> None:
        """Keep the states of ``tokens``: ``span[:span_len]`` then all of ``tail``.

        Entries whose tokens are a prefix of ``tokens`` are dropped: the new one covers them.
        """
        if self.max_tokens <= 0 or not tokens or len(tokens) > self.max_tokens:
            return
        key = tuple(tokens)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._drop(old)
        entry = _Entry(span, span_len, tail)
        self._entries[key] = entry
        for part in (span, tail):
            if part is not None:
                self._hold(part)
        while self._tokens > self.max_tokens and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        """Forget every entry (the weights changed)."""
        self._entries.clear()
        self._refs.clear()
        self._tokens = 0

    def _hold(self, part: Span) -> None:
        _, count = self._refs.get(id(part), (part, 0))
        if count == 0:
            self._tokens += part.capacity
        self._refs[id(part)] = (part, count + 1)

    def _release(self, part: Span) -> None:
        _, count = self._refs.pop(id(part))
        if count > 1:
            self._refs[id(part)] = (part, count - 1)
        else:
            self._tokens -= part.capacity

    def _drop(self, key: tuple[int, ...]) -> None:
        entry = self._entries.pop(key)
        self._release(entry.span)
        if entry.tail is not None:
            self._release(entry.tail)


def waits_for_prefill(
    prompt: list[int], others: list[list[int]], cache: PrefixCache | None
) -> bool:
    """Whether ``prompt`` should wait for one of ``others`` (prompts being prefilled now)
    that shares more of it than ``cache`` holds: it then reuses that prefill instead.

    Sharing counts only from :data:`MIN_REUSE` tokens on, and the prompt's last token never
    counts (a row always forwards at least one token of its own).
    """
    if not others:
        return False
    shared = max(min(common_prefix(tuple(o), prompt), len(prompt) - 1) for o in others)
    if shared < MIN_REUSE:
        return False
    hit = cache.lookup(prompt, count=False) if cache is not None else None
    return shared >= (hit.length if hit is not None else 0) + MIN_REUSE
