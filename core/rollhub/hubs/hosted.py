"""Hosting a hub in a process rollhub does not own: one per key, started on first use,
closed when the process exits.

A trainer's worker (verl's agent-loop workers, slime's rollout manager) calls into rollhub
from code the trainer owns, once per row or per step, from its own threads and event
loops. It wants one started hub for the whole process. Two ways to host it:

- :func:`process_hub`: a :class:`~rollhub.hubs.sync_hub.Hub`, whose :class:`~rollhub.hubs.async_hub.AsyncHub`
  runs on a loop thread of its own. Synchronous code calls the hub; coroutines on any other
  event loop of the process reach it through its async handle::

      hub = process_hub("my-trainer", lambda: Hub(load_config(path)))
      group = hub.run_group(payload)                                  # synchronous code
      episode = await hub.loop_thread.run_async(                      # another event loop
          hub.async_hub.run_episode(payload, group_id, 0))

- :func:`loop_hub`: an :class:`~rollhub.hubs.async_hub.AsyncHub` started on the caller's own event
  loop, for a process with one long-lived loop whose objects the hub must use (verl's
  server client belongs to its worker's loop) and whose context variables the hub's hooks
  must see (they run in the caller's task)::

      hub = await loop_hub("my-worker", lambda: AsyncHub(load_config(path)))

The key is the caller's choice (its name and config path, say): the first call builds and
starts the hub, concurrent first calls (threads, or tasks of the loop) wait for that one,
later calls get it. A hub that failed to start is not kept; the next call tries again.

Every hosted hub is closed when the interpreter exits normally: before it stops its thread
pools, so close paths that await ``asyncio.to_thread`` still run. :func:`close_hub`,
:func:`close_hubs` and :func:`aclose_hubs` close them earlier.
"""

from __future__ import annotations

import asyncio
import atexit

# imported now, not at exit: it registers its own exit hook on import, which must come
# before ours (they run in reverse), and registering is refused once the exit has begun
import concurrent.futures.thread  # noqa: F401
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from rollhub.errors import UsageError
from rollhub.hubs.async_hub import AsyncHub
from rollhub.hubs.sync_hub import Hub
from rollhub.lifetimes.loop_thread import ensure_no_running_loop

log = logging.getLogger(__name__)

__all__ = [
    "HubHosting",
    "aclose_hubs",
    "close_hub",
    "close_hubs",
    "hosted_hub",
    "loop_hub",
    "process_hub",
]

H = TypeVar("H", bound=Hub)
A = TypeVar("A", bound=AsyncHub)


@dataclass(frozen=True)
class _Hosted:
    """One hosted hub: a sync twin on its own loop thread, or an AsyncHub on ``loop``."""

    hub: AsyncHub
    loop: asyncio.AbstractEventLoop | None = None
    twin: Hub | None = None
    pid: int = field(default_factory=os.getpid)

    def close(self, timeout_s: float) -> None:
        """Close the hub from outside its loop."""
        if self.pid != os.getpid():
            # a forked child's copy: the hub's threads and loop stayed in the parent
            return
        if self.twin is not None:
            self.twin.close()
            return
        loop = self.loop
        assert loop is not None
        if loop.is_closed():  # the loop's owner ended it: nothing can run on it any more
            log.warning("hub's event loop is closed; the hub was left unclosed")
        elif loop.is_running():
            if _running_loop() is loop:
                raise UsageError(
                    "close_hubs() was called on the event loop a hub runs on and would block "
                    "it; await aclose_hubs() there instead"
                )
            asyncio.run_coroutine_threadsafe(self.hub.close(), loop).result(timeout_s)
        else:
            loop.run_until_complete(self.hub.close())


