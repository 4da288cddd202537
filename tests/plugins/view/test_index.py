"""The episode index reads episodes.jsonl by byte offset, only what was appended."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from rollhub.errors import UsageError
from rollhub_view.index import EpisodeIndex, Query
from rollhub_view.synthetic import episode_row
from rollhub_view.tail import JsonlTail


def _write(path: Path, rows: list[dict], mode: str = "a") -> None:
    with path.open(mode) as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_only_new_bytes_are_read_and_a_partial_line_waits(tmp_path: Path):
    path = tmp_path / "episodes.jsonl"
    rng = random.Random(1)
    _write(path, [episode_row(0, 0, s, rng) for s in range(4)], "w")
    index = EpisodeIndex(path)
    assert index.refresh() == 4
    size = path.stat().st_size
    assert index._tail.offset == size
    line = json.dumps(episode_row(1, 0, 0, rng))
    with path.open("a") as f:  # a writer in the middle of a line
        f.write(line[:50])
    assert index.refresh() == 0 and index._tail.offset == size
    with path.open("a") as f:
        f.write(line[50:] + "\n")
    assert index.refresh() == 1
    assert [r.step for r in index.rows] == [0, 0, 0, 0, 1]
    assert index.row(4)["episode_id"] == json.loads(line)["episode_id"]
    assert index.refresh() == 0  # nothing new: nothing read


def test_a_truncated_file_is_read_again(tmp_path: Path):
    """A resumed run truncates episodes.jsonl back to its checkpoint."""
    path = tmp_path / "episodes.jsonl"
    rng = random.Random(2)
    rows = [episode_row(step, 0, s, rng) for step in range(3) for s in range(2)]
    _write(path, rows, "w")
    index = EpisodeIndex(path)
    index.refresh()
    _write(path, rows[:2], "w")
    index.refresh()
    assert len(index) == 2 and index.generation == 1 and index.steps == {0}


def test_convert_sees_each_line_with_its_offset(tmp_path: Path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"a": 1}\n\nnot json\n{"a": 2}\n')
    lines, reset = JsonlTail(path).read_new(lambda off, n, v: (off, n, v["a"]))
    assert not reset
    assert [ln.value for ln in lines] == [(0, 8, 1), (19, 8, 2)]


def test_filters_sort_and_pages(tmp_path: Path):
    path = tmp_path / "episodes.jsonl"
    rng = random.Random(3)
    _write(path, [episode_row(st, g, s, rng, text="needle" if (st, g, s) == (1, 2, 3) else None)
                  for st in range(3) for g in range(4) for s in range(4)], "w")
    index = EpisodeIndex(path)
    index.refresh()
    rows = index.rows
    assert index.query(Query(step=1))["total"] == 16
    ok = index.query(Query(status="ok", size=1000))
    assert ok["total"] == sum(r.status == "ok" for r in rows)
    hi = index.query(Query(reward_min=0.5, size=1000))["rows"]
    assert hi and all(r["reward"] >= 0.5 for r in hi)
    assert index.query(Query(version=2))["total"] == sum(
        2 in r.versions or r.weight_version == 2 for r in rows)
    assert [r["step"] for r in index.query(Query(text="NEEDLE"))["rows"]] == [1]
    desc = index.query(Query(sort="elapsed", descending=True, size=1000))["rows"]
    assert [r["elapsed"] for r in desc] == sorted((r.elapsed for r in rows), reverse=True)
    page = index.query(Query(page=2, size=5))
    assert [r["n"] for r in page["rows"]] == [10, 11, 12, 13, 14] and page["total"] == 48
    assert index.group(1, "g0001-002") == [n for n, r in enumerate(rows)
                                           if r.step == 1 and r.group_id == "g0001-002"]
    with pytest.raises(UsageError):
        Query(sort="payload")


def test_nodes_and_infrastructure_failures(tmp_path: Path):
    """Episodes per node (``metrics.node``, set by runtimes with nodes) as a facet, a
    filter, a column and in the overview's numbers, infra_error ones counted apart."""
    from rollhub_view.stats import run_stats

    path = tmp_path / "episodes.jsonl"
    rng = random.Random(3)
    rows = [episode_row(0, g, s, rng) for g in range(2) for s in range(3)]
    for i, row in enumerate(rows):
        row["metrics"] = json.dumps({"node": ["worker-a", "worker-b"][i % 2], "elapsed_s": 1.0})
    rows[1].update(status="infra_error", error_type="SessionLost", trainable=False, reward=None)
    rows[5]["metrics"] = json.dumps({})  # a runtime without nodes
    _write(path, rows, "w")
    index = EpisodeIndex(path)
    index.refresh()
    assert index.facets()["nodes"] == {"worker-a": 3, "worker-b": 2}
    page = index.query(Query(node="worker-b"))
    assert page["total"] == 2 and {r["node"] for r in page["rows"]} == {"worker-b"}
    assert index.query(Query(sort="node"))["rows"][-1]["node"] is None
    stats = run_stats(index)
    assert stats["infra_failed"] == 1 and stats["statuses"]["infra_error"] == 1
    assert stats["nodes"] == {
        "worker-a": {"episodes": 3, "infra_failed": 0},
        "worker-b": {"episodes": 2, "infra_failed": 1},
    }
