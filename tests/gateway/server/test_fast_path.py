"""The lean HTTP path in front of aiohttp: plain gateway requests are answered there, as
aiohttp would answer them; anything else hands the connection to aiohttp at the first byte
of that request, so no request is read differently by the two (smuggling attempts end in
aiohttp's 400); requests of one connection are answered in order."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai
import pytest
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http import fast_path

USER = [{"role": "user", "content": "hi"}]


def fast(gw: Gateway) -> Any:
    """The gateway's fast path (its counters)."""
    return gw._server.fast


def chat_request(key: str, body: dict[str, Any] | None = None, **headers: str) -> bytes:
    data = json.dumps(body or {"model": "m", "messages": USER}).encode()
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        "Host: gw",
        f"Authorization: Bearer {key}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, headers (lower-case names), body (de-chunked)."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {}
    for line in head[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if status < 200:  # interim: no body
        return status, headers, b""
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    body = b""
    while True:  # chunked
        size = int((await reader.readline()).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, headers, body
        body += chunk[:-2]


async def connect(gw: Gateway) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = gw.url.removeprefix("http://").rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


def without_ids(body: bytes) -> dict[str, Any]:
    data = json.loads(body)
    data.pop("id"), data.pop("created")
    return data


async def test_sdk_and_admin_calls_are_answered_on_the_fast_path(
    gateway: Gateway, scripted: Any, ids: Any, helpers: Any
) -> None:
    import aiohttp

    async with aiohttp.ClientSession(headers={"Authorization": "Bearer admin-secret"}) as http:
        async with http.post(f"{gateway.url}/sessions", json={"session_id": "f"}) as r:
            assert r.status == 201
            key = (await r.json())["api_key"]
    scripted.add(ids("one"), ids("two"), ids("three"), ids("four"))
    oai = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)
    r1 = await oai.chat.completions.create(model="m", messages=USER)
    stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
    streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    r3 = await oai.responses.create(model="m", input="hi")
    ant = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=key, max_retries=0)
    r4 = await ant.messages.create(model="m", max_tokens=16, messages=USER)
    assert (r1.choices[0].message.content, streamed, r3.output_text, r4.content[0].text) == (
        "one", "two", "three", "four",
    )  # fmt: skip
    models = await oai.models.list()
    assert [m.id for m in models.data] == [gateway.chat_model.model_id]
    await oai.close()
    await ant.close()
    assert fast(gateway).served == 6 and fast(gateway).handed_off == 0
    # counted like aiohttp's requests, by route pattern and status
    assert gateway.metrics.requests[("/v1/chat/completions", 200)] == 2
    assert gateway.metrics.requests[("/sessions", 201)] == 1


async def test_fast_and_aiohttp_answers_agree(gateway: Gateway, scripted: Any, ids: Any) -> None:
    session = gateway.open_session("same")
    scripted.add(ids("alike"), ids("alike"))
    reader, writer = await connect(gateway)
    writer.write(chat_request(session.key))
    fast_answer = await read_response(reader)
    writer.close()
    # Expect: 100-continue is aiohttp's to handle: the connection is handed off
    reader, writer = await connect(gateway)
    writer.write(chat_request(session.key, Expect="100-continue"))
    status, _, interim = await read_response(reader)
    assert status == 100 and interim == b""
    slow_answer = await read_response(reader)
    writer.close()
    assert fast(gateway).served == 1 and fast(gateway).handed_off == 1
    assert fast_answer[0] == slow_answer[0] == 200
    assert fast_answer[1]["content-type"].startswith("application/json")
    assert without_ids(fast_answer[2]) == without_ids(slow_answer[2])


async def test_one_connection_pipelines_then_hands_off_mid_way(
    gateway: Gateway, scripted: Any, ids: Any
) -> None:
    session = gateway.open_session("pipe")
    scripted.add(ids("a"), ids("b"), ids("c"))
    reader, writer = await connect(gateway)
    # two calls in one write are answered in order
    writer.write(chat_request(session.key) + chat_request(session.key))
    first, second = await read_response(reader), await read_response(reader)
    assert [json.loads(r[2])["choices"][0]["message"]["content"] for r in (first, second)] == [
        "a", "b",
    ]  # fmt: skip
    # a route the fast path does not serve hands the connection to aiohttp (404 here);
    # the next call on the same connection is aiohttp's, and still answered
    writer.write(b"GET /nowhere HTTP/1.1\r\nHost: gw\r\n\r\n" + chat_request(session.key))
    missing, third = await read_response(reader), await read_response(reader)
    assert missing[0] == 404 and third[0] == 200
    assert json.loads(third[2])["choices"][0]["message"]["content"] == "c"
    assert fast(gateway).served == 2 and fast(gateway).handed_off == 1
    writer.close()


