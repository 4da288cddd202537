"""One started :class:`~rollhub.hub.AsyncHub` per verl agent-loop worker process.

verl builds a new agent-loop object for every row, in ``AgentLoopWorker`` processes that
live for the whole training run. The hub (runtime workers, result store, in-process
gateway) is started once per process, lazily on the first row, on the worker's event
loop, and closed when the process exits. The gateway's sampling backend is ``verl``
(:mod:`rollhub_verl.backend`), bound to the worker's own server client.

What the worker changes in the user's ``rollhub.toml`` (everything else is as written):

- ``[token_source]`` must be the in-process ``gateway``; its engine becomes ``verl``, its
  ``model`` defaults to verl's model directory (same tokenizer, same chat template), and
  its policy caps each call at ``response_length`` tokens and ``prompt_length +
  response_length`` of context unless the file sets those limits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig, TokenSourceSection, load_config
from rollhub.errors import ConfigError
from rollhub.hub import AsyncHub
from rollhub.markers import hookimpl

from rollhub_verl.backend import bind_server, binding
from rollhub_verl.checks import check_verl_config
from rollhub_verl.outputs import Budget
from rollhub_verl.trainer import VerlOptions, inside_agent_loop

log = logging.getLogger(__name__)

__all__ = ["WorkerHub", "hub_for", "verl_sampling"]


@dataclass
class _Bound:
    """verl's sampling parameters of one row and the sessions they were bound to."""

    params: dict[str, Any]
    sessions: list[str]


#: the row whose episode is being submitted in this context
_SAMPLING: contextvars.ContextVar[_Bound | None] = contextvars.ContextVar(
    "rollhub_verl_sampling", default=None
)


@dataclass
class WorkerHub:
    """The started hub of this process and the verl options it was built with."""

    hub: AsyncHub
    options: VerlOptions
    loop: asyncio.AbstractEventLoop


_HUBS: dict[str, WorkerHub] = {}
_LOCK: asyncio.Lock | None = None


@contextmanager
def verl_sampling(params: dict[str, Any]) -> Iterator[None]:
    """Episodes submitted in this block sample with verl's ``params`` (see the backend);
    the binding ends with the block, whether the episode finished or was cancelled."""
    bound = _Bound(dict(params), [])
    token = _SAMPLING.set(bound)
    try:
        yield
    finally:
        _SAMPLING.reset(token)
        for sid in bound.sessions:
            binding().sessions.pop(sid, None)


class _SessionSampling:
    """Hook of the worker's hub: bind the row's verl sampling to the session it opens."""

    @hookimpl
    def rollhub_prepare_rollout(self, request: Any) -> None:
        bound = _SAMPLING.get()
        if bound is not None:
            sid = request.rollout.session_id
            bound.sessions.append(sid)
            binding().sessions[sid] = bound.params


async def hub_for(
    config_path: str, *, server: Any, budget: Budget, model_dir: Callable[[], str | None]
) -> WorkerHub:
    """The started hub for ``config_path`` in this process (started on first use).

    :param model_dir: verl's model as a local directory (called only to start the hub).
    """
    global _LOCK
    bind_server(server)
    key = str(Path(config_path).resolve())
    found = _HUBS.get(key)
    if found is not None:
        return found
    if _LOCK is None:
        _LOCK = asyncio.Lock()
    async with _LOCK:
        found = _HUBS.get(key)
        if found is not None:
            return found
        cfg = worker_config(load_config(key), budget=budget, model_dir=model_dir())
        options = VerlOptions.model_validate(cfg.trainer.options)
        hub = AsyncHub(cfg)
        hub.host.register(_SessionSampling(), name="rollhub_verl.session_sampling", source="code")
        with inside_agent_loop():
            await hub.start()
        entry = WorkerHub(hub, options, asyncio.get_running_loop())
        _HUBS[key] = entry
        if len(_HUBS) == 1:
            atexit.register(close_all_sync)
        log.info("rollhub hub started in verl agent-loop worker for %s", key)
        return entry


def worker_config(cfg: RollhubConfig, *, budget: Budget, model_dir: str | None) -> RollhubConfig:
    """The user's config with the worker's gateway settings (see the module docstring).

    :raises ConfigError: the trainer is not ``verl``, or see
        :func:`~rollhub_verl.checks.check_verl_config`.
    """
    if cfg.trainer.name != "verl":
        raise ConfigError(
            f"trainer.name is {cfg.trainer.name!r} but the rollhub agent loop runs under verl; "
            f"set [trainer] name = 'verl'",
            field="trainer.name",
        )
    check_verl_config(cfg)
    opts = dict(cfg.token_source.options)
    engine = dict(opts.get("engine") or {})
    engine["name"] = "verl"
    opts["engine"] = engine
    if "model" not in opts:
        if model_dir is None:
            raise ConfigError(
                "token_source.model is not set and verl's model path is not a local directory; "
                "set token_source.model to a directory holding the model's tokenizer",
                field="token_source.model",
            )
        opts["model"] = model_dir
    policy = dict(opts.get("policy") or {})
    policy.setdefault("max_tokens_cap", budget.response_length)
    policy.setdefault("max_context_tokens", budget.prompt_length + budget.response_length)
    opts["policy"] = policy
    cfg = cfg.model_copy(deep=True)
    cfg.token_source = TokenSourceSection(name="gateway", **opts)
    return cfg


async def close_all() -> None:
    """Close every hub of this process (idempotent)."""
    while _HUBS:
        _, entry = _HUBS.popitem()
        try:
            await entry.hub.close()
        except Exception as exc:  # closing at exit: report and go on with the others
            log.warning("closing the rollhub hub failed: %s", exc)


def close_all_sync(timeout_s: float = 60.0) -> None:
    """Close the hubs from outside their loop (interpreter exit)."""
    for key, entry in list(_HUBS.items()):
        loop = entry.loop
        if loop.is_closed():
            _HUBS.pop(key, None)
            continue
        try:
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(entry.hub.close(), loop).result(timeout_s)
            else:
                loop.run_until_complete(entry.hub.close())
        except Exception as exc:  # the process is ending; workers are reaped with it
            log.warning("closing the rollhub hub at exit failed: %s", exc)
        _HUBS.pop(key, None)
