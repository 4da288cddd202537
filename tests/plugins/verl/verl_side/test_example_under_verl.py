"""The GSM8K example's agent and data, run by verl's v1 worker code through rollhub.

The example's agent (examples/verl/agent.py, served by local runtime workers) solves the
example's synthetic rows with its calculator tool; the scripted replicas play the model.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from .drive import dataset_rows, run_v1, tq_worker
from .verl_rows import rows_parquet

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "verl"


def synthetic_rows(n: int) -> list[dict]:
    spec = importlib.util.spec_from_file_location("verl_example_data", EXAMPLE / "prepare_data.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.synthetic(n)["train"]


async def test_example_agent_trains_on_its_tool_episodes(
    monkeypatch, tmp_path, verl_config, stack, model_dir
):
    text = (EXAMPLE / "rollhub.toml").read_text()
    text = text.replace('app = "agent.py:app"', f'app = "{EXAMPLE / "agent.py"}:app"')
    text = text.replace('url = "file://../../runs/verl-results"', 'url = "file://results"')
    toml = tmp_path / "rollhub.toml"
    toml.write_text(text)
    config = verl_config(toml, n=2)
    worker, captured = tq_worker(monkeypatch, config, stack.client)
    data = rows_parquet(tmp_path / "train.parquet", synthetic_rows(10)[:2])
    for i, row in enumerate(dataset_rows(config, worker.tokenizer, data)):
        await run_v1(worker, row, uid=f"ex{i}", step=3)
    assert sorted(captured.keys) == ["ex0_0_0", "ex0_1_0", "ex1_0_0", "ex1_1_0"]
    for batch in captured.fields:
        for j in range(len(batch)):
            item = batch[j]
            assert item["rm_scores"].tolist()[-1] == 1.0
            mask = item["response_mask"].tolist()
            # call (sampled), tool response (not), answer (sampled)
            runs = [mask[0]] + [b for a, b in itertools.pairwise(mask) if a != b]
            assert runs == [1, 0, 1]
            assert item["extra_fields"]["rollhub_status"] == "ok"
