"""Helpers of the gateway-pool tests: the test engine's factory reference, pool options, agents
that talk to a pool, and checks of their traces and of processes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import openai
from rollhub_gateway.engines.scripted import scripted_logprob

from tests.gateway.pool.engines import FIRST_POLICY, reply_ids, reply_text

#: the test engine, as a replica imports it
ENGINE_FACTORY = f"{Path(__file__).with_name('engines.py')}:turn_echo"


def pool_options(model_dir: str, **pool: Any) -> dict[str, Any]:
    """Token source options of a pool of test-engine replicas."""
    latency = pool.pop("latency_s", 0.0)
    return {
        "model": model_dir,
        "admin_token": "pool-admin",
        "log_turns": False,
        "engine": {"name": "scripted", "options": {"latency_s": latency}},
        "pool": {"engine_factory": ENGINE_FACTORY, "start_timeout_s": 60, **pool},
    }


async def converse(cap: Any, turns: int) -> list[str]:
    """An agent: ``turns`` chat calls on one session; returns the replies it read."""
    client = openai.AsyncOpenAI(base_url=cap.base_url, api_key=cap.api_key, max_retries=0)
    messages: list[dict[str, Any]] = []
    replies = []
    try:
        for i in range(turns):
            messages.append({"role": "user", "content": f"question {i}"})
            r = await client.chat.completions.create(model=cap.model_id, messages=messages)
            text = r.choices[0].message.content or ""
            replies.append(text)
            messages.append({"role": "assistant", "content": text})
    finally:
        await client.close()
    return replies


async def converse_more(cap: Any, done: int) -> str:
    """One more turn on a session that already had ``done`` turns; returns the reply."""
    client = openai.AsyncOpenAI(base_url=cap.base_url, api_key=cap.api_key, max_retries=0)
    messages: list[dict[str, Any]] = []
    for i in range(done):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": reply_text(cap.session_id, i)},
        ]
    messages.append({"role": "user", "content": f"question {done}"})
    try:
        r = await client.chat.completions.create(model=cap.model_id, messages=messages)
    finally:
        await client.close()
    return r.choices[0].message.content or ""


def assert_exact(
    traces: list[Any], tokenizer: Any, session_id: str, turns: int, policy: str = FIRST_POLICY
) -> None:
    """One record with ``turns`` turns, each exactly the engine's ids and logprobs."""
    assert len(traces) == 1, [len(t.turns) for t in traces]
    rec = traces[0]
    assert [t.turn_index for t in rec.turns] == list(range(turns))
    for t in rec.turns:
        want = reply_ids(tokenizer, reply_text(session_id, t.turn_index, policy))
        assert rec.response_ids[t.start : t.end] == want
        assert rec.response_mask[t.start : t.end] == [1] * len(want)
        assert rec.response_logprobs[t.start : t.end] == [
            scripted_logprob(i, tok) for i, tok in enumerate(want)
        ]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """The pids still alive after ``timeout`` seconds (empty when all exited)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while any(alive(p) for p in pids) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    return [p for p in pids if alive(p)]


async def wait_dead(replica: Any, timeout: float = 20.0) -> str:
    """The replica's death cause, once the pool noticed it (a loaded machine can be slow)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while replica.dead is None and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert replica.dead is not None, f"{replica.name} was not noticed dead in {timeout}s"
    return replica.dead
