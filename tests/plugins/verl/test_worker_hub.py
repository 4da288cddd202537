"""The per-process hub's shutdown at interpreter exit, from outside its event loop."""

from __future__ import annotations

import asyncio
import threading

from rollhub_verl import worker_hub
from rollhub_verl.worker_hub import WorkerHub, close_all_sync, verl_sampling


class FakeHub:
    """Only what close needs: an async close that records the loop it ran on."""

    def __init__(self) -> None:
        self.closed_on: asyncio.AbstractEventLoop | None = None

    async def close(self) -> dict:
        self.closed_on = asyncio.get_running_loop()
        return {}


def test_hubs_are_closed_on_their_own_running_loop(monkeypatch):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    hubs = {"a": WorkerHub(FakeHub(), None, loop)}  # type: ignore[arg-type]
    monkeypatch.setattr(worker_hub, "_HUBS", hubs)
    hub = hubs["a"].hub
    try:
        close_all_sync(timeout_s=10)
        assert hub.closed_on is loop and hubs == {}
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_stopped_loop_is_run_to_close_and_a_closed_one_skipped(monkeypatch):
    idle, gone = asyncio.new_event_loop(), asyncio.new_event_loop()
    gone.close()
    hubs = {"idle": WorkerHub(FakeHub(), None, idle), "gone": WorkerHub(FakeHub(), None, gone)}  # type: ignore[arg-type]
    monkeypatch.setattr(worker_hub, "_HUBS", hubs)
    first, second = hubs["idle"].hub, hubs["gone"].hub
    close_all_sync()
    assert first.closed_on is idle and second.closed_on is None and hubs == {}
    idle.close()


def test_sampling_binding_lasts_as_long_as_the_block():
    from types import SimpleNamespace

    from rollhub_verl.backend import binding

    hook = worker_hub._SessionSampling()
    request = SimpleNamespace(rollout=SimpleNamespace(session_id="g-0-x"))
    hook.rollhub_prepare_rollout(request)  # outside a block: nothing bound
    assert "g-0-x" not in binding().sessions
    try:
        with verl_sampling({"temperature": 0.0}):
            hook.rollhub_prepare_rollout(request)
            assert binding().sessions["g-0-x"] == {"temperature": 0.0}
            raise KeyboardInterrupt  # a cancelled episode still unbinds
    except KeyboardInterrupt:
        pass
    assert "g-0-x" not in binding().sessions
