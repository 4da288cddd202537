"""OpenAI chat extras for engine-facing proxies: ``top_logprobs`` (0-20, the engine's
alternatives where it reports them) and vLLM's ``return_token_ids``, read back with the
real ``rllm-model-gateway`` extraction functions."""

from __future__ import annotations

import json

import aiohttp
import openai
import pytest
from rllm_model_gateway import data_process as rllm
from rollhub_gateway.engines.scripted import scripted_logprob, scripted_top_logprobs

USER = [{"role": "user", "content": "What is the weather in Paris?"}]


async def test_top_logprobs_above_20_is_400(gateway):
    s = gateway.open_session("s1")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        await client.chat.completions.create(model="m", messages=USER, top_logprobs=21)
    assert exc.value.body["param"] == "top_logprobs" and "<= 20" in exc.value.body["message"]


async def test_responses_top_logprobs_above_20_is_400(gateway):
    s = gateway.open_session("s1")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        await client.responses.create(model="m", input="hi", top_logprobs=21)
    assert exc.value.body["param"] == "top_logprobs"


@pytest.mark.parametrize("stream", [False, True])
async def test_top_logprobs_lists_come_from_the_engine(gateway, scripted, ids, tokenizer, stream):
    s = gateway.open_session("s1")
    out = ids("Sunny.")
    scripted.add(out)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    kw = {"model": "m", "messages": USER, "logprobs": True, "top_logprobs": 3}
    if stream:
        chunks = [c async for c in await client.chat.completions.create(**kw, stream=True)]
        content = [
            e
            for c in chunks
            if c.choices and c.choices[0].logprobs
            for e in c.choices[0].logprobs.content
        ]
    else:
        content = (await client.chat.completions.create(**kw)).choices[0].logprobs.content
    assert len(content) == len(out)
    for i, (entry, t) in enumerate(zip(content, out, strict=True)):
        want = scripted_top_logprobs(i, t, 3)
        assert [a.logprob for a in entry.top_logprobs] == [w["logprob"] for w in want]
        assert [a.token for a in entry.top_logprobs] == [
            tokenizer.decode([w["token_id"]]) for w in want
        ]
        assert entry.top_logprobs[0].logprob == entry.logprob == scripted_logprob(i, t)
    # without top_logprobs the engine is not asked and the lists stay empty
    scripted.add(out)
    r = await client.chat.completions.create(model="m", messages=USER, logprobs=True)
    assert all(e.top_logprobs == [] for e in r.choices[0].logprobs.content)


@pytest.mark.parametrize("where", ["root", "extra_body"])
async def test_return_token_ids_like_vllm(gateway, scripted, ids, helpers, where):
    s = gateway.open_session("s1")
    out = ids.tool_call("get_weather", {"city": "Paris"})
    scripted.add(out)
    body = {"model": "m", "messages": USER, "tools": [helpers.weather_tool], "logprobs": True}
    body |= (
        {"return_token_ids": True}
        if where == "root"
        else {"extra_body": {"return_token_ids": True}}
    )
    headers = {"Authorization": f"Bearer {s.key}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            gateway.base_url + "/chat/completions", json=body, headers=headers
        ) as r:
            data = await r.json()
    assert r.status == 200
    assert rllm.extract_prompt_token_ids(data) == scripted.prompts[0]
    assert rllm.extract_completion_token_ids(data) == out
    assert rllm.extract_logprobs(data) == [scripted_logprob(i, t) for i, t in enumerate(out)]
    assert data["choices"][0]["finish_reason"] == "tool_calls"
    # not asked: no extra fields (a strict OpenAI client sees the plain shape)
    scripted.add(out)
    plain = (await openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
             .chat.completions.create(model="m", messages=USER, tools=[helpers.weather_tool]))  # fmt: skip
    assert "prompt_token_ids" not in plain.model_dump() and plain.choices[0].model_extra == {}


async def test_return_token_ids_streamed_like_vllm(gateway, scripted, ids):
    s = gateway.open_session("s1")
    out = ids("It is sunny in Paris today.")
    scripted.add(out)
    body = {"model": "m", "messages": USER, "stream": True, "logprobs": True,
            "extra_body": {"return_token_ids": True}}  # fmt: skip
    headers = {"Authorization": f"Bearer {s.key}"}
    chunks = []
    async with aiohttp.ClientSession() as http:
        async with http.post(
            gateway.base_url + "/chat/completions", json=body, headers=headers
        ) as r:
            async for line in r.content:
                line = line.strip()
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    chunks.append(json.loads(line[6:]))
    assert rllm.extract_prompt_token_ids_from_chunk(chunks[0]) == scripted.prompts[0]
    assert [t for c in chunks for t in rllm.extract_delta_token_ids(c)] == out
    assert [x for c in chunks for x in rllm.extract_delta_logprobs(c)] == [
        scripted_logprob(i, t) for i, t in enumerate(out)
    ]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == (
        "It is sunny in Paris today."
    )
