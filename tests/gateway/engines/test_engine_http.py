"""vLLM and SGLang backends against loopback servers speaking their wire formats."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from rollhub.errors import GatewayError
from rollhub.sampling import Generation, SamplingParams, TokenChunk
from rollhub_gateway.engines.sglang import SGLangBackend, SGLangOptions
from rollhub_gateway.engines.vllm import VLLMBackend, VLLMOptions

PROMPT = [1, 9906, 11, 1917, 0]


def fake_token(prompt: list[int], i: int) -> int:
    """What the loopback engines produce (mirrors conftest.fake_token)."""
    return (sum(prompt) * 7 + 13 * i) % 1000 + 5


def expected(n: int, stop: int | None = None) -> list[int]:
    ids = []
    for i in range(n):
        ids.append(fake_token(PROMPT, i))
        if ids[-1] == stop:
            break
    return ids


def make(kind: str, url: str, **kw):
    if kind == "vllm":
        return VLLMBackend(VLLMOptions(base_url=url, model="smol", **kw))
    return SGLangBackend(SGLangOptions(base_url=url, **kw))


@pytest.fixture(params=["vllm", "sglang"])
async def engine(request, vllm_server, sglang_server):
    server = vllm_server if request.param == "vllm" else sglang_server
    backend = make(request.param, server.url)
    yield request.param, server, backend
    await backend.close()


async def test_generate_returns_the_engines_ids_and_logprobs(engine) -> None:
    kind, server, backend = engine
    gen = await backend.generate(PROMPT, SamplingParams(max_tokens=6, temperature=0.5, seed=7))
    assert gen.token_ids == expected(6)
    assert gen.logprobs == pytest.approx([-0.01 * (i + 1) for i in range(6)])
    assert gen.finish_reason == "length"
    body = server.requests[-1]
    if kind == "vllm":
        assert body["prompt"] == PROMPT and body["return_token_ids"] is True
        assert body["logprobs"] == 1 and body["max_tokens"] == 6 and body["seed"] == 7
    else:
        assert body["input_ids"] == PROMPT and body["return_logprob"] is True
        sp = body["sampling_params"]
        assert sp["max_new_tokens"] == 6 and sp["temperature"] == 0.5 and sp["sampling_seed"] == 7
        assert gen.weight_version == 7  # meta_info.weight_version


async def test_stop_token_ids_give_finish_stop(engine) -> None:
    _, _, backend = engine
    stop = expected(8)[3]
    gen = await backend.generate(PROMPT, SamplingParams(max_tokens=8, stop_token_ids=(stop,)))
    assert gen.finish_reason == "stop" and gen.token_ids == expected(8, stop)


async def test_stream_yields_chunks_as_they_arrive(engine) -> None:
    _, server, backend = engine
    server.delay_s = 0.03
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, object]] = []
    async for item in backend.stream(PROMPT, SamplingParams(max_tokens=8)):
        seen.append((loop.time(), item))
    chunks = [i for _, i in seen if isinstance(i, TokenChunk)]
    final = seen[-1][1]
    assert isinstance(final, Generation) and final.finish_reason == "length"
    assert len(chunks) == 8 and [c.token_ids[0] for c in chunks] == expected(8)
    assert final.token_ids == expected(8) and final.logprobs == [
        x for c in chunks for x in c.logprobs
    ]
    assert seen[-1][0] - seen[0][0] > 0.15  # chunks spread over the generation


async def test_sglang_incremental_streaming_output_is_understood(sglang_server) -> None:
    sglang_server.incremental = True
    backend = make("sglang", sglang_server.url)
    try:
        items = [i async for i in backend.stream(PROMPT, SamplingParams(max_tokens=5))]
    finally:
        await backend.close()
    assert items[-1].token_ids == expected(5)
    assert [c.token_ids for c in items[:-1]] == [[t] for t in expected(5)]


async def test_closing_a_stream_disconnects_and_aborts(engine) -> None:
    kind, server, backend = engine
    server.delay_s = 0.02
    agen = backend.stream(PROMPT, SamplingParams(max_tokens=200))
    got = 0
    async for item in agen:
        assert isinstance(item, TokenChunk)
        got += 1
        if got == 3:
            break
    await agen.aclose()
    for _ in range(100):
        if server.disconnects or server.aborted_rids:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    assert server.finished_streams == 0 and server.produced < 20
    if kind == "sglang":
        assert server.aborted_rids == [server.requests[-1]["rid"]]
    else:
        assert server.disconnects == 1


async def test_error_status_maps_to_gateway_error_without_retry(engine) -> None:
    _, server, backend = engine
    server.fail_status = 500
    with pytest.raises(GatewayError) as info:
        await backend.generate(PROMPT, SamplingParams(max_tokens=4))
    err = info.value
    assert err.status == 500 and err.unreachable is False and "boom" in str(err)
    assert len(server.requests) == 1  # an engine that answered is never asked twice
    with pytest.raises(GatewayError):
        async for _ in backend.stream(PROMPT, SamplingParams(max_tokens=4)):
            pass


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
async def test_connection_refused_is_retried_then_reported(kind, fakes) -> None:
    url = f"http://127.0.0.1:{fakes.free_port()}"
    backend = make(kind, url, connect_retries=2, retry_backoff_s=0.01)
    try:
        with pytest.raises(GatewayError) as info:
            await backend.generate(PROMPT, SamplingParams(max_tokens=4))
    finally:
        await backend.close()
    assert info.value.unreachable is True and "3 attempts" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
async def test_retry_reaches_an_engine_that_comes_up(kind, fakes) -> None:
    port = fakes.free_port()
    backend = make(kind, f"http://127.0.0.1:{port}", connect_retries=5, retry_backoff_s=0.1)
    state = fakes.FakeEngine()
    app = fakes.vllm_app(state) if kind == "vllm" else fakes.sglang_app(state)

    async def late_start():
        await asyncio.sleep(0.25)
        return await fakes.serve(app, port)

    starter = asyncio.create_task(late_start())
    try:
        gen = await backend.generate(PROMPT, SamplingParams(max_tokens=3))
    finally:
        await backend.close()
        runner, _ = await starter
        await runner.cleanup()
    assert gen.token_ids == expected(3) and len(state.requests) == 1


async def test_a_dropped_connection_is_not_retried(fakes) -> None:
    hits = 0

    async def drop(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        await request.read()
        assert request.transport is not None
        request.transport.close()  # the engine got the request, then the connection died
        return web.Response()

    app = web.Application()
    app.router.add_post("/generate", drop)
    runner, url = await fakes.serve(app)
    backend = make("sglang", url, connect_retries=3)
    try:
        with pytest.raises(GatewayError) as info:
            await backend.generate(PROMPT, SamplingParams(max_tokens=3))
    finally:
        await backend.close()
        await runner.cleanup()
    assert hits == 1 and info.value.unreachable is False


@pytest.mark.parametrize("as_ids", [True, False])
async def test_vllm_without_return_token_ids(fakes, as_ids: bool) -> None:
    """An older server: ids only as 'token_id:N' strings (--return-tokens-as-token-ids)."""

    async def old(request: web.Request) -> web.Response:
        body = await request.json()
        toks = [f"token_id:{t}" if as_ids else "x" for t in (11, 12)]
        choice = {
            "index": 0,
            "text": "ab",
            "finish_reason": "length",
            "logprobs": {"tokens": toks, "token_logprobs": [-0.5, -0.25]},
        }
        return web.json_response({"choices": [choice], "model": body["model"]})

    app = web.Application()
    app.router.add_post("/v1/completions", old)
    runner, url = await fakes.serve(app)
    backend = VLLMBackend(VLLMOptions(base_url=url, model="m"))
    try:
        if as_ids:
            gen = await backend.generate(PROMPT, SamplingParams(max_tokens=2))
            assert gen.token_ids == [11, 12] and gen.logprobs == [-0.5, -0.25]
        else:  # text tokens are never turned back into ids
            with pytest.raises(GatewayError, match="no token ids"):
                await backend.generate(PROMPT, SamplingParams(max_tokens=2))
    finally:
        await backend.close()
        await runner.cleanup()


async def test_an_error_event_mid_stream_raises(engine) -> None:
    _, server, backend = engine
    server.error_after = 2
    got: list[int] = []
    with pytest.raises(GatewayError, match="engine died") as info:
        async for item in backend.stream(PROMPT, SamplingParams(max_tokens=6)):
            if isinstance(item, TokenChunk):
                got += item.token_ids
    assert got == expected(2) and info.value.unreachable is False


async def test_api_key_and_routing_key_headers(sglang_server, vllm_server) -> None:
    sg = SGLangBackend(
        SGLangOptions(
            base_url=sglang_server.url, api_key="k1", routing_key_header="X-SMG-Routing-Key"
        )
    )
    vl = VLLMBackend(VLLMOptions(base_url=vllm_server.url, model="m", api_key="k2"))
    try:
        await sg.generate(PROMPT, SamplingParams(max_tokens=2, extra={"routing_key": "sess-9"}))
        await vl.generate(PROMPT, SamplingParams(max_tokens=2))
    finally:
        await sg.close()
        await vl.close()
    assert sglang_server.headers[-1]["Authorization"] == "Bearer k1"
    assert sglang_server.headers[-1]["X-SMG-Routing-Key"] == "sess-9"
    assert "routing_key" not in sglang_server.requests[-1]["sampling_params"]
    assert vllm_server.headers[-1]["Authorization"] == "Bearer k2"
    assert "k1" not in repr(sg.options) and "k2" not in repr(vl.options)


def test_importing_the_backends_stays_light() -> None:
    """Registration imports every backend class: none may pull in torch or an SDK."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rollhub_gateway.engines import transformers_engine, vllm, sglang, tinker\n"
        "heavy = [m for m in ('torch', 'transformers', 'tinker') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
