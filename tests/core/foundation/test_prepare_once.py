"""``rollhub_prepare_rollout`` runs once per rollout, however often its submit is retried."""

from __future__ import annotations

import asyncio
from collections import Counter

from rollhub import hookimpl
from rollhub.errors import SubmissionError
from rollhub.testing import make_hub

from tests.core.foundation.project import make_project


class FlakySubmit:
    """Counts prepares; the first submit of each rollout fails transiently."""

    def __init__(self) -> None:
        self.prepared: Counter[str] = Counter()
        self.submits: Counter[str] = Counter()

    @hookimpl
    def rollhub_prepare_rollout(self, request):
        self.prepared[request.rollout.session_id] += 1
        request.payload["tags"] = [*request.payload.get("tags", []), "prepared"]

    @hookimpl(tryfirst=True)
    def rollhub_submit_rollout(self, request):
        sid = request.rollout.session_id
        self.submits[sid] += 1
        if self.submits[sid] == 1:
            raise SubmissionError("throttled, try again", transient=True)
        return None  # the core's default submits


def test_prepare_runs_once_per_rollout_across_submit_retries(tmp_path):
    make_project(tmp_path)
    plugin = FlakySubmit()
    config = {
        "runtime": {"app": str(tmp_path / "agent.py") + ":app", "workers": 1},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "experiment": {"n_samples": 2, "timeout_s": 30, "progress": False},
    }

    async def main():
        async with make_hub(config, plugin, run_dir=tmp_path / "run") as hub:
            return await hub.run_group({"id": "p1"}, n=2)

    group = asyncio.run(main())
    assert all(e.ok for e in group.episodes), [e.error for e in group.episodes]
    assert set(plugin.submits.values()) == {2}  # each rollout was retried once
    assert set(plugin.prepared.values()) == {1}, plugin.prepared
