"""Admitting a model call without ever blocking the event loop.

A request's cost before sampling (JSON decoding, rendering the chat template, tokenising)
grows with its size; one 10 MB request done on the event loop stalls every other session
and ``/healthz`` for seconds. So:

- every call has a context limit: the session policy's ``max_context_tokens``, else the
  model's own context window (from its config). A request that cannot fit is a 400 in the
  caller's format before any work: its body is larger than any prompt of that many tokens
  could be (no token carries more text than the longest one in the vocabulary), or, once
  decoded, its messages hold more text than that;
- a request larger than :data:`OFFLOAD_BYTES` is decoded, validated, rendered and tokenised
  in a worker thread (a pool sized to the cores), while the loop serves everyone else;
- the calls of one session are prepared in arrival order (a per-session lock), so a small
  call never overtakes a big one of the same session; a big one waits for the session's
  calls in flight to commit, so the worker never reads a trajectory being changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rollhub_gateway.model_call.plan import TurnPlan, TurnPlanner
from rollhub_gateway.protocols.base import WireError, WireRequest, orjson
from rollhub_gateway.sessions import Session

if TYPE_CHECKING:
    from rollhub_gateway.protocols import AnthropicMessages, WireAdapter

__all__ = ["OFFLOAD_BYTES", "Admission", "parse_body", "read_body"]

log = logging.getLogger(__name__)

#: bodies above this many bytes are prepared off the event loop
OFFLOAD_BYTES = 256 * 1024
#: JSON escapes make a body at most this many times longer than its text (``\u0001``)
_ESCAPE_FACTOR = 6
#: room for the request's non-text fields (model, tools, sampling fields)
_BODY_SLACK = 64 * 1024


class Admission:
    """Context limits and off-loop preparation of one gateway's model calls.

    :param planner: plans (renders) calls once admitted.
    :param workers: threads preparing big calls (default: the number of cores).
    """

    def __init__(self, planner: TurnPlanner, *, workers: int | None = None) -> None:
        self.planner = planner
        self.chat_model = planner.chat_model
        self._pool = ThreadPoolExecutor(
            max_workers=workers or os.cpu_count() or 2, thread_name_prefix="rollhub-prepare"
        )
        self._token_chars: int | None = None

    def context_limit(self, session: Session) -> int | None:
        """Prompt + output tokens one call of ``session`` may use (None: no limit known)."""
        return session.policy.max_context_tokens or getattr(self.chat_model, "context_window", None)

    async def admit(
        self, request: web.Request, session: Session, adapter: WireAdapter, route: str
    ) -> tuple[WireRequest, TurnPlan]:
        """Read, validate and render one call, off the loop when it is big.

        :raises WireError: 400 for a call that cannot fit the context limit (before any
            work when its size shows it) or a bad request; 413 past ``max_body_bytes``.
        """
        limit = self.context_limit(session)
        size = request.content_length or 0
        if limit is not None and size > OFFLOAD_BYTES:
            bound = limit * self.token_chars() * _ESCAPE_FACTOR + _BODY_SLACK
            if size > bound:
                raise _too_long(f"the request body has {size} bytes", limit)
        raw = await read_body(request)
        async with session.prepare_lock:  # one session's calls are prepared in order
            if len(raw) <= OFFLOAD_BYTES:
                return self._prepare(raw, session, adapter, route, limit)
            # the worker reads the session's trajectory: let this session's calls in
            # flight commit first (later ones wait on the lock), so nothing changes it
            while session.in_flight:
                await asyncio.sleep(0.005)
            loop = asyncio.get_running_loop()
            fut = loop.run_in_executor(
                self._pool, self._prepare, raw, session, adapter, route, limit
            )
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                # the caller left; the worker still runs: keep the session's lock until it
                # is done, so the next call never prepares against a half-updated session
                with contextlib.suppress(Exception):
                    await fut
                raise

    def _prepare(
        self, raw: bytes, session: Session, adapter: WireAdapter, route: str, limit: int | None
    ) -> tuple[WireRequest, TurnPlan]:
        body = parse_body(raw)
        if adapter.reuses_known:
            last = session.last_parse
            req = adapter.parse(body, known=last[1] if last and last[0] == adapter.name else None)
            session.last_parse = (adapter.name, req.known) if req.known is not None else None
        else:
            req = adapter.parse(body)
        if limit is not None and len(raw) > OFFLOAD_BYTES:
            chars = _text_chars(req)
            if chars > limit * self.token_chars():
                raise _too_long(f"the messages hold {chars} characters", limit)
        session.last_used = time.monotonic()
        return req, self.planner.plan(session, req, route=route)

    async def count_tokens(self, request: web.Request, adapter: AnthropicMessages) -> int:
        """Anthropic ``count_tokens``: the prompt's real token count, off the loop when big."""
        raw = await read_body(request)

        def count() -> int:
            req = adapter.parse(parse_body(raw), count_only=True)
            return int(self.chat_model.count_tokens(req.turn))

        if len(raw) <= OFFLOAD_BYTES:
            return count()
        return await asyncio.get_running_loop().run_in_executor(self._pool, count)

    def token_chars(self) -> int:
        """Characters of the longest token in the vocabulary (computed once)."""
        if self._token_chars is None:
            tok = getattr(getattr(self.chat_model, "renderer", None), "tokenizer", None)
            vocab = tok.get_vocab() if tok is not None else {}
            self._token_chars = max((len(t) for t in vocab), default=0) or 64
        return self._token_chars

    def close(self) -> None:
        """Stop the worker threads (calls being prepared finish first)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _text_chars(req: WireRequest) -> int:
    n = 0
    for m in req.turn.messages:
        n += len(m.get("content") or "") + len(m.get("reasoning_content") or "")
        for c in m.get("tool_calls") or ():
            n += len(str(c.get("function", {}).get("arguments", "")))
    return n


def _too_long(what: str, limit: int) -> WireError:
    return WireError(
        "invalid_request",
        f"{what}, more than a prompt of max_context_tokens={limit} tokens can hold (the "
        "model's context window unless the session policy sets max_context_tokens); shorten "
        "the messages",
        param="messages",
    )


async def read_body(request: web.Request) -> bytes:
    """The raw body; 413 past ``client_max_size``."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise WireError(
            "too_large",
            f"request body is larger than the gateway's limit of {request.app._client_max_size} bytes (max_body_bytes)",
        ) from exc


def parse_body(raw: bytes, *, allow_empty: bool = False) -> dict[str, Any]:
    """A raw body as a JSON object; 400 when it is not one."""
    if not raw and allow_empty:
        return {}
    try:
        body = _loads(raw)
    except RecursionError as exc:
        raise WireError(
            "invalid_request",
            "request body is nested too deeply to decode; send a flatter JSON object",
        ) from exc
    except ValueError as exc:
        raise WireError("invalid_request", f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise WireError("invalid_request", "request body must be a JSON object")
    return body


def _loads(raw: bytes) -> object:
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # what orjson refuses (NaN, lone surrogates, huge ints) json may accept
    value = json.loads(raw)
    _refuse_lone_surrogates(value)
    return value


def _refuse_lone_surrogates(value: object) -> None:
    """json decodes ``"\\ud800"`` into a string no UTF-8 codec (tokenizer, journal,
    response) can encode: refuse it here, as a bad request, not fail later."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"a string holds a lone UTF-16 surrogate ({item[exc.start]!r} at "
                    f"position {exc.start}); send valid Unicode text"
                ) from exc
