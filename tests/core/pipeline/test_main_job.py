"""The main job end to end: real worker processes, the real gateway, SmolLM2 on the CPU,
the file store, the export trainer — through the same code path as ``rollhub run``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from rollhub.config import load_config
from rollhub.dataset import load_jsonl_dataset
from rollhub.export import read_episodes
from rollhub.runs.report import summarize

from tests.core.pipeline import recording_plugin

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "math" / "rollouts.toml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    from rollhub.commands.run import run_experiment

    tmp = tmp_path_factory.mktemp("mainjob")
    cfg = load_config(CONFIG, env={})
    cfg.experiment.max_prompts = 2
    cfg.experiment.n_samples = 2
    cfg.experiment.progress = False
    cfg.experiment.sampling = {"temperature": 0.7, "max_tokens": 40}
    cfg.store.url = f"file://{tmp / 'store'}"
    cfg.plugins.modules = ["tests.core.pipeline.recording_plugin"]
    payloads = load_jsonl_dataset(cfg.path(cfg.experiment.dataset), limit=2)
    recording_plugin.GENERATIONS.clear()
    summary = asyncio.run(run_experiment(cfg, payloads, tmp / "run"))
    return tmp / "run", summary, payloads, list(recording_plugin.GENERATIONS)


def test_outputs_exist(main_job):
    run_dir, summary, _, _ = main_job
    for name in ("episodes.parquet", "episodes.jsonl", "summary.json", "plots.png"):
        assert (run_dir / name).stat().st_size > 0, name
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["episodes"] == 4


def test_traces_hold_exactly_the_sampled_ids(main_job):
    run_dir, _, _, generations = main_job
    episodes = read_episodes(run_dir / "episodes.parquet")
    ok = [e for e in episodes if e.ok]
    assert ok, "no episode succeeded"
    # every engine generation appears as one turn of one trace, ids and logprobs exact
    turns = []
    for e in ok:
        for t in e.traces:
            assert len(t.response_ids) == len(t.response_mask) == len(t.response_logprobs)
            for span in t.turns:
                ids = t.response_ids[span.start:span.end]
                assert all(m == 1 for m in t.response_mask[span.start:span.end])
                turns.append((ids, t.response_logprobs[span.start:span.end], t.full_ids[: len(t.prompt_ids) + span.start]))
            # nothing outside the turn spans is trained
            inside = {i for s in t.turns for i in range(s.start, s.end)}
            assert all(m == 0 for i, m in enumerate(t.response_mask) if i not in inside)
    assert len(turns) == len(generations)
    remaining = list(turns)
    for prompt_ids, gen in generations:
        # two samples of one prompt can draw the same ids (their logprobs then differ in the
        # last digits, from their places in the batch): take the closest of them
        match = min(
            (x for x in remaining if x[0] == gen.token_ids and x[2] == prompt_ids),
            key=lambda x: max((abs(a - b) for a, b in zip(x[1], gen.logprobs, strict=True)),
                              default=0.0),
        )
        remaining.remove(match)
        assert match[1] == pytest.approx(gen.logprobs, abs=1e-6)
        assert match[2] == prompt_ids  # the prompt the engine saw is the trace's prefix


def _independent_answer(text: str | None) -> float | None:
    """The task's answer rule, written again here: \\boxed{x}, else 'answer ... x', else
    the last number of the final message."""
    import re

    if not text:
        return None
    number = r"-?\d[\d,]*(?:\.\d+)?"
    for pattern in (r"\\boxed\{\s*(" + number + r")\s*\}", r"(?i)answer\s*(?:is)?\s*[:=]?\s*\$?\s*(" + number + ")"):
        found = re.findall(pattern, text)
        if found:
            return float(found[-1].replace(",", ""))
    found = re.findall(number, text)
    return float(found[-1].replace(",", "")) if found else None


def test_rewards_match_the_verifier(main_job):
    run_dir, _, payloads, _ = main_job
    expected = {p["id"]: float(p["answer"]) for p in payloads}
    checked = 0
    for e in read_episodes(run_dir / "episodes.parquet"):
        if not e.ok:
            continue
        predicted = _independent_answer(e.result["final_message"])
        correct = predicted is not None and abs(predicted - expected[e.group_id]) < 1e-6
        assert e.reward == (1.0 if correct else 0.0), (e.group_id, e.result["final_message"])
        assert e.reward_components == {"result": e.reward}
        checked += 1
    assert checked


def test_summary_recomputes_from_export(main_job):
    run_dir, summary, _, _ = main_job
    for fmt in ("parquet", "jsonl"):
        again = summarize(read_episodes(run_dir / f"episodes.{fmt}"), wall_time_s=summary["wall_time_s"])
        assert again == summary
