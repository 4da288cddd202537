"""Hosting hubs in a foreign process: one per key, on its own loop thread or the caller's
loop, reachable from other event loops, closed at exit (also in a real subprocess)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from rollhub import hookimpl
from rollhub.config import parse_config
from rollhub.errors import UsageError
from rollhub.hubs.async_hub import AsyncHub
from rollhub.hubs.hosted import HubHosting
from rollhub.hubs.sync_hub import Hub
from rollhub.lifetimes.loop_thread import LoopThread
from rollhub.plugins import build_host

from tests.core.pipeline.hosting_support import CALLER, Recorder, idle_config, idle_host

ROOT = Path(__file__).resolve().parents[3]
AGENT = Path(__file__).parent / "agents" / "echo_agent.py"


@pytest.fixture
def hosting():
    hosting = HubHosting()
    yield hosting
    hosting.close_hubs()


def thread_loop(name: str) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """An event loop running forever on its own thread, as a trainer's worker has one."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
    thread.start()
    return loop, thread


def stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


# Process hubs (own loop thread) ----------------------------------------------------------


def test_one_process_hub_per_key_from_many_threads(hosting, tmp_path):
    recorder = Recorder()
    builds: Counter[str] = Counter()
    barrier = threading.Barrier(8)

    def build(key: str) -> Hub:
        builds[key] += 1
        return Hub(idle_config(tmp_path, key), host=idle_host(recorder), run_dir=tmp_path / key)

    def ask(i: int) -> Hub:
        key = "a" if i % 2 else "b"
        barrier.wait()  # all threads ask at once
        return hosting.process_hub(key, lambda: build(key))

    got: list[Hub] = []
    threads = [threading.Thread(target=lambda i=i: got.append(ask(i))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert builds == {"a": 1, "b": 1}
    a, b = hosting.hosted_hub("a"), hosting.hosted_hub("b")
    assert isinstance(a, Hub) and isinstance(b, Hub) and a is not b
    assert sorted(id(h) for h in got) == sorted([id(a)] * 4 + [id(b)] * 4)
    assert sorted(hosting.keys()) == ["a", "b"]
    # each started once, on its own loop thread
    loops = {loop for loop, _ in recorder.started}
    assert len(recorder.started) == 2 and loops == {a.loop_thread.loop, b.loop_thread.loop}
    assert hosting.process_hub("a", lambda: pytest.fail("built twice")) is a

    hosting.close_hubs()
    assert len(recorder.stopped) == 2 and hosting.keys() == []
    assert not a.loop_thread.running and not b.loop_thread.running


def test_a_failed_start_is_not_kept(hosting, tmp_path):
    recorder = Recorder()
    bad = idle_config(tmp_path)
    bad.runtime.name = "nowhere"
    with pytest.raises(Exception, match="nowhere"):
        hosting.process_hub("k", lambda: Hub(bad, host=idle_host(recorder), run_dir=tmp_path))
    assert hosting.hosted_hub("k") is None
    hub = hosting.process_hub(
        "k", lambda: Hub(idle_config(tmp_path), host=idle_host(recorder), run_dir=tmp_path)
    )
    assert hosting.hosted_hub("k") is hub and len(recorder.started) == 1


def test_threads_waiting_on_a_failed_start_get_its_failure(hosting, tmp_path):
    """A trainer's threads ask for the hub together: a start that fails is tried once for
    them all, not once per thread, and the next call after the failure tries again."""
    failing, recorder = Recorder(fail_start=True), Recorder()
    builds = 0
    barrier = threading.Barrier(6)

    def build(plugin: Recorder) -> Hub:
        nonlocal builds
        builds += 1
        time.sleep(0.2)  # the other threads are queued on the start by now
        return Hub(idle_config(tmp_path, "k"), host=idle_host(plugin), run_dir=tmp_path)

    def ask() -> BaseException | Hub:
        barrier.wait()
        try:
            return hosting.process_hub("k", lambda: build(failing))
        except Exception as exc:
            return exc

    asked: list[BaseException | Hub] = []
    threads = [threading.Thread(target=lambda: asked.append(ask())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert builds == 1
    assert len(asked) == 6
    assert all(isinstance(e, RuntimeError) and "did not come up" in str(e) for e in asked)
    assert hosting.hosted_hub("k") is None
    hub = hosting.process_hub("k", lambda: build(recorder))
    assert builds == 2 and hosting.hosted_hub("k") is hub and len(recorder.started) == 1


async def test_process_hub_is_refused_inside_a_running_loop(hosting):
    with pytest.raises(UsageError, match=r"process_hub\('k'\).*asyncio.to_thread"):
        hosting.process_hub("k", lambda: pytest.fail("must not build"))


def test_the_async_handle_runs_episodes_for_foreign_loops(hosting, tmp_path):
    """A real hub (local worker process, echo agent) used from sync code, from this
    thread's event loop and from another thread's loop at once; its work stays on its own
    loop thread."""
    seen: list[asyncio.AbstractEventLoop] = []

    class Where:
        @hookimpl
        def rollhub_prepare_rollout(self, request, hub):
            seen.append(asyncio.get_running_loop())

    cfg = parse_config(
        {
            "experiment": {"name": "handle", "progress": False, "timeout_s": 30},
            "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 1},
            "store": {"url": f"file://{tmp_path / 'store'}"},
            "trainer": {"name": "export", "formats": ["jsonl"]},
        },
        env={},
    )
    host = build_host(entry_points=False, plugins=[Where()])
    hub = hosting.process_hub("real", lambda: Hub(cfg, host=host, run_dir=tmp_path / "run"))
    assert hub.run_episode({"id": "sync", "reward": 0.5}, "sync", 0).reward == 0.5

    async def foreign(tag: str) -> list:
        handle = hub.loop_thread
        return await asyncio.gather(
            *(handle.run_async(hub.async_hub.run_episode({"id": tag}, tag, i)) for i in range(2))
        )

    other_loop, other_thread = thread_loop("trainer-loop")
    try:
        elsewhere = asyncio.run_coroutine_threadsafe(foreign("other"), other_loop)
        here = asyncio.run(foreign("here"))
        there = elsewhere.result(30)
    finally:
        stop(other_loop, other_thread)
    assert [(e.group_id, e.sample_index, e.status) for e in here + there] == [
        ("here", 0, "ok"), ("here", 1, "ok"), ("other", 0, "ok"), ("other", 1, "ok"),
    ]  # fmt: skip
    assert len(seen) == 5 and set(seen) == {hub.loop_thread.loop}


# Loop hubs (the caller's event loop) -------------------------------------------------------


async def test_one_loop_hub_per_key_started_in_the_callers_context(hosting, tmp_path):
    recorder = Recorder()
    builds: Counter[str] = Counter()

    def build(key: str) -> AsyncHub:
        builds[key] += 1
        return AsyncHub(idle_config(tmp_path, key), host=idle_host(recorder), run_dir=tmp_path)

    async def ask(key: str, who: str) -> AsyncHub:
        CALLER.set(who)
        return await hosting.loop_hub(key, lambda: build(key))

    hubs = await asyncio.gather(*(ask("x" if i < 4 else "y", f"task-{i}") for i in range(6)))
    assert builds == {"x": 1, "y": 1}
    x, y = hubs[0], hubs[4]
    assert hubs == [x] * 4 + [y] * 2 and x is not y
    # started on this loop, in the first asking task's context (for context variables)
    loop = asyncio.get_running_loop()
    assert recorder.started == [(loop, "task-0"), (loop, "task-4")]

    # another loop may not use it: its objects belong to this one
    with pytest.raises(UsageError, match="started on another event loop"):
        await asyncio.to_thread(asyncio.run, hosting.loop_hub("x", lambda: build("x")))
    with pytest.raises(UsageError, match="on an event loop"):
        await asyncio.to_thread(hosting.process_hub, "x", lambda: build("x"))

    await hosting.aclose_hubs()
    assert recorder.stopped == [loop, loop] and hosting.keys() == []


async def test_tasks_waiting_on_a_failed_start_get_its_failure_and_a_later_call_retries(
    hosting, tmp_path
):
    """A trainer's rows ask for the hub together: a start that fails is tried once for them
    all, not once per row, and the next call after the failure tries again."""
    failing, recorder = Recorder(fail_start=True), Recorder()
    builds = 0

    def build(plugin: Recorder) -> AsyncHub:
        nonlocal builds
        builds += 1
        return AsyncHub(idle_config(tmp_path, "k"), host=idle_host(plugin), run_dir=tmp_path)

    asked = await asyncio.gather(
        *(hosting.loop_hub("k", lambda: build(failing)) for _ in range(6)), return_exceptions=True
    )
    assert builds == 1
    assert all(isinstance(e, RuntimeError) and "did not come up" in str(e) for e in asked)
    assert hosting.hosted_hub("k") is None
    hub = await hosting.loop_hub("k", lambda: build(recorder))
    assert builds == 2 and hosting.hosted_hub("k") is hub and len(recorder.started) == 1
    await hosting.aclose_hubs()


async def test_a_process_hub_asked_for_on_a_loop_points_at_its_handle(hosting, tmp_path):
    cfg = idle_config(tmp_path)
    await asyncio.to_thread(
        hosting.process_hub, "p", lambda: Hub(cfg, host=idle_host(Recorder()), run_dir=tmp_path)
    )
    with pytest.raises(UsageError, match=r"loop_thread.run_async"):
        await hosting.loop_hub("p", lambda: pytest.fail("must not build"))
    await hosting.aclose_hubs()
    assert hosting.hosted_hub("p") is None


# Closing -----------------------------------------------------------------------------------


def test_close_hubs_closes_each_on_its_own_loop(hosting, tmp_path, caplog):
    """On the thread running its loop; a stopped loop is run to close it; a closed loop is
    skipped; a failing close is logged and the others are closed still."""
    recorder, failing = Recorder(), Recorder(fail=True)

    def host(key: str, rec: Recorder):
        return lambda: AsyncHub(idle_config(tmp_path, key), host=idle_host(rec), run_dir=tmp_path)

    running, thread = thread_loop("worker-loop")
    idle, gone = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        asyncio.run_coroutine_threadsafe(
            hosting.loop_hub("running", host("running", recorder)), running
        ).result(10)
        idle.run_until_complete(hosting.loop_hub("idle", host("idle", recorder)))
        gone.run_until_complete(hosting.loop_hub("gone", host("gone", recorder)))
        gone.close()
        hosting.process_hub("failing", lambda: Hub(
            idle_config(tmp_path, "failing"), host=idle_host(failing), run_dir=tmp_path
        ))  # fmt: skip
        assert len(recorder.started) == 3

        with caplog.at_level(logging.WARNING, logger="rollhub.hubs.hosted"):
            hosting.close_hubs(timeout_s=10)
        assert recorder.stopped == [running, idle]  # each on its own loop; "gone" skipped
        assert len(failing.stopped) == 1 and "closing failed on purpose" in caplog.text
        assert "event loop is closed" in caplog.text
        assert hosting.keys() == []
    finally:
        stop(running, thread)
        idle.close()


def test_close_hubs_on_the_hubs_own_loop_is_refused(hosting, tmp_path):
    async def main() -> None:
        await hosting.loop_hub("k", lambda: AsyncHub(
            idle_config(tmp_path), host=idle_host(Recorder()), run_dir=tmp_path
        ))  # fmt: skip
        with pytest.raises(UsageError, match=r"await aclose_hubs\(\) there"):
            hosting.close_hub("k")

    asyncio.run(main())


EXIT_SCRIPT = """
import asyncio, os, signal, sys, threading
from pathlib import Path
sys.path.insert(0, {root!r})
from rollhub.hubs.hosted import loop_hub, process_hub
from rollhub.hubs.async_hub import AsyncHub
from rollhub.hubs.sync_hub import Hub
from tests.core.pipeline.hosting_support import Recorder, idle_config, idle_host

tmp = Path({tmp!r})

def hub(cls, key):
    rec = Recorder(marker=tmp / (key + ".closed"))
    return lambda: cls(idle_config(tmp, key), host=idle_host(rec), run_dir=tmp / key)

process_hub("own-thread", hub(Hub, "own-thread"))
worker = asyncio.new_event_loop()  # a worker's loop, still running at exit
threading.Thread(target=worker.run_forever, daemon=True).start()
asyncio.run_coroutine_threadsafe(loop_hub("worker-loop", hub(AsyncHub, "worker-loop")), worker).result()
child = os.fork()  # a forked child that exits normally leaves its parent's hubs alone
if child == 0:
    signal.alarm(20)  # a child hanging at exit dies instead of outliving the test
    sys.exit(0)
print("child", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
# made after the fork: a child that inherits a stopped selector loop closes it when it is
# collected at exit, and that unregisters the loop's wake-up pipe from the epoll instance
# parent and child share, so the parent's loop would never wake again (asyncio, not rollhub)
main = asyncio.new_event_loop()  # a loop that has stopped, not closed
main.run_until_complete(loop_hub("stopped-loop", hub(AsyncHub, "stopped-loop")))
print("exiting")
"""


def test_hubs_are_closed_when_a_subprocess_exits_normally(tmp_path):
    """The close paths await asyncio.to_thread, as real ones do: that must still work at exit.
    A forked child's exit must not try to close (or hang on) its parent's hubs."""
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(EXIT_SCRIPT.format(root=str(ROOT), tmp=str(tmp_path))))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0 and done.stdout == "child 0\nexiting\n", done.stderr
    for key in ("own-thread", "worker-loop", "stopped-loop"):
        marker = tmp_path / f"{key}.closed"
        assert marker.exists() and marker.read_text() == "closed", (key, done.stderr)
    assert "Traceback" not in done.stderr and "failed" not in done.stderr, done.stderr


# The loop thread ---------------------------------------------------------------------------


def test_loop_thread_starts_on_first_use_and_again_after_stop():
    lt = LoopThread("lazy")
    assert not lt.running and not any(t.name == "lazy" for t in threading.enumerate())
    assert lt.run(asyncio.sleep(0, "one")) == "one"
    first = lt.loop
    assert lt.running
    lt.stop()
    assert not lt.running and first.is_closed()
    assert lt.run(asyncio.sleep(0, "two")) == "two" and lt.loop is not first
    lt.stop()
    lt.stop()  # idempotent
    assert not any(t.name == "lazy" for t in threading.enumerate())


async def test_loop_thread_refuses_sync_calls_in_a_loop_with_its_owners_hint():
    lt = LoopThread("refusing", hint="use the async API there (AsyncThing)")
    coro = asyncio.sleep(0)
    with pytest.raises(UsageError, match=r"Thing.do was called inside .*\(AsyncThing\)$"):
        lt.run(coro, what="Thing.do")
    assert coro.cr_frame is None  # closed unrun: no "never awaited" warning
    assert not lt.running  # nothing started for a refused call


async def test_run_async_cancels_the_work_on_the_loop_thread():
    lt = LoopThread("cancel")
    ended = threading.Event()

    async def long() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            ended.set()

    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lt.run_async(long()), 0.2)
        assert await asyncio.to_thread(ended.wait, 5)
        assert await lt.run_async(asyncio.sleep(0, "after")) == "after"
    finally:
        await asyncio.to_thread(lt.stop)
