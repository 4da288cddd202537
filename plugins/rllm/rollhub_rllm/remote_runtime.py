"""An rLLM remote agent runtime that runs each task as a rollhub rollout.

rLLM's unified trainer (``rllm.remote_runtime.enabled: true``) hands a
``RemoteAgentRuntime`` one ``TaskSubmission`` per rollout: the task row, a session id, the
GRPO group key (``task_id``) and the URL of that session in rLLM's own rllm-model-gateway.
:class:`RollhubRemoteRuntime` implements that protocol (``initialize()``,
``async execute_tasks(submissions, timeout=None)``, ``shutdown()``) on rollhub's rollout
client: each task goes to the runtime a ``rollhub.toml`` names (``local``, ``agentcore``,
``ray``) with the session URL as the agent's model endpoint (``_rollout.base_url``), and
its terminal outcome becomes exactly one ``RemoteTaskResult``:

=================  =========  ==========================================================
rollhub status     finished   termination_reason
=================  =========  ==========================================================
``ok``             True       ``env_done`` (or the agent's own ``termination_reason``)
``timeout``        False      ``timeout``
``agent_error``    False      ``error`` (the agent raised)
``infra_error``    False      ``error`` (every session was lost to the infrastructure)
``submit_error``   False      ``error``
``cancelled``      False      ``error``
=================  =========  ==========================================================

The reward is the result's ``rewards`` (the last element of a list), as rLLM's AgentCore
runtime reads it. Tokens are not touched here: rLLM reads them from its own gateway.

rLLM picks runtimes by name in a closed factory, so :func:`install` teaches it one more
name (``backend: rollhub``); see ``docs/backends/rllm.md``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from rollhub.client import AsyncRolloutClient, RolloutOutcome
from rollhub.config import RollhubConfig, load_config, parse_config
from rollhub.errors import ConfigError, UsageError
from rollhub.lifetimes.loop_thread import LoopThread
from rollhub.plugin_host.components import build_component, component_context, open_config_store
from rollhub.plugins import PluginHost, build_host
from rollhub.rollout import validate_key_part

from rollhub_rllm.protocol import (
    RllmTypes,
    Submission,
    TaskResult,
    rllm_types,
    termination_value,
)

__all__ = ["RollhubRemoteRuntime", "install", "key_part", "task_result"]

log = logging.getLogger(__name__)

ConfigLike: TypeAlias = RollhubConfig | Mapping[str, Any] | str | os.PathLike[str]


class RollhubRemoteRuntime:
    """rLLM ``RemoteAgentRuntime`` backed by a rollhub runtime and result store.

    :param config: a ``rollhub.toml`` path, its parsed data or a :class:`RollhubConfig`;
        its ``[runtime]`` and ``[store]`` sections are used.
    :param exp_id: rLLM's experiment name (default: the config's experiment id).
    :param model_id: the model name agents send (rLLM's ``model.name``).
    :param session_timeout: deadline of one task when ``execute_tasks`` gets no timeout.
    :param api_key: the key agents get for the session URL (rLLM's gateway checks none).
    :param host: a plugin host (default: built-ins and installed plugins).
    """

    def __init__(
        self,
        config: ConfigLike,
        *,
        exp_id: str = "",
        model_id: str = "",
        session_timeout: float = 900.0,
        api_key: str = "rllm",
        host: PluginHost | None = None,
    ) -> None:
        if isinstance(config, RollhubConfig):
            self.config = config
        elif isinstance(config, Mapping):
            self.config = parse_config(config, env={})
        else:
            self.config = load_config(config)
        self.exp_id = key_part(exp_id or self.config.experiment.resolved_exp_id)
        self.model_id = model_id or None
        self.session_timeout = session_timeout
        self.api_key = api_key
        self._host = host
        self._loop: LoopThread | None = None
        self._client: AsyncRolloutClient | None = None
        self._types: RllmTypes = rllm_types()  # (RemoteTaskResult, TerminationReason)

    # The RemoteAgentRuntime protocol -------------------------------------------------------

    def initialize(self) -> None:
        """Build and start the rollhub runtime and client on a private event loop."""
        if self._loop is not None:
            return
        loop = LoopThread("rollhub-rllm-runtime")
        try:
            # not LoopThread.run: rLLM may call this from inside its own running loop
            asyncio.run_coroutine_threadsafe(self._start(), loop.loop).result()
        except BaseException:
            loop.stop()
            raise
        self._loop = loop
        log.info("rollhub remote runtime started (%s runtime)", self.config.runtime.name)

    async def execute_tasks(
        self, submissions: Sequence[Submission], timeout: float | None = None
    ) -> list[TaskResult]:
        """Run every submission concurrently; one ``RemoteTaskResult`` each, in order.

        Never raises for a failed task: failures are results with ``finished=False``.

        :raises UsageError: :meth:`initialize` was not called.
        """
        if self._loop is None:
            raise UsageError("call initialize() before execute_tasks()")
        coro = self._run_all(
            list(submissions), self.session_timeout if timeout is None else timeout
        )
        return await self._loop.run_async(coro)

    def shutdown(self) -> None:
        """Cancel what still runs, stop the rollhub runtime and the private loop. Idempotent."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop.loop).result(60)
        finally:
            self._client = None
            loop.stop()

    # Internals ------------------------------------------------------------------------------

    async def _start(self) -> None:
        cfg = self.config
        host = self._host or build_host(modules=cfg.plugins.modules, search_dir=cfg.base_dir)
        # the hub's own path: registry, ComponentContext, absolute file:// store
        store = open_config_store(cfg, host.registry)
        runtime = build_component(
            host.registry, cfg, "runtime", component_context(cfg, exp_id=self.exp_id)
        )
        defaults: dict[str, Any] = {"api_key": self.api_key}
        if self.model_id:
            defaults["model_id"] = self.model_id
        client = AsyncRolloutClient(
            runtime, store, exp_id=self.exp_id, defaults=defaults, close_runtime=True,
            progress=False,
        )  # fmt: skip
        try:
            await client.start()
        except BaseException:
            await client.close()
            raise
        self._client = client

    async def _close(self) -> None:
        try:
            if self._client is not None:
                await self._client.close()
        finally:
            # the loop is about to stop: end what the runtime left behind (e.g. a worker
            # being replaced) instead of abandoning it mid-await
            left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)

    async def _run_all(self, subs: list[Submission], timeout: float) -> list[TaskResult]:
        seen: set[str] = set()
        jobs = []
        for sub in subs:
            sid = str(sub.session_id)
            jobs.append(self._run_one(sub, timeout, duplicate=sid in seen))
            seen.add(sid)
        return list(await asyncio.gather(*jobs))

    async def _run_one(self, sub: Submission, timeout: float, *,
                       duplicate: bool) -> TaskResult:
        result_cls, reason = self._types
        t0 = time.monotonic()
        try:
            if duplicate:
                raise UsageError(f"session_id {sub.session_id!r} was submitted twice in one batch")
            assert self._client is not None
            request = self._client.request(
                dict(sub.task),
                input_id=key_part(str(sub.task_id)),
                session_id=key_part(str(sub.session_id)),
                base_url=sub.inference_url,
            )
            future = await self._client.submit_request_async(request, timeout=timeout)
            outcome = await future.result_async()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("task %s could not run: %s", sub.session_id, exc)
            return result_cls(
                finished=False,
                session_id=sub.session_id,
                task_id=sub.task_id,
                error=f"{type(exc).__name__}: {exc}",
                termination_reason=reason.ERROR,
                elapsed=time.monotonic() - t0,
                metadata={"rollhub_status": "submit_error"},
            )
        return task_result(sub, outcome, elapsed=time.monotonic() - t0, types=self._types)


def task_result(
    submission: Submission,
    outcome: RolloutOutcome,
    *,
    elapsed: float | None = None,
    types: RllmTypes | None = None,
) -> TaskResult:
    """The ``RemoteTaskResult`` of one rollout's terminal outcome (see the module table)."""
    result_cls, reason = types or rllm_types()
    meta = {"rollhub_status": outcome.status, "result_key": outcome.result_key,
            "attempts": outcome.attempts}  # fmt: skip
    took = outcome.elapsed if outcome.elapsed is not None else (elapsed or 0.0)
    common = {"session_id": submission.session_id, "task_id": submission.task_id,
              "elapsed": float(took), "metadata": meta}  # fmt: skip
    ended = reason(termination_value(outcome.status, outcome.result))
    if outcome.status == "ok":
        result = dict(outcome.result or {})
        return result_cls(
            finished=True,
            reward=_reward(result.get("rewards")),
            termination_reason=ended,
            raw_result=result,
            **common,
        )
    err = outcome.error
    message = f"{err.type}: {err.message}" if err else outcome.status
    return result_cls(
        finished=False,
        error=message,
        termination_reason=ended,
        # the keys rLLM copies into the episode's error info
        raw_result={
            "status": outcome.status,
            "stop_reason": message,
            "traceback": err.traceback if err else None,
        },
        **common,
    )


def _reward(value: object) -> float | None:
    if isinstance(value, list):
        value = value[-1] if value else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def key_part(value: str) -> str:
    """``value`` when it is a valid result-key part, else a stable digest of it."""
    try:
        return validate_key_part(value, "id")
    except ValueError:
        return "h-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def install(config: ConfigLike, *, backend: str = "rollhub", api_key: str = "rllm",
            host: PluginHost | None = None) -> None:
    """Make rLLM's ``create_remote_runtime`` build a :class:`RollhubRemoteRuntime` for ``backend``.

    Call it before rLLM's trainer is built; other backend names still reach rLLM's own
    factory. Installing twice replaces the first installation.

    :param api_key: passed to :class:`RollhubRemoteRuntime`.
    :param host: passed to :class:`RollhubRemoteRuntime`.
    :raises ConfigError: rLLM is not importable.
    """
    try:
        import rllm.engine.remote_runtime as remote_runtime
    except ImportError as exc:
        raise ConfigError(
            "rLLM is not installed (it is not on PyPI): pip install it from its repository, "
            "then call install() before building rLLM's trainer"
        ) from exc
    factory = remote_runtime.create_remote_runtime
    original = getattr(factory, "__rollhub_original__", factory)

    @functools.wraps(original)
    def create_remote_runtime(cfg: object, exp_id: str = "", model_id: str = "") -> object:
        if getattr(cfg, "backend", None) == backend:
            return RollhubRemoteRuntime(
                config, exp_id=exp_id, model_id=model_id,
                session_timeout=getattr(cfg, "session_timeout", 900.0), api_key=api_key,
                host=host,
            )  # fmt: skip
        return original(cfg, exp_id=exp_id, model_id=model_id)

    create_remote_runtime.__rollhub_original__ = original  # type: ignore[attr-defined]  # functions take attributes
    remote_runtime.create_remote_runtime = create_remote_runtime
    log.info("rLLM remote_runtime.backend=%r now runs tasks through rollhub", backend)
