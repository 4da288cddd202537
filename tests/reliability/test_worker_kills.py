"""Workers SIGKILLed during a batch: exactly one outcome per payload, causes given, no orphans."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import time

import pytest
from rollhub.client import AsyncRolloutClient

from tests.reliability.conftest import LONG, make_runtime, pid_alive

aio = pytest.mark.asyncio(loop_scope="function")
log = logging.getLogger(__name__)


@aio
async def test_sigkills_during_a_batch(store) -> None:
    """Workers SIGKILLed every 0.3-1 s: each rollout they held goes to a new session on a
    live worker and ends ok; an agent that raises is reported once, never resubmitted."""
    n = 800 if LONG else 160
    rng = random.Random(14)
    payloads = [
        {"id": f"p{i}", "seconds": rng.uniform(0.2, 0.6), "fail": i % 10 == 3} for i in range(n)
    ]
    rt = make_runtime(workers=2)
    killed: list[int] = []
    seen: set[int] = set()
    # two workers, one killed every ~0.65 s: a rollout may lose several sessions in a row
    async with rt, AsyncRolloutClient(rt, store, exp_id="kills", session_attempts=64) as client:
        stop = asyncio.Event()

        async def killer() -> None:
            while not stop.is_set():
                await asyncio.sleep(rng.uniform(0.3, 1.0))
                pids = rt.worker_pids()
                seen.update(pids)
                if pids and not stop.is_set():
                    pid = rng.choice(pids)
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        task = asyncio.create_task(killer())
        started = time.monotonic()
        items = [i async for i in client.run_batch_async(payloads, max_concurrent=32, timeout=60)]
        elapsed = time.monotonic() - started
        stop.set()
        await task
        seen.update(rt.worker_pids())
        stats = client.stats
    assert sorted(i.index for i in items) == list(range(n))  # one item per payload
    assert len({i.session_id for i in items}) == n
    failing = {i for i in range(n) if payloads[i]["fail"]}
    for item in items:
        if item.index in failing:
            assert item.status == "agent_error", item
            assert item.error is not None and item.error.type == "RuntimeError", item.error
        else:
            assert item.status == "ok", (item.status, item.error)
        for dead in item.outcome.dead_sessions:
            assert "exited with code -9" in dead["cause"], dead
    # exactly one stored document per rollout, under its last session; none for a dead one
    stored = [k.rsplit("/", 1)[1][: -len(".json")] for k in store.list("kills/")]
    assert sorted(stored) == sorted(i.session_id for i in items)
    dead = [d["session_id"] for i in items for d in i.outcome.dead_sessions]
    assert dead and not set(dead) & set(stored)
    assert stats["resubmitted"] == len(dead)  # one resubmission per dead session
    assert len(killed) >= 2
    assert not [p for p in seen if pid_alive(p)], "worker processes outlived the runtime"
    figures = {
        "rollouts": n, "ok": sum(i.status == "ok" for i in items), "agent_raised": len(failing),
        "resubmitted": stats["resubmitted"], "dead_sessions": len(dead),
        "most_sessions_for_one_rollout": 1 + max(len(i.outcome.dead_sessions) for i in items),
        "kills": len(killed), "elapsed_s": round(elapsed, 1),
    }  # fmt: skip
    print("worker-kill figures:", json.dumps(figures))


@aio
async def test_a_dead_workers_episode_is_trained_on_its_new_session_only(tmp_path) -> None:
    """Through the hub and the gateway: the worker dies after the agent's first model call;
    the rollout runs again under a new session with a fresh capture session, and the episode
    holds only the new session's turn (the dead one's capture is dropped)."""
    from rollhub.config import parse_config
    from rollhub.errors import TokenRetrievalError
    from rollhub.hub import AsyncHub
    from rollhub.plugins import build_host
    from rollhub_gateway.models import SMOLLM2, load_tokenizer

    from tests.reliability.conftest import AGENTS

    cfg = parse_config(
        {
            "experiment": {"name": "dies", "n_samples": 1, "timeout_s": 60, "progress": False},
            "runtime": {"name": "local", "app": f"{AGENTS}:dies_once", "workers": 1},
            "store": {"url": f"file://{tmp_path / 'store'}"},
            "token_source": {"name": "gateway", "model": SMOLLM2, "engine": {"name": "scripted"}},
        },
        env={},
    )  # fmt: skip
    tok = load_tokenizer(SMOLLM2)
    first, second = [*tok.encode("dead turn"), 2], [*tok.encode("live turn"), 2]
    marker = tmp_path / "died"
    hub = AsyncHub(cfg, host=build_host(), run_dir=tmp_path / "run")
    async with hub:
        backend = hub.token_source.gateway.backend
        backend.add(first, second)
        group = await hub.run_group({"id": "p0", "marker": str(marker)}, 1)
        (episode,) = group.episodes
        dead_sid = marker.read_text()
        with pytest.raises(TokenRetrievalError):  # the dead attempt's capture is gone
            await hub.token_source.fetch_traces(dead_sid)
    assert episode.status == "ok", episode.error
    assert episode.session_id == f"{dead_sid}-r1" and episode.episode_id == dead_sid
    (dead,) = episode.metrics["dead_sessions"]
    assert dead["session_id"] == dead_sid and "exited with code" in dead["cause"]
    assert len(backend.prompts) == 2  # the model was called once per session
    (record,) = episode.traces
    assert record.response_ids == second
    assert len(record.turns) == 1  # the live session's one turn, nothing of the dead one
