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

from tests.reliability.local_pools import LONG, make_runtime, pid_alive

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
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        # listed a moment before the runtime reaped it (killed just before)
                        continue
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
    from rollhub.hubs.async_hub import AsyncHub
    from rollhub.plugins import build_host
    from rollhub_gateway.models import SMOLLM2, load_tokenizer

    from tests.reliability.local_pools import AGENTS

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


@aio
async def test_kill_while_writing_storm_is_never_the_agents_fault(store) -> None:
    """Workers SIGKILLed as they write a result, more times than ``session_attempts`` for
    some rollouts: those end ``infra_error`` (every session lost to the infrastructure),
    never ``agent_error``; only agents that raised are ``agent_error``."""
    n, attempts = 12, 3
    # kills: how many sessions of a rollout die writing; 4 is more than the 3 it gets. A
    # kill takes every session of that worker with it, so any rollout may lose more.
    kills = [0, 1, 4, 0]
    payloads = [
        {"id": f"p{i}", "kills": kills[i % 4], "seconds": 0.05 * (i % 4 == 2), "fail": i == 3}
        for i in range(n)
    ]
    rt = make_runtime("dies_writing", workers=2)
    seen: set[int] = set()
    async with rt, AsyncRolloutClient(
        rt, store, exp_id="storm", session_attempts=attempts
    ) as client:
        seen.update(rt.worker_pids())
        items = [i async for i in client.run_batch_async(payloads, max_concurrent=4, timeout=60)]
        seen.update(rt.worker_pids())
    assert sorted(i.index for i in items) == list(range(n))
    for item in items:
        p = payloads[item.index]
        assert item.status in ("ok", "infra_error", "agent_error"), (item.status, item.error)
        if item.status == "agent_error":  # only the agent that raised, on a session that lived
            assert p["fail"] and item.error.type == "RuntimeError", item.error
        if p["kills"] >= attempts:  # every session died writing: the infrastructure gave out
            assert item.status == "infra_error", (item.status, item.error)
        if item.status == "infra_error":
            assert item.error.type == "SessionLost" and "exited with code -9" in item.error.message
            assert len(item.outcome.dead_sessions) == attempts - 1  # the last one is the error
        for dead in item.outcome.dead_sessions:
            assert "exited with code -9" in dead["cause"], dead
    assert sum(i.status == "infra_error" for i in items) >= 3
    assert any(i.status == "ok" and i.outcome.dead_sessions for i in items)  # retried, then ok
    assert not [p for p in seen if pid_alive(p)], "worker processes outlived the runtime"


class _RecordingTrainer:
    """A policy trainer that keeps what each step was given to train (episode, reward)."""

    @staticmethod
    def make():
        from rollhub.training import PolicyTrainer, StepResult

        class Recording(PolicyTrainer):
            name = "recording"
            steps: list = []

            async def step(self, batch):
                Recording.steps.append([(e, e.reward) for e, _ in batch.trainable()])
                return StepResult(batch.weight_version + 1, {"loss": 0.0})

        return Recording


