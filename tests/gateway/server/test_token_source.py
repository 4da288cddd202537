"""The ``gateway`` token source: in process and against a remote gateway."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest
from rollhub.errors import ConfigError, UsageError
from rollhub.plugins import build_host
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.token_source import GatewaySourceOptions, GatewayTokenSource

USER = [{"role": "user", "content": "hi"}]


def test_registered_as_gateway_with_the_config_as_options():
    reg = build_host().registry
    assert reg.get("token_source", "gateway") is GatewayTokenSource
    for name in ("transformers", "vllm", "sglang", "scripted"):
        assert reg.get("sampling_backend", name).name == name
    opts = GatewaySourceOptions.model_validate(
        {"engine": {"name": "scripted"}, "policy": {"max_turns": 3}}
    )
    assert opts.policy.max_turns == 3 and opts.host == "127.0.0.1"
    with pytest.raises(ValueError, match="prot"):
        GatewaySourceOptions.model_validate({"prot": 1})


async def test_traces_are_complete_right_after_the_last_reply(scripted, chat_model, config, ids):
    """Many short sessions, traces read the instant the agent has its answer: never partial."""
    source = GatewayTokenSource(gateway=Gateway(scripted, chat_model, config))
    with pytest.raises(UsageError):
        await source.open_session("early")
    await source.start()
    try:
        n = 60
        base = openai.AsyncOpenAI(base_url=source.url + "/v1", api_key="unset")

        async def rollout(i: int) -> None:
            cap = await source.open_session(f"s{i}", sampling={"max_tokens": 32, "stop": ["x"]})
            assert cap.api_key and cap.model_id == "smollm2-135m-instruct"
            client = base.with_options(api_key=cap.api_key)  # one connection pool for all
            r = await client.chat.completions.create(model=cap.model_id, messages=USER)
            msgs = [
                *USER,
                r.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "more"},
            ]
            await client.chat.completions.create(model=cap.model_id, messages=msgs)
            traces = await source.fetch_traces(f"s{i}")
            assert [len(t.turns) for t in traces] == [2]
            await source.close_session(f"s{i}", drop=i % 2 == 1)

        for i in range(n):
            scripted.add(ids(f"answer {i}"), ids(f"more {i}"))
        await asyncio.gather(*(rollout(i) for i in range(n)))
        assert len(source.gateway.sessions) == 0
        assert source.gateway.metrics.sessions_closed == {"finished": n // 2, "dropped": n // 2}
        await source.close_session("never-opened")  # ignored
    finally:
        await source.close()


async def test_weight_version_and_anthropic_base_url(scripted, chat_model, config, ids):
    source = GatewayTokenSource(gateway=Gateway(scripted, chat_model, config))
    source.set_weight_version(3)
    await source.start()
    try:
        assert source.pool is None and source.urls == [source.url]  # no pool: one gateway
        cap = await source.open_session("s1")
        scripted.add(ids("ok"))
        client = anthropic.AsyncAnthropic(
            base_url=cap.extra["anthropic_base_url"], api_key=cap.api_key
        )
        await client.messages.create(model="m", max_tokens=8, messages=USER)
        source.set_weight_version(4)
        scripted.add(ids("again"))
        await client.messages.create(
            model="m", max_tokens=8, messages=[*USER, {"role": "assistant", "content": "ok"}, *USER]
        )
        traces = await source.fetch_traces("s1")
        assert [t.weight_version for rec in traces for t in rec.turns] == [3, 4]
    finally:
        await source.close()


async def test_remote_gateway_through_admin_routes(gateway, scripted, ids):
    with pytest.raises(ConfigError, match="admin_token"):
        await GatewayTokenSource(GatewaySourceOptions(url=gateway.url)).start()
    source = GatewayTokenSource(GatewaySourceOptions(url=gateway.url, admin_token="admin-secret"))
    source.set_weight_version(5)  # before start, as the hub may do
    await source.start()
    try:
        cap = await source.open_session("r1", sampling={"max_tokens": 3})
        assert gateway.weight_version == 5
        assert cap.base_url == gateway.base_url
        assert gateway.sessions.get("r1").policy.max_tokens == 3
        out = ids("this is a much longer remote answer", end=False)
        scripted.add(out)
        source.set_weight_version(9)
        client = openai.AsyncOpenAI(base_url=cap.base_url, api_key=cap.api_key)
        r = await client.chat.completions.create(model=cap.model_id, messages=USER)
        assert r.choices[0].finish_reason == "length"  # the session default max_tokens=3
        traces = await source.fetch_traces("r1")
        assert traces[0].response_ids == out[:3]
        cap2 = await source.open_session("r2")
        scripted.add(ids("v"))
        client2 = openai.AsyncOpenAI(base_url=cap2.base_url, api_key=cap2.api_key)
        await client2.chat.completions.create(model=cap2.model_id, messages=USER)
        assert (await source.fetch_traces("r2"))[0].turns[0].weight_version == 9
        await source.close_session("r1")
        await source.close_session("r2", drop=True)
        await source.close_session("r2")  # already gone: ignored
        assert len(gateway.sessions) == 0
        from rollhub.errors import TokenRetrievalError

        with pytest.raises(TokenRetrievalError, match="404"):
            await source.fetch_traces("r1")
    finally:
        await source.close()


async def test_builds_engine_and_chat_model_from_options(ids):
    """No gateway given: the source builds the scripted engine and the chat model itself."""
    source = GatewayTokenSource(GatewaySourceOptions(engine={"name": "scripted"}, admin_token="t"))
    await source.start()
    try:
        assert source.url.startswith("http://127.0.0.1:")
        source.gateway.backend.add(ids("built"))
        cap = await source.open_session("s1")
        client = openai.AsyncOpenAI(base_url=cap.base_url, api_key=cap.api_key)
        r = await client.chat.completions.create(model=cap.model_id, messages=USER)
        assert r.choices[0].message.content == "built"
    finally:
        await source.close()


async def test_relative_paths_resolve_against_the_config_file(tmp_path, tools_template, ids):
    """``chat_template`` and ``journal_path`` in rollhub.toml are relative to that file."""
    (tmp_path / "tools.jinja").write_text(tools_template)
    opts = GatewaySourceOptions(
        engine={"name": "scripted"},
        chat_template="tools.jinja",
        journal_path="j.sqlite",
        family="hermes",
    )
    source = GatewayTokenSource(opts, base_dir=tmp_path)
    assert source.options.chat_template == str(tmp_path / "tools.jinja")
    await source.start()
    try:
        assert source.gateway.chat_model.supports_tools()
        source.gateway.backend.add(ids.tool_call("get_weather", {"city": "Oslo"}))
        cap = await source.open_session("s1")
        client = openai.AsyncOpenAI(base_url=cap.base_url, api_key=cap.api_key)
        tool = {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object"}},
        }
        r = await client.chat.completions.create(model="m", messages=USER, tools=[tool])
        assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
        assert (tmp_path / "j.sqlite").exists()
    finally:
        await source.close()


def _engine_down(prompt_ids: list[int]) -> list[int]:
    raise RuntimeError("engine down")  # what a failing sampling backend raises


async def test_a_session_the_engine_failed_under_is_lost_to_the_infrastructure(
    scripted, chat_model, config, ids
):
    """The agent saw a 502 the engine caused: reading or closing its session says the
    capture is lost (the hub then runs the rollout again, or ends it ``infra_error``), even
    when a retry of the call succeeded; a streamed call counts the same; other sessions and
    expiry are untouched."""
    from rollhub.errors import CaptureLost

    source = GatewayTokenSource(gateway=Gateway(scripted, chat_model, config))
    await source.start()
    try:
        clients = {}
        for sid in ("s1", "s2", "s3"):
            cap = await source.open_session(sid)
            clients[sid] = openai.AsyncOpenAI(
                base_url=cap.base_url, api_key=cap.api_key, max_retries=0
            )
        scripted.add(_engine_down, ids("retried"))
        with pytest.raises(openai.APIStatusError) as failed:
            await clients["s1"].chat.completions.create(model="m", messages=USER)
        assert failed.value.status_code == 502
        await clients["s1"].chat.completions.create(model="m", messages=USER)  # the retry
        scripted.add(_engine_down)
        with pytest.raises(openai.APIStatusError, match="engine down"):
            await clients["s2"].chat.completions.create(model="m", messages=USER, stream=True)
        scripted.add(ids("fine"))
        await clients["s3"].chat.completions.create(model="m", messages=USER)

        with pytest.raises(CaptureLost, match="engine failed under one of its calls"):
            await source.fetch_traces("s1")
        with pytest.raises(CaptureLost, match="engine down"):
            await source.close_session("s1", drop=True)
        with pytest.raises(CaptureLost, match="engine failed"):
            await source.close_session("s2")  # finishing it: lost all the same
        assert [len(t.turns) for t in await source.fetch_traces("s3")] == [1]
        await source.close_session("s3")
        assert len(source.gateway.sessions) == 0  # the lost ones are closed too
        assert source.gateway.metrics.sessions_closed == {"dropped": 2, "finished": 1}
    finally:
        await source.close()


async def test_a_remote_gateway_reports_an_engine_failure_as_a_lost_capture(
    gateway, scripted, ids
):
    from rollhub.errors import CaptureLost

    source = GatewayTokenSource(GatewaySourceOptions(url=gateway.url, admin_token="admin-secret"))
    await source.start()
    try:
        cap = await source.open_session("r1")
        client = openai.AsyncOpenAI(base_url=cap.base_url, api_key=cap.api_key, max_retries=0)
        scripted.add(_engine_down)
        with pytest.raises(openai.APIStatusError):
            await client.chat.completions.create(model=cap.model_id, messages=USER)
        with pytest.raises(CaptureLost, match=r"410.*engine down"):
            await source.fetch_traces("r1")
        with pytest.raises(CaptureLost, match="410"):
            await source.close_session("r1", drop=True)
        assert len(gateway.sessions) == 0
    finally:
        await source.close()
