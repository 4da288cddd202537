"""The episode index: one small summary row per episode, and where the full row lives.

``episodes.jsonl`` is read incrementally (:class:`~rollhub_view.tail.JsonlTail`): the index
keeps per episode a :class:`Summary` (step, group, status, reward, weight versions, turns,
failure cause, the payload's ``split``, the node it ran on, a short search text) and the
byte offset and length of its line, so the table is filtered, sorted and paged here and one episode is read back with one seek. A
100,000-episode run never goes to the browser whole. ``episodes.parquet`` (a rollouts-only
run) is read whole when it changes; its rows stay in memory.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollhub.errors import UsageError

from rollhub_view.errors import NotFound
from rollhub_view.tail import JsonlTail

__all__ = ["SORT_KEYS", "EpisodeIndex", "Query", "Summary"]

log = logging.getLogger(__name__)

#: characters of payload and result kept per episode for the text search
SEARCH_CHARS = 400
#: columns the table sorts by
SORT_KEYS = ("n", "step", "group_id", "sample_index", "status", "reward", "advantage",
             "weight_version", "turns", "tokens", "elapsed", "cause", "split", "node")


@dataclass(slots=True)
class Summary:
    """What the episode table shows of one episode, and where its full row is."""

    n: int
    offset: int
    length: int
    step: int | None
    group_id: str
    episode_id: str
    sample_index: int
    status: str
    reward: float | None
    advantage: float | None
    weight_version: int | None
    versions: tuple[int, ...]
    turns: int
    tokens: int
    cause: str | None
    elapsed: float | None
    trained: bool | None
    split: str | None
    text: str
    #: the cluster node its last session ran on (runtimes with nodes, e.g. ``ray``)
    node: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as the table gets it (no offsets, no search text)."""
        return {
            "n": self.n, "step": self.step, "group_id": self.group_id,
            "episode_id": self.episode_id, "sample_index": self.sample_index,
            "status": self.status, "reward": self.reward, "advantage": self.advantage,
            "weight_version": self.weight_version, "versions": list(self.versions),
            "turns": self.turns, "tokens": self.tokens, "cause": self.cause,
            "elapsed": self.elapsed, "trained": self.trained, "split": self.split,
            "node": self.node,
        }


@dataclass
class Query:
    """Filters, order and page of the episode table; None means no filter."""

    step: int | None = None
    group: str | None = None
    status: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    version: int | None = None
    turns: int | None = None
    cause: str | None = None
    split: str | None = None
    node: str | None = None
    text: str | None = None
    sort: str = "n"
    descending: bool = False
    page: int = 0
    size: int = 50

    def __post_init__(self) -> None:
        if self.sort not in SORT_KEYS:
            raise UsageError(f"sort: {self.sort!r} is not one of {', '.join(SORT_KEYS)}")
        if not 1 <= self.size <= 1000:
            raise UsageError(f"size: {self.size} is not in 1..1000")
        if self.page < 0:
            raise UsageError(f"page: {self.page} is negative")

    def matches(self, s: Summary) -> bool:
        """Whether an episode passes every filter."""
        if self.step is not None and s.step != self.step:
            return False
        if self.group is not None and self.group not in s.group_id:
            return False
        if self.status is not None and s.status != self.status:
            return False
        if self.reward_min is not None and (s.reward is None or s.reward < self.reward_min):
            return False
        if self.reward_max is not None and (s.reward is None or s.reward > self.reward_max):
            return False
        if self.version is not None and self.version not in s.versions and (
            s.weight_version != self.version
        ):
            return False
        if self.turns is not None and s.turns != self.turns:
            return False
        if self.cause is not None and s.cause != self.cause:
            return False
        if self.split is not None and s.split != self.split:
            return False
        if self.node is not None and s.node != self.node:
            return False
        return not (self.text and self.text.lower() not in s.text)


def summarize_row(n: int, offset: int, length: int, row: dict[str, Any]) -> Summary:
    """The index row of one export row (``episode_to_row`` + step, advantage, trained)."""
    versions = sorted({
        t.get("weight_version") for tr in row.get("traces") or [] for t in tr.get("turns") or []
        if isinstance(t.get("weight_version"), int)
    })
    status = str(row.get("status") or "unknown")
    cause = row.get("error_type") or (None if status == "ok" else status)
    text = " ".join(
        str(row.get(k) or "")[:SEARCH_CHARS]
        for k in ("episode_id", "group_id", "payload", "result", "error_message")
    )
    reward = row.get("reward")
    advantage = row.get("advantage")
    payload = row.get("payload")
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            payload = None
    split = payload.get("split") if isinstance(payload, dict) else None
    return Summary(
        n=n, offset=offset, length=length,
        step=row.get("step") if isinstance(row.get("step"), int) else None,
        group_id=str(row.get("group_id") or ""),
        episode_id=str(row.get("episode_id") or ""),
        sample_index=int(row.get("sample_index") or 0),
        status=status,
        reward=float(reward) if isinstance(reward, int | float) else None,
        advantage=float(advantage) if isinstance(advantage, int | float) else None,
        weight_version=row.get("weight_version") if isinstance(row.get("weight_version"), int)
        else None,
        versions=tuple(versions),
        turns=int(row.get("num_turns") or 0),
        tokens=int(row.get("num_sampled_tokens") or 0),
        cause=str(cause) if cause else None,
        elapsed=row.get("elapsed_s") if isinstance(row.get("elapsed_s"), int | float) else None,
        trained=row.get("trained") if isinstance(row.get("trained"), bool) else None,
        split=str(split) if split is not None else None,
        text=text.lower(),
        node=_node(row.get("metrics")),
    )