@aio
async def test_a_storm_under_a_training_step_trains_no_infrastructure_failure(tmp_path) -> None:
    """Through the hub and one training step: rollouts whose every session died writing
    are ``infra_error``, left out of their group under every ``[rewards] on_failure``
    policy (``zero_reward`` imputes 0 only to the agent that raised), a group they leave
    too small is dropped and counted, and ``metrics.jsonl`` counts both."""
    import copy

    from rollhub.config import parse_config
    from rollhub.hubs.async_hub import AsyncHub
    from rollhub.plugins import build_host
    from rollhub.scoring.rewards import apply_failure_policy
    from rollhub.training.advantages import group_advantages
    from rollhub.training.loop import TrainingLoop, batch_metrics
    from rollhub.training.step import TrainingBatch

    from tests.reliability.local_pools import AGENTS

    trainer = _RecordingTrainer.make()
    host = build_host()
    host.registry.add_trainer(trainer)
    cfg = parse_config(
        {
            "experiment": {"name": "storm", "n_samples": 4, "timeout_s": 60, "progress": False,
                           "session_attempts": 2, "concurrency": 1},
            "runtime": {"name": "local", "app": f"{AGENTS}:dies_writing", "workers": 2,
                        "ping_interval_s": 0.2},
            "store": {"url": f"file://{tmp_path / 'store'}"},
            "trainer": {"name": "recording"},
            "rewards": {"on_failure": "zero_reward"},
            "training": {"batch_groups": 4, "steps": 1, "shuffle": False, "checkpoint_every": 0},
        },
        env={},
    )  # fmt: skip
    # kills per sample index: 3 is more than the 2 sessions each rollout gets. One rollout
    # at a time, so a kill takes no other rollout's session with it.
    payloads = [
        {"id": "g0", "kills": [0, 0, 0, 0]},
        {"id": "g1", "kills": [3, 0, 0, 0]},
        {"id": "g2", "kills": [3, 3, 3, 0]},  # one episode left: under min_group_size
        {"id": "g3", "kills": [0, 3, 0, 0], "fail_index": 0},
    ]
    hub = AsyncHub(cfg, host=host, run_dir=tmp_path / "run")
    async with hub:
        loop = TrainingLoop(hub, payloads, run_dir=tmp_path / "run", progress=False)
        await loop.run()
    (trained,) = trainer.steps
    (row,) = loop.history
    episodes = [e for e, _ in trained]
    assert not [e for e in episodes if e.status == "infra_error"]
    # the episodes the step was given, by status: only the agent's failure is imputed
    infra = {k for k, p in _kills(payloads).items() if p >= 2}
    by_id = {(e.group_id, e.sample_index): e for e in episodes}
    assert not infra & set(by_id)
    assert by_id[("g3", 0)].status == "agent_error" and by_id[("g3", 0)].reward == 0.0
    assert row["episodes_infra_failed"] == len(infra) == 5 and row["groups_dropped"] == 1
    assert row["episodes_trained"] == len(trained)
    assert not any(g == "g2" for g, _ in by_id)  # dropped whole: one episode left of four
    assert len(trained) == 4 + 3 + 3  # g0 whole, g1 and g3 without their lost episode

    # The same groups under the other two policies: no infrastructure failure trains.
    groups = [g for g in _step_groups(tmp_path / "run")]
    for policy in ("exclude_episode", "drop_group", "zero_reward"):
        fresh = copy.deepcopy(groups)
        for g in fresh:
            _reset(g)
            apply_failure_policy(g, policy)
        advantages = {k: v for g in fresh for k, v in group_advantages(g).items()}
        batch = TrainingBatch(0, fresh, advantages, 0)
        given = batch.trainable()
        assert not [e for e, _ in given if e.status == "infra_error"], policy
        assert not [e for g in fresh for e in g.episodes if e.infra_failed and e.reward is not None]
        metrics = batch_metrics(batch)
        assert metrics["groups_dropped"] == sum(1 for g in fresh if g.dropped) == 1, policy
        assert metrics["episodes_infra_failed"] == len(infra)
        if policy == "drop_group":  # g3 had an agent failure: dropped by the policy too
            assert not [e for e, _ in given if e.group_id == "g3"]
            # an infrastructure failure alone never drops a group that is big enough
            assert len([e for e, _ in given if e.group_id == "g1"]) == 3
        if policy == "zero_reward":
            imputed = [e for g in fresh for e in g.episodes if e.metrics.get("reward_imputed")]
            assert imputed and all(e.status == "agent_error" for e in imputed)


def _kills(payloads: list[dict]) -> dict[tuple[str, int], int]:
    return {(p["id"], i): k for p in payloads for i, k in enumerate(p["kills"])}


def _step_groups(run_dir):
    """The step's groups, read back from ``episodes.jsonl``."""
    from rollhub.episode import EpisodeGroup
    from rollhub.export import episode_from_row, read_rows

    groups: dict[str, list] = {}
    for row in read_rows(run_dir / "episodes.jsonl"):
        groups.setdefault(row["group_id"], []).append(episode_from_row(row))
    return [EpisodeGroup(gid, {}, sorted(eps, key=lambda e: e.sample_index))
            for gid, eps in groups.items()]  # fmt: skip


def _reset(group) -> None:
    """Undo the failure policy the run applied (its imputed zeros too)."""
    group.dropped = None
    for e in group.episodes:
        if e.metrics.pop("reward_imputed", False):
            e.reward = None
        e.metrics.pop("group_dropped", None)
        e.trainable = True
