"""What the ray runtime knows of its cluster, without a cluster: which nodes may take an
actor, which are avoided after an actor died on them, and when the head counts as lost."""

from __future__ import annotations

import asyncio
import time

import pytest
from rollhub.runtimes import ray_nodes
from rollhub.runtimes.ray_nodes import HeadProbe, NodeTable, RayNodeInfo, in_daemon_thread


def _table(required: dict[str, float]) -> NodeTable:
    table = NodeTable(required)
    table.nodes = {
        "h": RayNodeInfo("h", "head", True, {"CPU": 1.0}),
        "a": RayNodeInfo("a", "worker-1", True, {"CPU": 1.0, "rollhub_worker": 1000.0}),
        "b": RayNodeInfo("b", "worker-2", True, {"CPU": 1.0, "rollhub_worker": 1000.0}),
        "x": RayNodeInfo("x", "worker-3", False, {"CPU": 1.0, "rollhub_worker": 1000.0}),
    }
    return table


def test_only_live_nodes_offering_the_resources_take_actors():
    table = _table({"rollhub_worker": 0.001})
    assert [n.name for n in table.eligible()] == ["worker-1", "worker-2"]
    assert table.pick({"a": 2, "b": 1}).name == "worker-2"  # the emptiest
    assert table.pick({}).name == "worker-1"  # ties by name
    assert [n.name for n in _table({}).eligible()] == ["head", "worker-1", "worker-2"]


def test_a_suspect_node_is_avoided_until_it_proves_alive(monkeypatch):
    pytest.importorskip("ray", reason="Ray is an optional dependency (rollhub[ray])")
    table = _table({"rollhub_worker": 0.001})
    table.suspect("a")
    assert table.is_suspect("a") and table.pick({}).name == "worker-2"
    table.suspect("b")
    assert table.pick({}) is None  # nowhere to go: the caller waits and tries again
    # Ray still reports both alive SUSPECT_S later: they are trusted again
    monkeypatch.setattr(ray_nodes, "SUSPECT_S", 0.0)
    rows = [
        {"NodeID": n.node_id, "NodeName": n.name, "Alive": n.alive, "Resources": n.resources}
        for n in table.nodes.values()
    ]
    monkeypatch.setattr("ray.nodes", lambda: rows)
    time.sleep(0.01)
    joined = table.refresh()
    assert not table.is_suspect("a") and not table.is_suspect("b")
    assert {n.name for n in joined} == {"worker-1", "worker-2"}  # eligible again
    assert table.refresh() == []  # nothing changed since


async def test_the_head_is_lost_only_after_its_timeout():
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = HeadProbe(f"127.0.0.1:{port}", timeout_s=0.3)
    assert await probe.check() and probe.lost_for == 0 and not probe.lost
    server.close()
    await server.wait_closed()
    assert not await probe.check()
    assert not probe.lost  # not for long enough yet
    lost = asyncio.Event()
    await asyncio.wait_for(probe.watch(lost.set, 0.05), 5)
    assert lost.is_set() and probe.lost and probe.lost_for >= 0.3


async def test_a_blocked_call_does_not_hold_the_loop():
    assert await in_daemon_thread(lambda: 7, 1.0) == 7
    with pytest.raises(ZeroDivisionError):
        await in_daemon_thread(lambda: 1 / 0, 1.0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        await in_daemon_thread(lambda: time.sleep(5), 0.2)
    assert time.monotonic() - t0 < 1.0
