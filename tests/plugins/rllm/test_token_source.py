"""The ``rllm`` token source end to end: a real rllm-model-gateway child process in front of
a real rollhub gateway (scripted engine, vLLM-style replies), real agents over HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI
from rollhub.errors import ConfigError, TokenRetrievalError
from rollhub.testing import make_hub
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_rllm import plugin
from rollhub_rllm.token_source import RllmSourceOptions, RllmTokenSource

from tests.plugins.rllm.rllm_source import MODEL, source_options

AGENT = Path(__file__).parent / "agents" / "tool_agent.py"


def hub_config(tmp_path: Path, upstream, **options) -> dict:
    return {
        "experiment": {"name": "rllm", "n_samples": 1, "timeout_s": 60, "progress": False},
        "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 1},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {"name": "rllm", **source_options(upstream, **options)},
        "trainer": {"name": "rllm"},
    }


def turns_of(records) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt ids, sampled ids, logprobs) of every call, in call order."""
    calls = sorted((c for r in records for c in r.calls()), key=lambda c: c.turn_index)
    return [(c.prompt_ids, c.completion_ids, c.logprobs) for c in calls]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_four_turn_tool_episode_has_the_engines_exact_ids(
    tmp_path, upstream, scripted, ids, stream
):
    outputs = [ids.tool_call("lookup", {"key": k}) for k in "abc"] + [ids.text("a, b and c.")]
    scripted.add(*outputs)
    hub = make_hub(hub_config(tmp_path, upstream), plugin, run_dir=tmp_path / "run")
    async with hub:
        hub.set_weight_version(3)
        group = await hub.run_group({"id": "q1", "stream": stream})
        await hub.trainer.consume(group)
    (episode,) = group.episodes
    assert episode.status == "ok", episode.error
    assert episode.result["lookups"] == ["a", "b", "c"]
    (record,) = episode.traces  # every prompt extended the one before: one record
    assert [t.turn_index for t in record.turns] == [0, 1, 2, 3]
    assert [t.drift for t in record.turns] == ["append"] * 4
    assert [t.weight_version for t in record.turns] == [3] * 4
    assert [t.finish_reason for t in record.turns] == ["tool_calls"] * 3 + ["stop"]
    # exactly what the engine was given and sampled, logprobs to the last bit
    assert turns_of(episode.traces) == upstream.calls
    for i, (_, sampled, logprobs) in enumerate(turns_of(episode.traces)):
        assert sampled == outputs[i]
        assert logprobs == [scripted_logprob(j, t) for j, t in enumerate(sampled)]
    assert episode.num_sampled_tokens == sum(map(len, outputs))
    # the tool results sit between the turns with loss mask 0
    gaps = [
        record.response_ids[a.end : b.start]
        for a, b in zip(record.turns, record.turns[1:], strict=False)
    ]
    assert all(gaps) and "b=98" in ids.tok.decode(gaps[1])
    assert [record.response_mask[t.start : t.end] for t in record.turns] == [
        [1] * len(o) for o in outputs
    ]
    # the rllm trainer wrote it as an rLLM episode: one step per call, the same ids
    (line,) = (tmp_path / "run" / "rllm_episodes.jsonl").read_text().splitlines()
    written = json.loads(line)
    assert (written["id"], written["termination_reason"], written["is_correct"]) == (
        "q1:0", "env_done", True,
    )  # fmt: skip
    steps = written["trajectories"][0]["steps"]
    assert [(s["prompt_ids"], s["response_ids"], s["logprobs"]) for s in steps] == upstream.calls
    # rllm-model-gateway asked the engine for logprobs and token ids
    assert all(r["logprobs"] is True and r["return_token_ids"] is True for r in upstream.requests)


async def _session(source, scripted, ids, sid: str) -> list[int]:
    """Two model calls, the second streamed; returns the final turn's expected ids."""
    first, last = ids.text(f"one {sid}"), ids.text(f"two {sid}")
    scripted.add(first, last)
    capture = await source.open_session(sid)
    async with AsyncOpenAI(base_url=capture.base_url, api_key=capture.api_key) as client:
        messages = [{"role": "user", "content": sid}]
        reply = await client.chat.completions.create(model=MODEL, messages=messages)
        messages += [reply.choices[0].message.model_dump(exclude_none=True),
                     {"role": "user", "content": "more"}]  # fmt: skip
        events = await client.chat.completions.create(model=MODEL, messages=messages, stream=True)
        async for _ in events:
            pass
    return last


async def test_200_sessions_in_a_row_never_miss_the_final_turn(source, scripted, ids):
    # every trace write is asynchronous here (sync_traces off, and the second call streams)
    start = time.monotonic()
    for i in range(200):
        sid = f"row-{i}"
        last = await _session(source, scripted, ids, sid)
        records = await source.fetch_traces(sid)  # read right after the last reply
        calls = turns_of(records)
        assert len(calls) == 2, sid
        assert calls[-1][1] == last
        assert calls[-1][2] == [scripted_logprob(j, t) for j, t in enumerate(last)]
        await source.close_session(sid)
    assert time.monotonic() - start < 120
    assert source.stats["reads"] == 200


