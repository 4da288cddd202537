"""Stopping a gateway served from its own thread: the thread ends, its loop is closed, and a
call in flight is cancelled and answered with a dropped connection."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion
from rollhub.errors import GatewayError, UsageError
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend, ScriptedOptions
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http import fast_path
from rollhub_gateway.http.serving import ThreadedGateway

USER = [{"role": "user", "content": "hi"}]


def gateway_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rollhub-gateway"]


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_restarting_leaves_no_thread_and_no_open_loop(scripted, chat_model, config):
    before = gateway_threads()
    loops = []
    tg = ThreadedGateway(Gateway(scripted, chat_model, config))
    for _ in range(3):  # one object started again and again
        with tg:
            loop = tg.call(_running_loop())
            assert tg.url is not None
            assert len(gateway_threads()) == len(before) + 1
            assert tg.start() == tg.url  # starting a started gateway keeps it as it is
            loops.append(loop)
        assert tg.url is None and gateway_threads() == before
        with pytest.raises(UsageError, match="not started"):
            tg.open_session("late")
        tg.stop()  # idempotent
    for _ in range(3):  # a fresh object each time
        with ThreadedGateway(Gateway(ScriptedBackend(), chat_model, config)) as other:
            loops.append(other.call(_running_loop()))
    assert len(set(loops)) == 6 and all(loop.is_closed() for loop in loops)
    assert gateway_threads() == before


class _Slow(ScriptedBackend):
    """Answers after ``latency_s``; says when a call came in and whether it was cancelled."""

    def __init__(self, latency_s: float, ids: list[int]) -> None:
        super().__init__(ScriptedOptions(latency_s=latency_s), script=[ids])
        self.entered = threading.Event()
        self.cancelled = threading.Event()

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        try:
            return await super().generate(*args, **kwargs)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


def _stop_during_a_call(backend: _Slow, chat_model: Any) -> tuple[object, float]:
    """Stop the gateway while ``backend`` serves a call: what the caller got, and how long
    the stop took."""
    tg = ThreadedGateway(Gateway(backend, chat_model, GatewayConfig(log_turns=False)))
    tg.start()
    loop = tg.call(_running_loop())
    key = tg.open_session("s1").key
    outcome: list[object] = []

    def ask() -> None:
        client = openai.OpenAI(base_url=tg.base_url, api_key=key, max_retries=0, timeout=30)
        try:
            outcome.append(client.chat.completions.create(model="m", messages=USER))
        except Exception as exc:
            outcome.append(exc)

    caller = threading.Thread(target=ask)
    caller.start()
    assert backend.entered.wait(10)
    t0 = time.monotonic()
    tg.stop()
    took = time.monotonic() - t0
    caller.join(10)
    assert loop.is_closed() and not any(t.is_alive() for t in gateway_threads())
    (got,) = outcome
    return got, took


@pytest.fixture
def short_grace(monkeypatch):
    """Calls in flight get one second to finish once the gateway stops (10 s in service)."""
    monkeypatch.setattr(fast_path, "SHUTDOWN_GRACE_S", 1.0)


def test_a_call_that_ends_within_the_grace_is_answered(short_grace, chat_model, ids):
    backend = _Slow(0.3, ids("in time"))
    got, took = _stop_during_a_call(backend, chat_model)
    assert isinstance(got, ChatCompletion) and got.choices[0].message.content == "in time"
    assert took < 1 and not backend.cancelled.is_set()


def test_a_call_past_the_grace_is_cancelled_and_its_client_disconnected(short_grace, chat_model):
    backend = _Slow(60, [1, 2])
    got, took = _stop_during_a_call(backend, chat_model)
    assert isinstance(got, openai.APIConnectionError), got
    assert 1 <= took < 5 and backend.cancelled.is_set()


def test_a_failed_start_stops_the_thread(scripted, chat_model, config):
    before = gateway_threads()
    tg = ThreadedGateway(Gateway(scripted, chat_model, config), host="256.0.0.1")
    with pytest.raises(GatewayError, match="cannot listen"):
        tg.start()
    assert tg.url is None and gateway_threads() == before
    with pytest.raises(UsageError):
        tg.open_session("x")
