"""A plugin implementing every rollhub hook; records each call with its argument types."""

from __future__ import annotations

import asyncio
from typing import Any

from rollhub import hookimpl

CALLS: list[tuple[str, dict[str, str]]] = []


def _record(name: str, **kwargs: Any) -> None:
    CALLS.append((name, {k: type(v).__name__ for k, v in kwargs.items()}))


@hookimpl
def rollhub_addhooks(pluginmanager):
    _record("rollhub_addhooks", pluginmanager=pluginmanager)


@hookimpl
def rollhub_register_components(registry):
    _record("rollhub_register_components", registry=registry)


@hookimpl
def rollhub_prepare_rollout(request, hub):
    _record("rollhub_prepare_rollout", request=request, hub=hub)

    async def _tag() -> None:
        await asyncio.sleep(0)
        request.payload["prepared_by"] = "everything"

    return _tag()


@hookimpl
def rollhub_submit_rollout(request, runtime, hub):
    _record("rollhub_submit_rollout", request=request, runtime=runtime, hub=hub)
    return None  # decline: the core default submits


@hookimpl
def rollhub_retrieve_tokens(episode, source, hub):
    _record("rollhub_retrieve_tokens", episode=episode, source=source, hub=hub)
    return None


@hookimpl
def rollhub_collect_rewards(episode, hub):
    _record("rollhub_collect_rewards", episode=episode, hub=hub)

    async def _bonus() -> dict[str, float]:
        return {"bonus": 0.5}

    return _bonus()


@hookimpl
def rollhub_collect_group_rewards(group, hub):
    _record("rollhub_collect_group_rewards", group=group, hub=hub)
    return {e.episode_id: {"rank": e.sample_index / 10} for e in group.episodes if e.ok}


@hookimpl
def rollhub_episode_done(episode, hub):
    _record("rollhub_episode_done", episode=episode, hub=hub)


@hookimpl
def rollhub_hub_started(hub):
    _record("rollhub_hub_started", hub=hub)


@hookimpl
def rollhub_hub_stopped(hub, stats):
    _record("rollhub_hub_stopped", hub=hub, stats=stats)
