"""The backend learns which session and turn it serves; versions are those of the sampler."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
from rollhub.sampling import Generation, SamplingBackend, SamplingParams, TurnContext
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway

USER = [{"role": "user", "content": "hi"}]


async def test_backend_gets_session_and_turn_index(gateway, scripted, ids, helpers):
    s = gateway.open_session("ctx-1")
    gateway.set_weight_version(4)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    scripted.add(ids("one"), ids("two"))
    first = await client.chat.completions.create(model="m", messages=USER)
    history = [
        *USER,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "more"},
    ]
    stream = await client.chat.completions.create(model="m", messages=history, stream=True)
    async for _ in stream:
        pass
    assert scripted.turns == [TurnContext("ctx-1", 0, 4), TurnContext("ctx-1", 1, 4)]


class GatedBackend(ScriptedBackend):
    """Holds each generation until released; may report its own weight version."""

    def __init__(self, reported: int | None = None) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.reported = reported

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        self.started.set()
        await self.release.wait()
        gen = await super().generate(prompt_ids, params, turn=turn)
        return Generation(gen.token_ids, gen.logprobs, gen.finish_reason, self.reported)


async def _one_turn_during_update(chat_model: Any, config: Any, ids: Any, reported: int | None):
    backend = GatedBackend(reported)
    backend.add(ids("slow"))
    gw = Gateway(backend, chat_model, config)
    await gw.start()
    try:
        gw.set_weight_version(1)
        s = gw.open_session("upd")
        client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
        call = asyncio.ensure_future(client.chat.completions.create(model="m", messages=USER))
        await backend.started.wait()
        gw.set_weight_version(2)  # the trainer published new weights mid-turn
        backend.release.set()
        await call
        return gw.traces("upd")[0].turns[0].weight_version
    finally:
        await gw.close()


async def test_turn_in_flight_during_update_keeps_the_version_it_started_with(
    chat_model, config, ids
):
    assert await _one_turn_during_update(chat_model, config, ids, reported=None) == 1


async def test_backend_reported_version_wins(chat_model, config, ids):
    assert await _one_turn_during_update(chat_model, config, ids, reported=7) == 7


async def test_backends_without_turn_keyword_still_serve(chat_model, config, ids, caplog):
    """Backends written before ``turn=`` existed: both methods, or only generate (then the
    base class's stream calls it with ``turn=``)."""

    class Legacy(ScriptedBackend):
        async def generate(self, prompt_ids, params):  # type: ignore[override]
            return await super().generate(prompt_ids, params)

        def stream(self, prompt_ids, params):  # type: ignore[override]
            return super().stream(prompt_ids, params)

    class OnlyGenerate(SamplingBackend):
        name = "only-generate"

        async def generate(self, prompt_ids, params):  # type: ignore[override]
            out = ids("ok")
            return Generation(out, [-0.5] * len(out), "stop")

    assert "Legacy.generate does not accept turn=" in caplog.text
    assert "OnlyGenerate.generate does not accept turn=" in caplog.text
    legacy = Legacy()
    legacy.add(ids("ok"), ids("ok"))
    for backend in (legacy, OnlyGenerate()):
        gw = Gateway(backend, chat_model, config)
        await gw.start()
        try:
            s = gw.open_session("legacy")
            client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
            out = await client.chat.completions.create(model="m", messages=USER)
            assert out.choices[0].message.content == "ok"
            stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            assert text == "ok"
        finally:
            await gw.close()
