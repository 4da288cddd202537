"""Sessions: admin routes, policy, finishing and dropping, idle expiry, weight versions."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest
from rollhub_gateway.config import GatewayConfig, SessionPolicy
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway

USER = [{"role": "user", "content": "hi"}]


async def test_admin_routes_open_trace_finish_drop(gateway, scripted, ids):
    admin = {"Authorization": "Bearer admin-secret"}
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.url + "/sessions", json={"session_id": "a1"}) as r:
            assert r.status == 401
        async with http.post(
            gateway.url + "/sessions", json={"session_id": "a1"}, headers=admin
        ) as r:
            assert r.status == 201
            info = await r.json()
        assert info["base_url"] == gateway.base_url and info["anthropic_base_url"] == gateway.url
        assert info["session_id"] == "a1" and info["model"] == "smollm2-135m-instruct"
        async with http.post(
            gateway.url + "/sessions", json={"session_id": "a1"}, headers=admin
        ) as r:
            assert r.status == 400 and "already open" in (await r.json())["error"]["message"]

        out = ids("hello")
        scripted.add(out)
        client = openai.AsyncOpenAI(base_url=info["base_url"], api_key=info["api_key"])
        await client.chat.completions.create(model="m", messages=USER)

        async with http.get(gateway.url + "/sessions/a1/traces", headers=admin) as r:
            traces = (await r.json())["traces"]
        assert traces[0]["response_ids"] == out  # readable at once: committed before the reply
        async with http.post(gateway.url + "/sessions/a1/finish", headers=admin) as r:
            assert (await r.json())["traces"] == traces
        async with http.get(gateway.url + "/sessions/a1/traces", headers=admin) as r:
            assert r.status == 404
        with pytest.raises(openai.AuthenticationError):
            await client.with_options(max_retries=0).chat.completions.create(
                model="m", messages=USER
            )

        async with http.post(gateway.url + "/sessions", json={}, headers=admin) as r:
            sid = (await r.json())["session_id"]
        async with http.delete(f"{gateway.url}/sessions/{sid}", headers=admin) as r:
            assert r.status == 204
        async with http.delete(f"{gateway.url}/sessions/{sid}", headers=admin) as r:
            assert r.status == 404
        async with http.post(
            gateway.url + "/sessions", json={"policy": {"max_turns": 0}}, headers=admin
        ) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "policy.max_turns"


async def test_keys_of_lost_sessions_get_a_410_with_the_reason(gateway):
    admin = {"Authorization": "Bearer admin-secret"}
    lost = {"sessions": [{"api_key": "rh-gone", "reason": "replica 1 died (SIGKILL)"}]}
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.url + "/sessions/lost", json=lost) as r:
            assert r.status == 401
        for bad in ({}, {"sessions": [{"api_key": 1, "reason": "x"}]}, {"sessions": "k"}):
            async with http.post(gateway.url + "/sessions/lost", json=bad, headers=admin) as r:
                assert r.status == 400 and (await r.json())["error"]["param"] == "sessions"
        async with http.post(gateway.url + "/sessions/lost", json=lost, headers=admin) as r:
            assert r.status == 200 and (await r.json()) == {"lost": 1}
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key="rh-gone", max_retries=0)
    with pytest.raises(openai.APIStatusError) as gone:
        await client.chat.completions.create(model="m", messages=USER)
    assert gone.value.status_code == 410 and "replica 1 died (SIGKILL)" in gone.value.message
    with pytest.raises(openai.AuthenticationError):  # other unknown keys are still a 401
        await client.with_options(api_key="rh-other").chat.completions.create(
            model="m", messages=USER
        )


async def test_pinned_temperature_and_caps(gateway, scripted, ids):
    params = []
    orig = scripted.generate

    async def spy(prompt_ids, p, **kw):
        params.append(p)
        return await orig(prompt_ids, p, **kw)

    scripted.generate = spy
    s = gateway.open_session(
        "s1",
        policy={"temperature": 1.0, "pinned": ["temperature"], "max_tokens_cap": 5, "top_p": 0.8},
    )
    scripted.add(ids("a"), ids("b"))
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    await client.chat.completions.create(model="m", messages=USER, temperature=0.2, max_tokens=100)
    await client.chat.completions.create(model="m", messages=USER, top_p=0.5)
    assert [(p.temperature, p.max_tokens, p.top_p) for p in params] == [
        (1.0, 5, 0.8),
        (1.0, 5, 0.5),
    ]


async def test_max_turns_and_max_context(gateway, scripted, ids):
    s = gateway.open_session("s1", policy={"max_turns": 1})
    scripted.add(ids("one"))
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key, max_retries=0)
    await client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(openai.BadRequestError, match="max_turns=1"):
        await client.chat.completions.create(model="m", messages=USER)

    s2 = gateway.open_session("s2", policy={"max_context_tokens": 40})
    client2 = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s2.key, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="max_context_tokens=40") as info:
        await client2.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "word " * 50}]
        )
    assert info.value.body["param"] == "messages"
    seen = []
    orig = scripted.generate

    async def spy(prompt_ids, p, **kw):
        seen.append((len(prompt_ids), p.max_tokens))
        return await orig(prompt_ids, p, **kw)

    scripted.generate = spy
    scripted.add(ids("x"))
    await client2.chat.completions.create(model="m", messages=USER, max_tokens=500)
    prompt_len, max_tokens = seen[0]
    assert prompt_len + max_tokens == 40


async def test_idle_sessions_expire_and_their_key_stops_working(chat_model, ids):
    backend = ScriptedBackend()
    gw = Gateway(
        backend,
        chat_model,
        GatewayConfig(admin_token="a", session_ttl_s=1.0, reap_interval_s=0.05, log_turns=False),
    )
    await gw.start()
    try:
        idle = gw.open_session("idle")
        busy = gw.open_session("busy")
        client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=busy.key, max_retries=0)
        for _ in range(5):  # keeps "busy" alive past the TTL
            backend.add(ids("ok"))
            await client.chat.completions.create(model="m", messages=USER)
            await asyncio.sleep(0.3)
        assert "idle" not in gw.sessions and "busy" in gw.sessions
        assert gw.metrics.sessions_closed == {"expired": 1}
        stale = openai.AsyncOpenAI(base_url=gw.base_url, api_key=idle.key, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await stale.chat.completions.create(model="m", messages=USER)
    finally:
        await gw.close()


async def test_weight_version_is_stamped_on_turns(gateway, scripted, ids):
    s = gateway.open_session("s1")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    scripted.add(ids("a"))
    await client.chat.completions.create(model="m", messages=USER)
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer admin-secret"}) as http:
        async with http.put(gateway.url + "/weight_version", json={"version": 7}) as r:
            assert r.status == 200
    scripted.add(ids("b"))
    first = await client.chat.completions.create(model="m", messages=USER)
    gateway.set_weight_version(8)
    scripted.add(ids("c"))
    await client.chat.completions.create(
        model="m", messages=[*USER, first.choices[0].message.model_dump(exclude_none=True), *USER]
    )
    versions = sorted(t.weight_version or -1 for rec in gateway.traces("s1") for t in rec.turns)
    assert versions == [-1, 7, 8]


def test_policy_override_errors_name_the_field(chat_model):
    from rollhub.errors import ConfigError

    gw = Gateway(ScriptedBackend(), chat_model, GatewayConfig(policy=SessionPolicy(max_tokens=64)))
    with pytest.raises(ConfigError, match=r"policy\.temperatur"):
        gw.open_session("s", policy={"temperatur": 1})
    assert gw.open_session("s", policy={"temperature": 0.5}).policy.max_tokens == 64


async def test_sessions_survive_a_restart_through_the_journal(
    tmp_path, tokenizer, tools_template, ids
):
    """A restarted gateway lists unfinished journal sessions; reopening one resumes it."""
    import aiohttp as _aiohttp
    from rollhub_gateway.chat_model import build_chat_model

    def model():
        return build_chat_model(
            "smollm2-135m-instruct", chat_template=tools_template, family="hermes",
            tokenizer=tokenizer, journal=tmp_path / "journal.sqlite",
        )  # fmt: skip

    cfg = GatewayConfig(admin_token="a", log_turns=False)
    first = ScriptedBackend(script=[ids("before restart")])
    gw = Gateway(first, model(), cfg)
    await gw.start()
    s = gw.open_session("keep")
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
    r = await client.chat.completions.create(model="m", messages=USER)
    await gw.close()

    second = ScriptedBackend(script=[ids("after restart")])
    gw2 = Gateway(second, model(), cfg)
    await gw2.start()
    try:
        async with _aiohttp.ClientSession(headers={"Authorization": "Bearer a"}) as http:
            async with http.get(gw2.url + "/sessions") as resp:
                assert await resp.json() == {"open": [], "recoverable": ["keep"]}
        s2 = gw2.open_session("keep")
        client2 = openai.AsyncOpenAI(base_url=gw2.base_url, api_key=s2.key)
        history = [*USER, r.choices[0].message.model_dump(exclude_none=True), *USER]
        await client2.chat.completions.create(model="m", messages=history)
        (rec,) = gw2.finish_session("keep")
        assert [t.drift for t in rec.turns] == ["append", "append"]
        assert second.prompts[0][: len(first.prompts[0])] == first.prompts[0]
    finally:
        await gw2.close()


@pytest.mark.parametrize("sid", ["../../etc/passwd", "x" * 5000, "a\x00b", "a/b", ".hidden", ""])
async def test_admin_refuses_session_ids_the_stores_refuse(gateway, sid):
    admin = {"Authorization": "Bearer admin-secret"}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            gateway.url + "/sessions", json={"session_id": sid}, headers=admin
        ) as r:
            body = await r.json()
    assert r.status == 400 and body["error"]["param"] == "session_id"
    assert len(gateway.sessions) == 0
    from rollhub_gateway.sessions import SessionError

    if sid:
        with pytest.raises(SessionError, match="valid key part"):
            gateway.open_session(sid)


async def test_agents_keep_their_key_across_a_restart(tmp_path, tokenizer, tools_template, ids):
    """Keys survive a restart: the agent's next call with its old key reopens the session
    from the journal (with its policy) and continues it; the hub reads and finishes it
    without reopening it; once finished, the key is refused."""
    from rollhub_gateway.chat_model import build_chat_model

    def model():
        return build_chat_model(
            "smollm2-135m-instruct", chat_template=tools_template, family="hermes",
            tokenizer=tokenizer, journal=tmp_path / "journal.sqlite",
        )  # fmt: skip

    cfg = GatewayConfig(admin_token="a", log_turns=False)
    first = ScriptedBackend(script=[ids("before restart")])
    gw = Gateway(first, model(), cfg)
    await gw.start()
    s = gw.open_session("keep", policy={"max_tokens_cap": 40})
    r = await openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key).chat.completions.create(
        model="m", messages=USER
    )
    port = int(gw.url.rsplit(":", 1)[1])
    await gw.close()

    second = ScriptedBackend(script=[ids("after restart")])
    gw2 = Gateway(second, model(), cfg)
    await gw2.start(port=port)  # the agent's base URL stays valid
    try:
        client = openai.AsyncOpenAI(base_url=gw2.base_url, api_key=s.key, max_retries=0)
        history = [*USER, r.choices[0].message.model_dump(exclude_none=True), *USER]
        r2 = await client.chat.completions.create(model="m", messages=history, max_tokens=500)
        assert r2.choices[0].message.content == "after restart"
        assert gw2.sessions.get("keep").policy.max_tokens_cap == 40
        assert second.turns[0].session_id == "keep" and second.turns[0].turn_index == 1
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer a"}) as http:
            async with http.post(gw2.url + "/sessions/keep/finish") as resp:
                (rec,) = (await resp.json())["traces"]
        assert [t["drift"] for t in rec["turns"]] == ["append", "append"]
        assert second.prompts[0][: len(first.prompts[0])] == first.prompts[0]
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="m", messages=USER)
    finally:
        await gw2.close()

    # a restarted gateway whose hub reads traces first: reopened from the journal too
    gw3 = Gateway(ScriptedBackend(script=[ids("x")]), model(), cfg)
    s3 = gw3.open_session("other")
    gw3.sessions.get("other").conversation.model.journal.close()
    gw4 = Gateway(ScriptedBackend(script=[ids("y")]), model(), cfg)
    assert gw4.traces("other") == [] and "other" in gw4.sessions
    assert gw4.sessions.by_key(s3.key).session_id == "other"
