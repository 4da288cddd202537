"""One started :class:`~rollhub.hubs.async_hub.AsyncHub` per verl agent-loop worker process.

verl builds a new agent-loop object for every row, in ``AgentLoopWorker`` processes that
live for the whole training run. The hub (runtime workers, result store, in-process
gateway) is hosted by :func:`rollhub.hubs.hosted.loop_hub`: started once per process and
config file, lazily on the first row, on the worker's event loop (verl's server client
belongs to it, and the row's sampling binding is a context variable the hub's hooks read),
and closed when the process exits. The gateway's sampling backend is ``verl``
(:mod:`rollhub_verl.backend`), bound to the worker's own server client.

What the worker changes in the user's ``rollhub.toml`` (everything else is as written):

- ``[token_source]`` must be the in-process ``gateway``; its engine becomes ``verl``, its
  ``model`` defaults to verl's model directory (same tokenizer, same chat template), and
  its policy caps each call at ``response_length`` tokens and ``prompt_length +
  response_length`` of context unless the file sets those limits.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig, TokenSourceSection, load_config
from rollhub.errors import ConfigError
from rollhub.hubs.async_hub import AsyncHub
from rollhub.hubs.hosted import loop_hub
from rollhub.plugin_host.markers import hookimpl
from rollhub.rollout import RolloutRequest

from rollhub_verl.backend import bind_server, binding
from rollhub_verl.checks import check_verl_config
from rollhub_verl.outputs import Budget
from rollhub_verl.trainer import inside_agent_loop
from rollhub_verl.verl_types import ServerClient

log = logging.getLogger(__name__)

__all__ = ["hub_for", "hub_key", "verl_sampling", "worker_config"]


@dataclass
class _Bound:
    """verl's sampling parameters of one row and the sessions they were bound to."""

    params: dict[str, Any]
    sessions: list[str]


#: the row whose episode is being submitted in this context
_SAMPLING: contextvars.ContextVar[_Bound | None] = contextvars.ContextVar(
    "rollhub_verl_sampling", default=None
)


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
    def rollhub_prepare_rollout(self, request: RolloutRequest) -> None:
        bound = _SAMPLING.get()
        if bound is not None:
            sid = request.rollout.session_id
            bound.sessions.append(sid)
            binding().sessions[sid] = bound.params


def hub_key(config_path: str | Path) -> str:
    """The hosting key of the worker hub for ``config_path`` (one per config file)."""
    return f"rollhub_verl:{Path(config_path).resolve()}"


async def hub_for(
    config_path: str, *, server: ServerClient, budget: Budget,
    model_dir: Callable[[], str | None],
) -> AsyncHub:
    """The started hub for ``config_path`` in this process, on this worker's event loop
    (built and started on first use; see :func:`rollhub.hubs.hosted.loop_hub`).

    :param model_dir: verl's model as a local directory (called only to start the hub).
    """
    bind_server(server)
    path = Path(config_path).resolve()

    def build() -> AsyncHub:
        cfg = worker_config(load_config(path), budget=budget, model_dir=model_dir())
        hub = AsyncHub(cfg)
        hub.host.register(_SessionSampling(), name="rollhub_verl.session_sampling", source="code")
        return hub

    with inside_agent_loop():
        return await loop_hub(hub_key(path), build)


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
