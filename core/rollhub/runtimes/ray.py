"""``ray``: rollouts as calls on a pool of async Ray actors, for clusters without AWS.

Each actor loads the user's RolloutApp once and runs rollouts through the app's own runner
(:mod:`rollhub.runtimes.ray_actor`), so results are the same documents in the same store.
Sessions go to the least-loaded actor. A rollout whose actor dies (its node is lost, its
process is killed) is reported lost, and a fresh actor replaces the dead one.

Ray is optional (``pip install 'rollhub[ray]'``) and imported only when the runtime starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field

from rollhub.errors import ConfigError, SubmissionError
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.runtime import Runtime, RuntimeOptions

__all__ = ["RayRuntime", "RayRuntimeOptions"]

log = logging.getLogger(__name__)

#: the actors' concurrency group for start and cancel calls, and its size
CONTROL = "control"
CONTROL_SLOTS = 16


class RayRuntimeOptions(RuntimeOptions):
    """``[runtime]`` options of the ``ray`` runtime."""

    app: str = Field(description="the RolloutApp: 'path/to/agent.py:app' or 'pkg.module:app'")
    address: str | None = Field(
        None, description="Ray cluster address (None: the current or a new local one)"
    )
    actors: int = Field(2, ge=1, description="rollout actors")
    max_concurrency_per_actor: int = Field(64, ge=1, description="rollouts one actor runs at once")
    num_cpus_per_actor: float = Field(0.0, ge=0, description="CPUs Ray reserves per actor")
    env: dict[str, str] = Field(
        default_factory=dict, description="environment variables of the actors"
    )


@dataclass
class _Actor:
    index: int
    handle: Any
    sessions: dict[str, Any] = field(default_factory=dict)  # session id -> ObjectRef
    alive: bool = True


class RayRuntime(Runtime):
    """A pool of Ray actors serving the user's app.

    :param options: :class:`RayRuntimeOptions`, or its fields as keywords.
    :param base_dir: directory a relative ``app`` path is resolved against.
    """

    name: ClassVar[str] = "ray"
    Options: ClassVar[type[RuntimeOptions]] = RayRuntimeOptions

    def __init__(
        self, options: RayRuntimeOptions | None = None, *, base_dir: Any = None, **fields: Any
    ) -> None:
        super().__init__(options, **fields)
        self.options: RayRuntimeOptions
        self._base_dir = base_dir
        self._actors: list[_Actor] = []
        self._where: dict[str, _Actor] = {}
        self._watchers: set[asyncio.Task[Any]] = set()
        self._remote_cls: Any = None
        self._inited_ray = False
        self._started = False
        self._next = 0
        #: actors created so far, replacements included
        self.actors_started = 0

    @property
    def loopback_callbacks(self) -> bool:  # type: ignore[override]
        """Callbacks to 127.0.0.1 reach this process only on a cluster of this machine."""
        addr = self.options.address
        return (
            addr is None or addr in ("local", "auto") or addr.startswith(("127.0.0.1", "localhost"))
        )

    @property
    def app_ref(self) -> str:
        """The app reference with a relative file path made absolute."""
        from rollhub.runtimes.local import LocalRuntime

        return LocalRuntime(app=self.options.app, base_dir=self._base_dir).app_ref

    async def start(self) -> None:
        """Connect to (or start) Ray and create the actors."""
        if self._started:
            return
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("the ray runtime needs Ray: pip install 'rollhub[ray]'") from exc
        from rollhub.runtimes.ray_actor import RolloutActor

        if not ray.is_initialized():
            env = {"env_vars": dict(self.options.env)} if self.options.env else None
            await asyncio.to_thread(
                ray.init, address=self.options.address, runtime_env=env, log_to_driver=False
            )
            self._inited_ray = True
        # Starts and cancels run in their own group, so they are served even when every
        # rollout slot of the default group is waiting on a long rollout.
        # ray.remote accepts concurrency_groups, but its typed overloads leave the option out
        remote: Callable[..., Any] = ray.remote
        self._remote_cls = remote(concurrency_groups={CONTROL: CONTROL_SLOTS})(RolloutActor)
        self._started = True
        try:
            self._actors = list(
                await asyncio.gather(*(self._spawn() for _ in range(self.options.actors)))
            )
        except BaseException:
            await self.close()
            raise

    async def _spawn(self) -> _Actor:
        index, self._next = self._next, self._next + 1
        handle = self._remote_cls.options(
            max_concurrency=self.options.max_concurrency_per_actor,
            num_cpus=self.options.num_cpus_per_actor,
        ).remote(self.app_ref)
        await handle.ready.remote()
        self.actors_started += 1
        return _Actor(index, handle)

    async def submit(self, request: RolloutRequest) -> SubmitReceipt:
        """Call ``run`` on the least-loaded actor; returns at once."""
        if not self._started:
            raise SubmissionError("the ray runtime is not started", transient=False)
        live = [a for a in self._actors if a.alive]
        if not live:
            raise SubmissionError(
                "no ray actor is alive; replacements are starting", transient=True
            )
        actor = min(live, key=lambda a: len(a.sessions))
        sid = request.rollout.session_id
        actor.sessions[sid] = None
        self._where[sid] = actor
        try:
            # Like POST /invocations: the receipt comes once the actor has started the
            # rollout, so a cancel right after it always finds the session.
            location = await actor.handle.start.options(concurrency_group=CONTROL).remote(
                request.to_wire()
            )
            ref = actor.handle.wait.remote(sid)
        except Exception as exc:
            self._forget(sid)
            error = _submit_error(exc, actor.index, sid)
            if error.transient:
                self._track(self._replace(actor))
            raise error from exc
        actor.sessions[sid] = ref
        self._track(self._watch(actor, sid, ref))
        return SubmitReceipt(
            session_id=sid,
            result_location=str(location),
            runtime=self.name,
            details={"actor": actor.index},
        )

    def _track(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _watch(self, actor: _Actor, sid: str, ref: Any) -> None:
        import ray

        try:
            await ref
        except (
            ray.exceptions.RayActorError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.ObjectLostError,
        ) as exc:
            self._forget(sid)
            self._report_lost(sid, f"ray actor {actor.index} died: {type(exc).__name__}")
            await self._replace(actor)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a rollhub bug inside run(): no result will come
            log.error("ray rollout %s failed outside the handler: %s", sid, exc)
            self._forget(sid)
            self._report_lost(sid, f"ray rollout failed: {type(exc).__name__}: {exc}")
            return
        self._forget(sid)

    async def _replace(self, actor: _Actor) -> None:
        if not actor.alive or not self._started:
            return
        actor.alive = False
        with contextlib.suppress(ValueError):
            self._actors.remove(actor)
        log.warning("ray actor %d died; starting a replacement", actor.index)
        try:
            self._actors.append(await self._spawn())
        except Exception as exc:
            log.error("replacing ray actor %d failed: %s", actor.index, exc)

    async def cancel(self, session_id: str) -> None:
        """Cancel the rollout in its actor and wait until its result is stored."""
        actor = self._where.get(session_id)
        if actor is None or not actor.alive:
            return
        try:
            await actor.handle.cancel.options(concurrency_group=CONTROL).remote(session_id)
        except Exception as exc:
            log.debug("cancel of %s failed: %s", session_id, exc)

    async def finish(self, session_id: str) -> None:
        """The result is stored and the actor's run ended on its own: nothing to free."""
        self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        actor = self._where.pop(session_id, None)
        if actor is not None:
            actor.sessions.pop(session_id, None)

    def load(self) -> dict[int, int]:
        """Rollouts in flight per live actor."""
        return {a.index: len(a.sessions) for a in self._actors if a.alive}

    async def close(self) -> None:
        """Kill the actors; shut Ray down if this runtime started it."""
        if not self._started:
            return
        self._started = False
        import ray

        for task in list(self._watchers):
            task.cancel()
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle)
        self._actors.clear()
        self._where.clear()
        if self._inited_ray:
            await asyncio.to_thread(ray.shutdown)
            self._inited_ray = False


def _submit_error(exc: Exception, index: int, sid: str) -> SubmissionError:
    """A failed start: a dead actor may be replaced (transient); a refused payload is not."""
    import ray

    dead = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)
    if isinstance(exc, dead):
        return SubmissionError(f"ray actor {index} is gone: {exc}", transient=True, session_id=sid)
    cause = getattr(exc, "cause", None) or exc
    return SubmissionError(
        f"ray actor {index} refused session {sid}: {type(cause).__name__}: {cause}",
        transient=False,
        session_id=sid,
    )
