"""``[experiment] seed`` fixes the engine's sampling: the same seed and config give the
same episodes token for token (the first step of a run and of its learning-rate-0 control
are identical), another seed gives others. Real worker processes running the calculator
agent, the real gateway and engine, SmolLM2 on the CPU."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from rollhub.config import TrainerSection, load_config
from rollhub.dataset import load_jsonl_dataset
from rollhub.episode import Episode
from rollhub.hubs.async_hub import AsyncHub
from rollhub.seeding import episode_seed, turn_seed

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "math" / "train.toml"

pytestmark = pytest.mark.slow


def _sample(tmp: Path, seed: int) -> dict[tuple[str, int], Episode]:
    cfg = load_config(CONFIG, env={})
    cfg.experiment.seed = seed
    cfg.experiment.progress = False
    cfg.experiment.sampling = {"temperature": 0.7, "max_tokens": 40}
    cfg.store.url = f"file://{tmp / 'store'}"
    cfg.trainer = TrainerSection(name="export")
    payloads = load_jsonl_dataset(cfg.path(cfg.experiment.dataset), limit=2)

    async def run() -> list[Episode]:
        async with AsyncHub(cfg, run_dir=tmp / "run") as hub:
            return [e async for g in hub.iter_groups(payloads, 4) for e in g.episodes]

    return {(e.group_id, e.sample_index): e for e in asyncio.run(run())}


def _turns(episode: Episode) -> list[tuple[list[int], list[float]]]:
    assert episode.ok, episode.error
    return [(r.response_ids, r.response_logprobs) for r in episode.traces]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: Any) -> list[dict[tuple[str, int], Episode]]:
    return [_sample(tmp_path_factory.mktemp(f"seeded{i}"), seed) for i, seed in enumerate((7, 7, 8))]


def test_the_same_seed_samples_the_same_tokens(runs: list[dict[tuple[str, int], Episode]]) -> None:
    first, again, _ = runs
    assert set(first) == set(again) and len(first) == 8
    for key, episode in first.items():
        a, b = _turns(episode), _turns(again[key])
        assert [ids for ids, _ in a] == [ids for ids, _ in b], key
        for (_, lp_a), (_, lp_b) in zip(a, b, strict=True):
            assert max(abs(x - y) for x, y in zip(lp_a, lp_b, strict=True)) < 1e-4, key
        assert episode.metrics["sampling_seed"] == episode_seed(7, *key)
    # more than one turn was sampled (each turn draws from its own seed)
    assert any(len(r.turns) > 1 for e in first.values() for r in e.traces)


def test_samples_of_one_prompt_and_another_seed_differ(
    runs: list[dict[tuple[str, int], Episode]],
) -> None:
    first, _, other = runs
    ids = {key: [t for t, _ in _turns(e)] for key, e in first.items()}
    by_prompt: dict[str, set[str]] = {}
    for (group, _), turns in ids.items():
        by_prompt.setdefault(group, set()).add(repr(turns))
    assert all(len(samples) > 1 for samples in by_prompt.values())  # not one draw repeated
    differ = sum(ids[key] != [t for t, _ in _turns(e)] for key, e in other.items())
    assert differ >= len(other) // 2


def test_turn_seeds_are_distinct_and_stable() -> None:
    seeds = [turn_seed(episode_seed(1, "p", 0), t) for t in range(4)]
    assert len(set(seeds)) == 4 and all(0 <= s < 2**31 for s in seeds)
    assert seeds == [turn_seed(episode_seed(1, "p", 0), t) for t in range(4)]
    assert episode_seed(1, "p", 0) != episode_seed(1, "p", 0, round_=1)
