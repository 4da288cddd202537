"""A hub that starts and closes in no time (a runtime with nothing behind it), and a plugin
that records on which event loop, and in which context, the hub started and stopped."""

from __future__ import annotations

import asyncio
import contextvars
from pathlib import Path
from typing import Any, ClassVar

from rollhub import hookimpl
from rollhub.config import RollhubConfig, parse_config
from rollhub.plugins import PluginHost, build_host
from rollhub.runtime import Runtime

#: set by callers; the recorder notes its value where the hub starts
CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("hosting_caller", default="-")


class IdleRuntime(Runtime):
    """Starts and closes; runs nothing."""

    name: ClassVar[str] = "idle"

    async def submit(self, request: Any) -> Any:
        raise NotImplementedError("the idle runtime runs nothing")

    async def cancel(self, session_id: str) -> None:
        return None


class Recorder:
    """Registers :class:`IdleRuntime`; records each start and stop of a hub.

    :param marker: a file the stop hook writes through ``asyncio.to_thread`` (as close
        paths of real components do: the S3 store, the Ray and AgentCore runtimes).
    :param fail: the stop hook raises after recording.
    :param fail_start: the start hook raises after it yielded (as a gateway that did not
        come up), before recording.
    """

    def __init__(
        self, *, marker: Path | None = None, fail: bool = False, fail_start: bool = False
    ) -> None:
        self.started: list[tuple[asyncio.AbstractEventLoop, str]] = []
        self.stopped: list[asyncio.AbstractEventLoop] = []
        self.marker = marker
        self.fail = fail
        self.fail_start = fail_start

    @hookimpl
    def rollhub_register_components(self, registry: Any) -> None:
        registry.add_runtime(IdleRuntime)

    @hookimpl
    async def rollhub_hub_started(self, hub: Any) -> None:
        await asyncio.sleep(0.05)  # a start that yields, so concurrent callers overlap
        if self.fail_start:
            raise RuntimeError("the gateway did not come up")
        self.started.append((asyncio.get_running_loop(), CALLER.get()))

    @hookimpl
    async def rollhub_hub_stopped(self, hub: Any, stats: Any) -> None:
        self.stopped.append(asyncio.get_running_loop())
        if self.marker is not None:
            await asyncio.to_thread(self.marker.write_text, "closed")
        if self.fail:
            raise RuntimeError("closing failed on purpose")


def idle_config(root: Path, name: str = "hosted") -> RollhubConfig:
    return parse_config(
        {
            "experiment": {"name": name, "progress": False},
            "runtime": {"name": "idle"},
            "store": {"url": f"file://{root / 'store'}"},
            "trainer": {"name": "export", "formats": ["jsonl"]},
        },
        env={},
    )


def idle_host(recorder: Recorder) -> PluginHost:
    return build_host(entry_points=False, plugins=[recorder])