async def test_a_trace_that_never_arrives_fails_the_episode(upstream, scripted, ids):
    src = RllmTokenSource(RllmSourceOptions(**source_options(upstream, trace_wait_s=0.5)))
    await src.start()
    try:
        capture = await src.open_session("lost")
        upstream.garble_next = 1  # a 200 reply the gateway cannot build a trace from
        async with httpx.AsyncClient() as http:
            resp = await http.post(
                f"{capture.base_url}/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
            )
        assert resp.status_code == 200
        t0 = time.monotonic()
        with pytest.raises(TokenRetrievalError, match=r"got 1 answered model call\(s\) but "
                           r"rllm-model-gateway holds 0 trace\(s\)") as err:  # fmt: skip
            await src.fetch_traces("lost")
        assert 0.5 <= time.monotonic() - t0 < 5
        assert (err.value.expected, err.value.got) == (1, 0)
    finally:
        await src.close()


async def test_error_replies_are_not_turns(source, upstream, scripted, ids):
    scripted.add(ids.text("fine"))
    capture = await source.open_session("err")
    async with AsyncOpenAI(base_url=capture.base_url, api_key=capture.api_key) as client:
        messages = [{"role": "user", "content": "hi"}]
        with pytest.raises(Exception, match="n=2"):
            await client.chat.completions.create(model=MODEL, messages=messages, n=2)
        await client.chat.completions.create(model=MODEL, messages=messages)
    (record,) = await source.fetch_traces("err")
    stored = httpx.get(f"{source.gateway_url}/sessions/err/traces").json()
    assert len(stored) == 2  # the gateway keeps the error reply as a trace too
    assert [t["finish_reason"] for t in stored].count(None) == 1
    assert [t.turn_index for t in record.turns] == [0]
    assert record.response_ids == ids.text("fine")


async def test_an_engine_without_token_ids_is_a_clear_error():
    # an OpenAI-compatible engine that answers without vLLM's id fields
    from aiohttp import web

    async def chat(_request: web.Request) -> web.Response:
        return web.json_response({
            "id": "c1", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "hello"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        })

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    src = RllmTokenSource(
        RllmSourceOptions(engine_url=f"http://127.0.0.1:{port}/v1", model=MODEL, api_key="x")
    )
    await src.start()
    try:
        capture = await src.open_session("plain")
        async with AsyncOpenAI(base_url=capture.base_url, api_key=capture.api_key) as client:
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
        with pytest.raises(TokenRetrievalError, match=r"no prompt_token_ids.*vLLM >= 0\.11"):
            await src.fetch_traces("plain")
    finally:
        await src.close()
        await runner.cleanup()


async def test_closing_deletes_the_session_and_attach_mode(source, scripted, ids):
    other = RllmTokenSource(RllmSourceOptions(url=source.gateway_url, model=MODEL))
    await other.start()
    try:
        assert other.process is None  # attached, nothing started
        scripted.add(ids.text("attached"))
        capture = await other.open_session("odd/id with spaces")
        assert "/sessions/rh-" in capture.base_url  # routed under a digest
        async with AsyncOpenAI(base_url=capture.base_url, api_key="x") as client:
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
        (record,) = await other.fetch_traces("odd/id with spaces")
        assert record.session_id == "odd/id with spaces"
        assert record.response_ids == ids.text("attached")
        gsid = capture.extra["rllm_session_id"]
        await other.close_session("odd/id with spaces")
        async with httpx.AsyncClient() as http:
            left = await http.get(f"{source.gateway_url}/sessions/{gsid}/traces")
            assert left.json() == []
            # a closed session takes no more calls (the relay runs on this loop)
            late = await http.post(f"{capture.base_url}/chat/completions", json={})
        assert late.status_code == 404 and "no open capture session" in late.text
        await other.close_session("odd/id with spaces")  # unknown ids are ignored
    finally:
        await other.close()


def test_options_name_the_field_and_the_fix():
    from rollhub.registry import build_options
    from rollhub.testing import make_host

    registry = make_host(plugin).registry
    cls, opts = build_options(registry, "token_source", "rllm", {"engine_url": "http://e/v1"},
                              section="token_source")  # fmt: skip
    assert cls is RllmTokenSource and opts.sync_traces is True
    for bad in ({}, {"engine_url": "http://e/v1", "url": "http://g"}):
        with pytest.raises(ConfigError, match=r"exactly one of token_source\.engine_url"):
            build_options(registry, "token_source", "rllm", bad, section="token_source")


async def test_an_engine_that_is_down_fails_the_start_clearly(tmp_path):
    src = RllmTokenSource(RllmSourceOptions(url="http://127.0.0.1:9", request_timeout_s=2))
    with pytest.raises(TokenRetrievalError, match="probing the gateway: rllm-model-gateway at"):
        await src.start()
    assert src.relay is None