class HubHosting:
    """The hubs one process hosts, by key (the module's functions share one instance)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hubs: dict[str, _Hosted] = {}
        #: per key: serialises the first start of a process hub between threads
        self._thread_gates: dict[str, threading.Lock] = {}
        #: per key: the loop starting a loop hub, and the lock its tasks wait on
        self._loop_gates: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        #: per key: how many starts failed, and the last failure. A task or thread that was
        #: already waiting when a start failed gets that failure instead of starting again:
        #: a trainer's rows ask together, and each retry of a start that cannot succeed
        #: (a bad config, a gateway that does not come up) would cost the whole wait again.
        self._failed_starts: dict[str, tuple[int, Exception]] = {}
        self._exit_armed = False

    def process_hub(self, key: str, build: Callable[[], H]) -> H:
        """The started :class:`Hub` for ``key``, built by ``build()`` and started on first use.

        Call it from synchronous code (a thread without a running loop; from async code,
        through ``asyncio.to_thread``). Later calls get the first call's hub, whatever
        their ``build``.

        :param build: makes the (unstarted) hub; called once per key.
        :raises UsageError: called inside a running event loop, or ``key`` is hosted by
            :meth:`loop_hub`.
        :raises Exception: what ``build()`` or the hub's start raised; the threads that were
            waiting for that start get the same exception, and a later call tries again.
        """
        ensure_no_running_loop(
            f"process_hub({key!r})", "call it through asyncio.to_thread, or use loop_hub()"
        )
        found = self._hosted(key)
        if found is None:
            failures_seen = self._failures(key)
            with self._lock:
                gate = self._thread_gates.setdefault(key, threading.Lock())
            with gate:
                found = self._hosted(key)
                if found is None:
                    self._raise_failure_since(key, failures_seen)
                    try:
                        twin = build()
                    except Exception as exc:
                        self._record_failure(key, exc)
                        raise
                    try:
                        twin.start()
                    except Exception as exc:
                        twin.close()
                        self._record_failure(key, exc)
                        raise
                    except BaseException:
                        twin.close()
                        raise
                    found = self._keep(key, _Hosted(twin.async_hub, twin=twin))
                    log.info("hub %r started on its own loop thread", key)
        if found.twin is None:
            raise UsageError(
                f"hub {key!r} is hosted on an event loop (loop_hub); await loop_hub({key!r}, "
                f"...) on that loop, or host it with process_hub from the start"
            )
        return cast(H, found.twin)

    async def loop_hub(self, key: str, build: Callable[[], A]) -> A:
        """The started :class:`AsyncHub` for ``key`` on the running event loop, built by
        ``build()`` and started on first use (in the calling task, so its context
        variables are the caller's).

        :param build: makes the (unstarted) hub; called once per key.
        :raises UsageError: the hub of ``key`` runs on another event loop, or is hosted by
            :meth:`process_hub`.
        :raises Exception: what ``build()`` or the hub's start raised; the tasks that were
            waiting for that start get the same exception, and a later call tries again.
        """
        loop = asyncio.get_running_loop()
        found = self._hosted(key)
        if found is None:
            failures_seen = self._failures(key)
            async with self._loop_gate(key, loop):
                found = self._hosted(key)
                if found is None:
                    self._raise_failure_since(key, failures_seen)
                    try:
                        hub = build()
                        await hub.start()
                    except Exception as exc:
                        self._record_failure(key, exc)
                        raise
                    found = self._keep(key, _Hosted(hub, loop=loop))
                    log.info("hub %r started on the caller's event loop", key)
        if found.twin is not None:
            raise UsageError(
                f"hub {key!r} is hosted on its own loop thread (process_hub); from an event "
                f"loop use hub.loop_thread.run_async(hub.async_hub....) on that Hub"
            )
        if found.loop is not loop:
            raise _other_loop(key)
        return cast(A, found.hub)

    def _failures(self, key: str) -> int:
        """How many starts of ``key``'s hub have failed so far."""
        return self._failed_starts.get(key, (0, None))[0]

    def _raise_failure_since(self, key: str, failures_seen: int) -> None:
        """Raise the failure of a start that failed while the caller waited for it."""
        failures, failure = self._failed_starts.get(key, (0, None))
        if failures > failures_seen and failure is not None:
            raise failure

    def _record_failure(self, key: str, exc: Exception) -> None:
        self._failed_starts[key] = (self._failures(key) + 1, exc)

    def hosted_hub(self, key: str) -> Hub | AsyncHub | None:
        """The hub hosted for ``key`` (a :class:`Hub` or an :class:`AsyncHub`), or None."""
        found = self._hosted(key)
        if found is None:
            return None
        return found.twin if found.twin is not None else found.hub

    def keys(self) -> list[str]:
        """The keys of the hosted hubs."""
        with self._lock:
            return list(self._hubs)

    def close_hub(self, key: str, *, timeout_s: float = 60.0) -> None:
        """Close the hub of ``key``, if one is hosted (from outside its event loop).

        :param timeout_s: how long to wait for a hub on another thread's loop.
        """
        with self._lock:
            found = self._hubs.pop(key, None)
            self._loop_gates.pop(key, None)
        if found is not None:
            found.close(timeout_s)

    def close_hubs(self, *, timeout_s: float = 60.0) -> None:
        """Close every hosted hub (what runs at exit). A failure is logged, and the others
        are closed still."""
        with self._lock:
            hosted, self._hubs = self._hubs, {}
            self._loop_gates.clear()
        for key, found in hosted.items():
            try:
                found.close(timeout_s)
            except Exception as exc:  # the process is ending: close the others regardless
                log.warning("closing hub %r failed: %s", key, exc)

    async def aclose_hubs(self) -> None:
        """Close every hosted hub from a coroutine: those of this loop here, the others
        from a worker thread. A failure is logged, and the others are closed still."""
        loop = asyncio.get_running_loop()
        with self._lock:
            hosted, self._hubs = self._hubs, {}
            self._loop_gates.clear()
        for key, found in hosted.items():
            try:
                if found.loop is loop:
                    await found.hub.close()
                else:
                    await asyncio.to_thread(found.close, 60.0)
            except Exception as exc:
                log.warning("closing hub %r failed: %s", key, exc)

    def _hosted(self, key: str) -> _Hosted | None:
        with self._lock:
            return self._hubs.get(key)

    def _loop_gate(self, key: str, loop: asyncio.AbstractEventLoop) -> asyncio.Lock:
        """The lock the tasks of ``loop`` starting the hub of ``key`` take turns on."""
        with self._lock:
            gate = self._loop_gates.get(key)
            # a gate left by a failed start on a loop that is gone or idle is taken over
            if (
                gate is None
                or gate[0].is_closed()
                or (gate[0] is not loop and not gate[1].locked())
            ):
                gate = self._loop_gates[key] = (loop, asyncio.Lock())
        if gate[0] is not loop:
            raise _other_loop(key)
        return gate[1]

    def _keep(self, key: str, hosted: _Hosted) -> _Hosted:
        with self._lock:
            self._hubs[key] = hosted
            self._loop_gates.pop(key, None)
            arm, self._exit_armed = not self._exit_armed, True
        if arm:
            _at_exit(self.close_hubs)
        return hosted


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _other_loop(key: str) -> UsageError:
    return UsageError(
        f"hub {key!r} was started on another event loop, and a loop_hub serves only its own "
        f"loop; close it first (close_hub), or host it with process_hub to share it"
    )


def _at_exit(fn: Callable[[], None]) -> None:
    """Run ``fn`` when the interpreter exits normally, before it shuts its thread pools.

    ``atexit`` callbacks run after ``concurrent.futures`` has refused new work, so a hub
    whose close awaits ``asyncio.to_thread`` could not close there; threading's own exit
    hooks run before that, in reverse order of registration (``concurrent.futures``
    registered its hook on import, above).
    """
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(fn)
            return
        except RuntimeError:  # the interpreter is already shutting down its threads
            pass
    atexit.register(fn)


#: the process's hosting; the functions below are its methods
HOSTING = HubHosting()
process_hub = HOSTING.process_hub
loop_hub = HOSTING.loop_hub
hosted_hub = HOSTING.hosted_hub
close_hub = HOSTING.close_hub
close_hubs = HOSTING.close_hubs
aclose_hubs = HOSTING.aclose_hubs