@pytest.mark.parametrize(
    "extra",
    [
        # both lengths: which one frames the body is the classic smuggling question
        "Transfer-Encoding: chunked\r\n",
        "Content-Length: 3\r\n",  # a second, different Content-Length
        "Content-Length : 5\r\n",  # whitespace before the colon
        " folded: value\r\n",  # obs-fold
    ],
)
async def test_ambiguous_framing_is_aiohttps_to_refuse(gateway: Gateway, extra: str) -> None:
    session = gateway.open_session("smuggle")
    request = chat_request(session.key).replace(b"\r\n\r\n", f"\r\n{extra}\r\n".encode(), 1)
    reader, writer = await connect(gateway)
    writer.write(request + b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
    status, _, _ = await read_response(reader)
    assert status == 400
    assert fast(gateway).served == 0 and fast(gateway).handed_off == 1
    assert gateway.sessions.get("smuggle").turns == 0
    writer.close()


async def test_chunked_bodies_and_big_bodies_are_served_by_aiohttp(
    scripted: Any, chat_model: Any, ids: Any
) -> None:
    gw = Gateway(scripted, chat_model, GatewayConfig(log_turns=False, max_body_bytes=4096))
    await gw.start()
    try:
        session = gw.open_session("c")
        scripted.add(ids("chunked"))
        data = json.dumps({"model": "m", "messages": USER}).encode()
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
            f"Authorization: Bearer {session.key}\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        reader, writer = await connect(gw)
        writer.write(head.encode() + b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data))
        status, _, body = await read_response(reader)
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "chunked"
        writer.close()
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
        reader, writer = await connect(gw)
        writer.write(chat_request(session.key, big))
        status, _, body = await read_response(reader)
        assert status == 413 and "max_body_bytes" in json.loads(body)["error"]["message"]
        writer.close()
        assert fast(gw).served == 0 and fast(gw).handed_off == 2
    finally:
        await gw.close()


