"""Test plugin: records every generation the gateway's sampling backend returns.

Loaded through ``[plugins] modules``; wraps the in-process gateway's backend once the hub
has started, so the end-to-end test can compare traces with what the engine sampled.
"""

from __future__ import annotations

import contextvars
from typing import Any

from rollhub import hookimpl
from rollhub.sampling import Generation

GENERATIONS: list[tuple[list[int], Generation]] = []

# A backend's generate() may be built on its own stream(); record the outer call only.
_INSIDE = contextvars.ContextVar("recording_inside", default=False)


@hookimpl
def rollhub_hub_started(hub: Any) -> None:
    backend = hub.token_source.gateway.backend
    generate, stream = backend.generate, backend.stream

    async def recording_generate(prompt_ids, params, **kw):
        outer = not _INSIDE.get()
        token = _INSIDE.set(True)
        try:
            gen = await generate(prompt_ids, params, **kw)
        finally:
            _INSIDE.reset(token)
        if outer:
            GENERATIONS.append((list(prompt_ids), gen))
        return gen

    async def recording_stream(prompt_ids, params, **kw):
        outer = not _INSIDE.get()
        async for item in stream(prompt_ids, params, **kw):
            if outer and isinstance(item, Generation):
                GENERATIONS.append((list(prompt_ids), item))
            yield item

    backend.generate = recording_generate
    backend.stream = recording_stream