def _node(metrics: object) -> str | None:
    """``metrics.node`` of an export row (JSON text in the export schema)."""
    if isinstance(metrics, str) and '"node"' in metrics:  # most runs have none: skip parsing
        try:
            metrics = json.loads(metrics)
        except ValueError:
            return None
    node = metrics.get("node") if isinstance(metrics, dict) else None
    return str(node) if node is not None else None


def _summary_or_none(offset: int, length: int, value: object) -> Summary | None:
    return summarize_row(-1, offset, length, value) if isinstance(value, dict) else None


def _sort_key(field: str, descending: bool) -> Callable[[Summary], tuple[bool, Any]]:
    """A key that puts missing values last in either order (one sort, no second pass)."""
    if descending:
        def key(s: Summary) -> tuple[bool, Any]:
            value = getattr(s, field)
            return (value is not None, value)
    else:
        def key(s: Summary) -> tuple[bool, Any]:
            value = getattr(s, field)
            return (value is None, value)

    return key


class EpisodeIndex:
    """Summary rows of every episode of one run, kept up to date as the file grows.

    :param path: ``episodes.jsonl`` or ``episodes.parquet`` (may not exist yet).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[Summary] = []
        self.groups: dict[tuple[int | None, str], list[int]] = defaultdict(list)
        self.statuses: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.nodes: Counter[str] = Counter()
        self.steps: set[int] = set()
        self.versions: set[int] = set()
        self.turn_counts: set[int] = set()
        self.splits: Counter[str] = Counter()
        self.generation = 0  # bumped when the file was read again from its start
        self._tail = JsonlTail(path) if path.suffix == ".jsonl" else None
        self._parquet_rows: list[dict[str, Any]] = []
        self._parquet_mtime: float | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.rows)

    def refresh(self) -> int:
        """Index the episodes written since the last call; return how many were added."""
        with self._lock:
            if self._tail is not None:
                lines, reset = self._tail.read_new(_summary_or_none)
                if reset:
                    self._clear()
                added = 0
                for line in lines:
                    if line.value is not None:
                        line.value.n = len(self.rows)
                        self._add(line.value)
                        added += 1
                return added
            return self._refresh_parquet()

    def _refresh_parquet(self) -> int:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return 0
        if mtime == self._parquet_mtime:
            return 0
        from rollhub.export import read_rows

        try:
            rows = read_rows(self.path)
        except Exception as exc:  # being written: try again on the next refresh
            log.info("%s not readable yet: %s", self.path, exc)
            return 0
        self._clear()
        self._parquet_mtime, self._parquet_rows = mtime, rows
        for i, row in enumerate(rows):
            self._add(summarize_row(i, -1, 0, row))
        return len(rows)

    def _clear(self) -> None:
        self.rows = []
        self.groups = defaultdict(list)
        for c in (self.statuses, self.causes, self.splits, self.nodes):
            c.clear()
        for s in (self.steps, self.versions, self.turn_counts):
            s.clear()
        self.generation += 1

    def _add(self, s: Summary) -> None:
        self.rows.append(s)
        self.groups[(s.step, s.group_id)].append(s.n)
        self.statuses[s.status] += 1
        if s.cause:
            self.causes[s.cause] += 1
        if s.node is not None:
            self.nodes[s.node] += 1
        if s.step is not None:
            self.steps.add(s.step)
        self.versions.update(s.versions)
        self.turn_counts.add(s.turns)
        if s.split is not None:
            self.splits[s.split] += 1

    def query(self, q: Query) -> dict[str, Any]:
        """One page of the episodes that pass ``q``, in its order, and how many pass."""
        rows = self.rows
        hits = [s for s in rows if q.matches(s)]
        if q.sort != "n" or q.descending:
            hits.sort(key=_sort_key(q.sort, q.descending), reverse=q.descending)
        start = q.page * q.size
        return {
            "total": len(hits),
            "episodes": len(rows),
            "page": q.page,
            "size": q.size,
            "rows": [s.to_json() for s in hits[start:start + q.size]],
        }

    def facets(self) -> dict[str, Any]:
        """The values the table's filters can take."""
        return {
            "statuses": dict(sorted(self.statuses.items())),
            "causes": dict(self.causes.most_common()),
            "nodes": dict(sorted(self.nodes.items())),
            "steps": sorted(self.steps),
            "versions": sorted(self.versions),
            "turns": sorted(self.turn_counts),
            "splits": dict(sorted(self.splits.items())),
        }

    def row(self, n: int) -> dict[str, Any]:
        """The full export row of episode ``n`` (read back with one seek).

        :raises NotFound: no such episode.
        """
        if not 0 <= n < len(self.rows):
            raise NotFound(f"no episode {n} (the run has {len(self.rows)})")
        s = self.rows[n]
        if self._tail is None:
            row = dict(self._parquet_rows[n])
        else:
            with open(self.path, "rb") as f:
                f.seek(s.offset)
                row = json.loads(f.read(s.length))
        if row.get("episode_id") != s.episode_id and s.episode_id:
            raise UsageError(f"episode {n} changed on disk; reload the page")
        return row

    def group(self, step: int | None, group_id: str) -> list[int]:
        """The episodes (indices) of one group of one step, in sample order."""
        found = self.groups.get((step, group_id), [])
        return sorted(found, key=lambda n: self.rows[n].sample_index)
