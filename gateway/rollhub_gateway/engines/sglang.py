"""SGLang (or an SGLang router, e.g. the one slime launches) as the sampling backend.

Wire format (SGLang's native ``POST /generate``)::

    {"input_ids": [...], "rid": "<uuid>", "return_logprob": true, "stream": false,
     "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k",
                         "stop_token_ids", "stop", "sampling_seed",
                         "skip_special_tokens": false, "no_stop_trim": true}}

Reply: ``meta_info.output_token_logprobs`` as ``[logprob, token_id, text|null]`` per
generated token, ``meta_info.finish_reason.type`` (``stop``/``length``/``abort``),
``meta_info.completion_tokens`` and, on newer servers, ``meta_info.weight_version``. With
``stream: true`` the reply is SSE ``data:`` events ending in ``data: [DONE]``; by default
each event is *cumulative* (the whole list so far), with ``--incremental-streaming-output``
only the new part: the backend tells them apart by ``completion_tokens``.

``SamplingParams.extra["top_logprobs"] = k`` sends ``"top_logprobs_num": k``; the reply's
``meta_info.output_top_logprobs`` (per token a list of ``[logprob, token_id, text|null]``)
becomes ``Generation.metrics["top_logprobs"]``.

Logprobs are SGLang's: ``log_softmax(logits / T)`` of the sampled token by default
(``--return-logprob`` semantics of the server; see docs/engines.md).

Abort: closing a stream closes the connection (SGLang aborts a request whose client went
away) and, best-effort, sends ``POST /abort_request {"rid": ...}``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field
from rollhub.sampling import Generation, SamplingParams, TokenChunk, TurnContext

from .http_client import HTTPBackend, HTTPBackendOptions

log = logging.getLogger(__name__)

__all__ = ["SGLangBackend", "SGLangOptions"]

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


class SGLangOptions(HTTPBackendOptions):
    """Options of the SGLang backend."""

    base_url: str = Field("http://127.0.0.1:30000", description="SGLang server or router root")
    abort_on_close: bool = Field(True, description="POST /abort_request when a stream is closed")
    routing_key_header: str | None = Field(
        None,
        description="e.g. 'X-SMG-Routing-Key' for a consistent-hashing router; the value is "
        "SamplingParams.extra['routing_key']",
    )


class SGLangBackend(HTTPBackend):
    """SGLang's ``/generate`` with token ids in and ``output_token_logprobs`` out."""

    name = "sglang"
    Options = SGLangOptions
    options: SGLangOptions

    def _body(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        stream: bool,
        turn: TurnContext | None = None,
    ) -> dict[str, Any]:
        extra = dict(params.extra)
        top = int(extra.pop("top_logprobs", 0) or 0)
        # every turn of a session goes to the replica that holds its prefix
        routing_key = extra.pop("routing_key", turn.session_id if turn is not None else None)
        sampling: dict[str, Any] = {
            "max_new_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if params.stop_token_ids:
            sampling["stop_token_ids"] = list(params.stop_token_ids)
        if params.stop:
            sampling["stop"] = list(params.stop)
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        sampling.update(extra)
        body = {
            "input_ids": list(prompt_ids),
            "sampling_params": sampling,
            "return_logprob": True,
            "stream": stream,
            "rid": uuid.uuid4().hex,
        }
        if top:
            body["top_logprobs_num"] = top
        if routing_key is not None:
            body["_routing_key"] = str(routing_key)
        return body

    def _headers(self, body: dict[str, Any]) -> dict[str, str] | None:
        key = body.pop("_routing_key", None)
        if key is None or not self.options.routing_key_header:
            return None
        return {self.options.routing_key_header: key}

    def _triples(self, meta: dict[str, Any], url: str) -> tuple[list[int], list[float]]:
        triples = meta.get("output_token_logprobs")
        if not isinstance(triples, list):
            raise self._error(
                "reply lacks meta_info.output_token_logprobs (was return_logprob honoured?)",
                url=url,
                unreachable=False,
            )
        try:
            return [int(t[1]) for t in triples], [float(t[0]) for t in triples]
        except (TypeError, ValueError, IndexError) as exc:
            raise self._error(
                f"malformed output_token_logprobs: {triples[:3]!r}", url=url, unreachable=False
            ) from exc

    def _finish(self, meta: dict[str, Any], url: str) -> str:
        reason = meta.get("finish_reason")
        kind = reason.get("type") if isinstance(reason, dict) else reason
        if kind not in _FINISH:
            raise self._error(f"unknown finish_reason {reason!r}", url=url, unreachable=False)
        return _FINISH[kind]

    def _version(self, meta: dict[str, Any]) -> int | None:
        version = meta.get("weight_version")
        try:
            return int(version) if version is not None else self.options.weight_version
        except (TypeError, ValueError):
            return self.options.weight_version

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        """One ``/generate`` call, not streamed."""
        body = self._body(prompt_ids, params, stream=False, turn=turn)
        headers = self._headers(body)
        url = f"{self.base_url}/generate"
        data = await self._post_json("/generate", body, headers=headers)
        meta = data.get("meta_info") or {}
        ids, logprobs = self._triples(meta, url)
        return Generation(
            ids, logprobs, self._finish(meta, url), self._version(meta), _metrics(meta, len(ids))
        )

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> AsyncIterator[TokenChunk | Generation]:
        """Stream ``/generate``; closing early closes the connection and aborts the rid."""
        body = self._body(prompt_ids, params, stream=True, turn=turn)
        headers = self._headers(body)
        url = f"{self.base_url}/generate"
        ids: list[int] = []
        logprobs: list[float] = []
        final: Generation | None = None
        try:
            async with self._post("/generate", body, headers=headers) as resp:
                async for event in self._sse(resp):
                    meta = event.get("meta_info") or {}
                    got_ids, got_lps = self._triples(meta, url)
                    total = int(meta.get("completion_tokens", len(ids) + len(got_ids)))
                    if len(got_ids) == total and got_ids[: len(ids)] == ids:
                        got_ids, got_lps = got_ids[len(ids) :], got_lps[len(ids) :]
                    elif len(ids) + len(got_ids) != total:
                        raise self._error(
                            f"stream event with {len(got_ids)} tokens fits neither cumulative nor "
                            f"incremental output (completion_tokens={total}, seen {len(ids)})",
                            url=url,
                            unreachable=False,
                        )
                    if got_ids:
                        ids += got_ids
                        logprobs += got_lps
                        yield TokenChunk(got_ids, got_lps)
                    if meta.get("finish_reason"):
                        final = Generation(
                            list(ids),
                            list(logprobs),
                            self._finish(meta, url),
                            self._version(meta),
                            _metrics(meta, len(ids)),
                        )
            if final is None:
                raise self._error(
                    "stream ended without a finish_reason", url=url, unreachable=False
                )
            yield final
        finally:
            if final is None and self.options.abort_on_close:
                await self._abort(body["rid"])

    async def _abort(self, rid: str) -> None:
        """Best effort: the connection is already closed, which SGLang also treats as abort."""
        import aiohttp

        if self._session is None or self._session.closed:
            return
        try:
            async with self._session.post(
                f"{self.base_url}/abort_request",
                json={"rid": rid},
                timeout=aiohttp.ClientTimeout(total=self.options.connect_timeout_s),
            ) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.debug("abort_request for %s failed: %r", rid, exc)


def _metrics(meta: dict[str, Any], n: int) -> dict[str, Any]:
    keys = ("prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency", "id")
    out = {k: meta[k] for k in keys if k in meta}
    rows = meta.get("output_top_logprobs")
    # the last n rows: a cumulative final event holds them all, an incremental one may not
    if isinstance(rows, list) and len(rows) >= n:
        out["top_logprobs"] = [
            [{"logprob": float(a[0]), "token_id": int(a[1])} for a in (row or [])]
            for row in rows[len(rows) - n :]
        ]
    return out