async def test_connection_close_idle_connections_and_stop(
    gateway: Gateway, scripted: Any, ids: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = gateway.open_session("close")
    scripted.add(ids("bye"))
    reader, writer = await connect(gateway)
    writer.write(chat_request(session.key, Connection="close"))
    status, headers, _ = await read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await reader.read() == b""  # the gateway closed it
    writer.close()

    monkeypatch.setattr(fast_path, "KEEPALIVE_S", 0.2)
    reader, writer = await connect(gateway)
    await asyncio.wait_for(reader.read(), 5)  # an idle connection is closed
    writer.close()

    # stopping the gateway with a connection half-way through a request leaves nothing
    reader, writer = await connect(gateway)
    writer.write(chat_request(session.key)[:-5])
    await asyncio.sleep(0.05)
    await asyncio.wait_for(gateway.stop(), 5)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_a_failing_handler_answers_500_and_a_flood_waits_its_turn(
    chat_model: Any, ids: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollhub_gateway.engines.scripted import ScriptedBackend, ScriptedOptions

    backend = ScriptedBackend(options=ScriptedOptions(latency_s=0.1))
    config = GatewayConfig(log_turns=False, max_body_bytes=4096, admin_token="a")
    gw = Gateway(backend, chat_model, config)
    await gw.start()
    try:
        session = gw.open_session("flood")
        backend.add(*(ids(f"r{i}") for i in range(12)))
        reader, writer = await connect(gw)
        # 12 calls in one write, more than the body limit behind the first one in flight:
        # reading pauses until it is answered; all are answered, in order
        writer.write(b"".join(chat_request(session.key) for _ in range(12)))
        answers = [await read_response(reader) for _ in range(12)]
        texts = [json.loads(a[2])["choices"][0]["message"]["content"] for a in answers]
        assert texts == [f"r{i}" for i in range(12)]
        writer.close()

        def broken() -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(gw.sessions, "sessions", broken)
        reader, writer = await connect(gw)
        writer.write(b"GET /sessions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer a\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert status == 500 and headers["connection"] == "close"
        assert json.loads(body)["error"]["type"] == "server_error"
        assert await reader.read() == b""
        writer.close()
    finally:
        await gw.close()


async def test_stop_answers_calls_under_way_then_cancels_what_overstays(
    chat_model: Any, ids: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollhub_gateway.engines.scripted import ScriptedBackend, ScriptedOptions

    backend = ScriptedBackend(options=ScriptedOptions(latency_s=0.4))
    gw = Gateway(backend, chat_model, GatewayConfig(log_turns=False))
    await gw.start()
    session = gw.open_session("stop")
    backend.add(ids("last words"), ids("never"))
    reader, writer = await connect(gw)
    writer.write(chat_request(session.key))
    await asyncio.sleep(0.1)
    await gw.stop()  # waits for the call under way, which is answered, then closes
    status, headers, body = await read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert json.loads(body)["choices"][0]["message"]["content"] == "last words"
    assert await reader.read() == b""
    writer.close()

    monkeypatch.setattr(fast_path, "SHUTDOWN_GRACE_S", 0.1)
    await gw.start()
    reader, writer = await connect(gw)
    writer.write(chat_request(session.key))
    await asyncio.sleep(0.1)
    await gw.stop()  # past the grace: cancelled, cut, nothing recorded for it
    assert await reader.read() == b""
    assert len(gw.traces("stop")[0].turns) == 1 and session.in_flight == 0
    writer.close()
    await gw.close()


async def test_head_requests_are_aiohttps(gateway: Gateway) -> None:
    reader, writer = await connect(gateway)
    writer.write(b"HEAD /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    assert head.startswith("HTTP/1.1 200") and fast(gateway).handed_off == 1
    writer.close()


async def test_garbage_and_mutated_requests_leave_the_gateway_serving(
    gateway: Gateway, scripted: Any, ids: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import random

    session = gateway.open_session("fuzz")
    rnd = random.Random(7)
    valid = chat_request(session.key)
    pieces = [b"POST ", b"GET ", b"/v1/chat/completions", b"/sessions/x/traces", b" HTTP/1.1",
              b"\r\n", b"\n", b"\r", b": ", b"Content-Length", b"Transfer-Encoding: chunked",
              b"99999999999999999999", b"-1", b"\x00", b"\xff", b"\t", b"%2F", b"{}"]  # fmt: skip
    for _ in range(150):
        roll = rnd.random()
        if roll < 0.3:
            data = rnd.randbytes(rnd.randint(1, 200))
        elif roll < 0.7:
            data = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 20)))
        else:
            mutated = bytearray(valid)
            for _ in range(rnd.randint(1, 4)):
                mutated[rnd.randrange(len(mutated))] = rnd.getrandbits(8)
            data = bytes(mutated)
        reader, writer = await connect(gateway)
        writer.write(data)
        if rnd.random() < 0.5:
            writer.write_eof()
        try:
            await asyncio.wait_for(reader.read(65536), 0.1)
        except (TimeoutError, ConnectionError):
            pass
        writer.close()
    scripted.add(ids("still here"))
    reader, writer = await connect(gateway)
    writer.write(chat_request(session.key))
    status, _, body = await read_response(reader)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "still here"
    writer.close()
    # nothing raised on the fast path (asyncio logs what a protocol's callbacks raise)
    names = ("rollhub_gateway.http.fast_path", "asyncio")
    assert not [r for r in caplog.records if r.name in names and r.levelno >= 40]


async def test_a_request_arriving_in_pieces_is_read_once_whole(
    gateway: Gateway, scripted: Any, ids: Any
) -> None:
    session = gateway.open_session("pieces")
    scripted.add(ids("whole"))
    request = chat_request(session.key)
    reader, writer = await connect(gateway)
    for i in range(0, len(request), 7):  # head and body a few bytes at a time
        writer.write(request[i : i + 7])
        await writer.drain()
        await asyncio.sleep(0.001)
    status, _, body = await read_response(reader)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "whole"
    assert fast(gateway).served == 1 and fast(gateway).handed_off == 0
    writer.close()


@pytest.mark.parametrize("where", ["every line", "a header line"])
async def test_a_head_with_bare_lf_line_ends_is_aiohttps_to_answer_at_once(
    gateway: Gateway, where: str
) -> None:
    """A head the fast path cannot frame (it waits for CRLF CRLF) goes to aiohttp, which
    answers it, rather than hold the connection until the client gives up."""
    session = gateway.open_session("lf")
    request = chat_request(session.key)
    head, _, body = request.partition(b"\r\n\r\n")
    if where == "every line":
        head = head.replace(b"\r\n", b"\n") + b"\n\n"
    else:
        head = head.replace(b"\r\nHost: gw", b"\nHost: gw", 1) + b"\r\n\r\n"
    reader, writer = await connect(gateway)
    writer.write(head + body)
    status, _, _ = await asyncio.wait_for(read_response(reader), 5)
    assert status == 400
    assert fast(gateway).served == 0 and fast(gateway).handed_off == 1
    assert gateway.sessions.get("lf").turns == 0
    writer.close()
