"""The SWE example through the whole pipeline, with a scripted model instead of a real one.

The example's own ``rollhub.toml`` drives an :class:`~rollhub.hubs.async_hub.AsyncHub`: the ``local``
runtime serves ``examples/swe/agent.py:app`` in worker processes, results go through a file
store, the installed ``rollhub-sandbox`` plugin scores each episode by running the task's
tests in its sandbox, and the ``export`` trainer writes Parquet and JSONL. Only the model is
scripted: a loopback OpenAI-compatible server (reached by the agent's real ``openai`` SDK
through the ``none`` token source) that fixes ``median()`` in one group and does nothing in
the other.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rollhub.config import (
    RollhubConfig,
    RuntimeSection,
    StoreSection,
    TokenSourceSection,
    load_config,
)
from rollhub.episode import Episode
from rollhub.export import read_episodes
from rollhub.hubs.async_hub import AsyncHub
from rollhub.testing.servers import serve_app

from tests.sandbox.scripted_openai import ScriptedChatModel

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "swe"
TASKS = [json.loads(line) for line in (EXAMPLE / "data" / "tasks.jsonl").read_text().splitlines()]
FIXED_MEDIAN = (EXAMPLE / "repos" / "stats" / "stats.py").read_text().replace(
    "    return ordered[mid]\n",
    "    if len(ordered) % 2:\n        return ordered[mid]\n"
    "    return (ordered[mid - 1] + ordered[mid]) / 2\n",
)
# Each marker is a substring of one task's issue text, which picks that conversation's script.
STATS, SLUG = "median()", "slugify()"
SCRIPTS = {
    STATS: [
        ("read_file", {"path": "stats.py"}),
        ("write_file", {"path": "stats.py", "content": FIXED_MEDIAN}),
        # the interpreter running these tests has pytest, whatever "python" is on PATH
        ("run_shell", {"command": f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q"}),
    ],
    SLUG: [("run_shell", {"command": "ls"})],
}
MODEL_ID, API_KEY = "scripted-swe", "sk-scripted"
N_SAMPLES = 2


@pytest.fixture
def sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sandboxes"
    root.mkdir()
    # The reward hook runs in this process and finds sandboxes by this variable. It caches one
    # sandbox client per (provider, options) for the process, and a local provider reads the
    # variable once, when that client is built.
    monkeypatch.setenv("ROLLHUB_SANDBOX_ROOT", str(root))
    return root


def _config(tmp_path: Path, root: Path, model_url: str) -> RollhubConfig:
    cfg = load_config(EXAMPLE / "rollhub.toml", env={})
    cfg.experiment.n_samples = N_SAMPLES
    cfg.experiment.timeout_s = 60.0
    cfg.experiment.progress = False
    cfg.experiment.output_dir = str(tmp_path / "runs")
    cfg.store = StoreSection(url=f"file://{tmp_path / 'results'}")
    cfg.token_source = TokenSourceSection(
        name="none", base_url=f"{model_url}/v1", model_id=MODEL_ID, api_key=API_KEY
    )
    # The workers create the sandboxes; the reward hook in this process must find them.
    runtime = cfg.runtime.model_dump()
    cfg.runtime = RuntimeSection(**{**runtime, "env": {"ROLLHUB_SANDBOX_ROOT": str(root)}})
    return cfg


async def _run(cfg: RollhubConfig, run_dir: Path) -> tuple[list[Episode], dict[str, Any], AsyncHub]:
    """What ``rollhub run`` does with the groups, keeping the live episodes."""
    hub = AsyncHub(cfg, run_dir=run_dir)
    episodes: list[Episode] = []
    await hub.start()
    try:
        async for group in hub.iter_groups(TASKS):
            assert len(group.episodes) == N_SAMPLES
            episodes.extend(group.episodes)
            await hub.trainer.consume(group)
    finally:
        written = await hub.close()
    return episodes, written, hub


async def test_swe_example_through_the_hub(tmp_path: Path, sandbox_root: Path) -> None:
    model = ScriptedChatModel(SCRIPTS, answer="Fixed it.")
    run_dir = tmp_path / "run"
    with serve_app(model.app) as url:
        cfg = _config(tmp_path, sandbox_root, url)
        episodes, written, hub = await asyncio.wait_for(_run(cfg, run_dir), timeout=90)

    # The reward came from the installed plugin, not from anything this test registered.
    record = hub.host.plugins["sandbox"]
    assert (record.module, record.source, record.distribution) == \
        ("rollhub_sandbox.plugin", "entry point", "rollhub-sandbox")

    by_group: dict[str, list[Episode]] = {}
    for ep in episodes:
        by_group.setdefault(ep.group_id, []).append(ep)
    assert sorted(by_group) == ["swe-0001", "swe-0002"]
    assert all(len(eps) == N_SAMPLES for eps in by_group.values())
    for ep in episodes:
        assert ep.status == "ok", (ep.episode_id, ep.error)
        assert ep.error is None and ep.trainable
        assert ep.result is not None and ep.result["final_message"] == "Fixed it."

    for ep in by_group["swe-0001"]:  # median() fixed through write_file
        assert ep.reward_components == {"tests": 1.0} and ep.reward == 1.0
        assert ep.result["repo"] == "stats" and ep.result["turns"] == 4
        assert ep.result["metrics"]["tool_calls"] == 3 and ep.result["metrics"]["tool_errors"] == 0
        tests = ep.metrics["sandbox_tests"]
        assert (tests["exit_code"], tests["passed"], tests["failed"]) == (0, 5, 0)
    for ep in by_group["swe-0002"]:  # slugify() left as it was
        assert ep.reward_components == {"tests": 0.0} and ep.reward == 0.0
        assert ep.result["repo"] == "slug" and ep.result["turns"] == 2
        tests = ep.metrics["sandbox_tests"]
        assert (tests["exit_code"], tests["passed"], tests["failed"]) == (1, 1, 2)

    # Every episode had its own sandbox; the hook destroyed each one after scoring.
    assert len({ep.result["sandbox_id"] for ep in episodes}) == len(episodes)
    assert list(sandbox_root.iterdir()) == []

    # The model saw the configured endpoint, key, model and sampling, and real tool output.
    stats_calls, slug_calls = model.requests_for(STATS), model.requests_for(SLUG)
    assert len(stats_calls) == 4 * N_SAMPLES and len(slug_calls) == 2 * N_SAMPLES
    assert len(model.requests) == len(stats_calls) + len(slug_calls)  # none unmatched
    for req in model.requests:
        assert req.authorization == f"Bearer {API_KEY}"
        assert req.body["model"] == MODEL_ID
        assert (req.body["temperature"], req.body["max_tokens"]) == (0.7, 512)
        assert [t["function"]["name"] for t in req.body["tools"]] == \
            ["run_shell", "read_file", "write_file"]
    finals = [r for r in stats_calls if r.step == 3]
    assert len(finals) == N_SAMPLES
    for req in finals:
        tool_outputs = [m["content"] for m in req.messages if m["role"] == "tool"]
        assert "def median" in tool_outputs[0]
        assert tool_outputs[1] == f"wrote {len(FIXED_MEDIAN.encode())} bytes to stats.py"
        assert tool_outputs[2].startswith("exit code 0") and "5 passed" in tool_outputs[2]

    # The export round-trips: the Parquet (and JSONL) rows rebuild the live episodes.
    assert written == {"parquet": str(run_dir / "episodes.parquet"),
                       "jsonl": str(run_dir / "episodes.jsonl")}
    live = sorted(episodes, key=lambda e: e.episode_id)
    for path in written.values():
        assert sorted(read_episodes(path), key=lambda e: e.episode_id) == live
