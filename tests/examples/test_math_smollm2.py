"""One framework example the way a user runs it: ``rollhub run``'s code path with the
example's own config (local runtime, in-process gateway, SmolLM2 on the CPU)."""

from __future__ import annotations

import asyncio

import pytest
from rollhub.config import load_config
from rollhub.dataset import load_jsonl_dataset
from rollhub.export import read_episodes

from tests.examples.math_example import MATH

pytestmark = pytest.mark.slow


def test_strands_example_with_smollm2(tmp_path):
    from rollhub.commands.run import run_experiment

    cfg = load_config(MATH / "strands.toml", env={})
    cfg.experiment.max_prompts = 1
    cfg.experiment.n_samples = 2  # two runs of the Strands loop, truncation included
    cfg.experiment.progress = False
    cfg.experiment.sampling = {"temperature": 0.7, "max_tokens": 40}
    cfg.store.url = f"file://{tmp_path / 'store'}"
    payloads = load_jsonl_dataset(cfg.path(cfg.experiment.dataset), limit=1)
    summary = asyncio.run(run_experiment(cfg, payloads, tmp_path / "run"))
    assert summary["episodes"] == 2
    episodes = read_episodes(tmp_path / "run" / "episodes.parquet")
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.ok, episode.error
        assert episode.result["rewards"] in (0.0, 1.0)
        # every model call of the Strands agent was captured, with one logprob per id
        turns = [span for trace in episode.traces for span in trace.turns]
        assert turns
        for trace in episode.traces:
            assert len(trace.response_ids) == len(trace.response_logprobs)
