"""Test plugin: records every generation the gateway's sampling backend returns.

Loaded through ``[plugins] modules``; wraps the in-process gateway's backend once the hub
has started, so the end-to-end test can compare traces with what the engine sampled.
"""

from __future__ import annotations

from typing import Any

from rollhub import hookimpl
from rollhub.sampling import Generation

GENERATIONS: list[tuple[list[int], Generation]] = []


@hookimpl
def rollhub_hub_started(hub: Any) -> None:
    backend = hub.token_source.gateway.backend
    generate, stream = backend.generate, backend.stream

    async def recording_generate(prompt_ids, params):
        gen = await generate(prompt_ids, params)
        GENERATIONS.append((list(prompt_ids), gen))
        return gen

    async def recording_stream(prompt_ids, params):
        async for item in stream(prompt_ids, params):
            if isinstance(item, Generation):
                GENERATIONS.append((list(prompt_ids), item))
            yield item

    backend.generate = recording_generate
    backend.stream = recording_stream