async def test_top_logprobs_are_asked_for_and_returned(engine, stream) -> None:
    from .conftest import fake_alternatives

    kind, server, backend = engine
    params = SamplingParams(max_tokens=4, extra={"top_logprobs": 3})
    if stream:
        items = [x async for x in backend.stream(PROMPT, params)]
        gen = items[-1]
    else:
        gen = await backend.generate(PROMPT, params)
    body = server.requests[-1]
    assert "top_logprobs" not in body and "top_logprobs" not in body.get("sampling_params", {})
    if kind == "vllm":
        assert body["logprobs"] == 3
    else:
        assert body["top_logprobs_num"] == 3
    got = gen.metrics["top_logprobs"]
    assert len(got) == len(gen.token_ids) == 4
    for i, (alts, t) in enumerate(zip(got, gen.token_ids, strict=True)):
        want = fake_alternatives(i, t, 3)
        assert [a["logprob"] for a in alts] == pytest.approx([lp for _, lp in want])
        if kind == "vllm":
            assert [a["token"] for a in alts] == [f"<{x}>" for x, _ in want]
        else:
            assert [a["token_id"] for a in alts] == [x for x, _ in want]
    # not asked: nothing extra requested or returned
    plain = await backend.generate(PROMPT, SamplingParams(max_tokens=2))
    assert "top_logprobs" not in plain.metrics
    assert server.requests[-1].get("logprobs", 1) == 1
    assert "top_logprobs_num" not in server.requests[-1]
