"""vLLM's OpenAI-compatible server as the sampling backend, token ids in and out.

Wire format (``POST /v1/completions``, documented in vLLM's OpenAI-compatible server)::

    {"model": ..., "prompt": [<token ids>], "max_tokens", "temperature", "top_p",
     "top_k", "seed", "stop_token_ids", "stop", "logprobs": 1, "return_token_ids": true,
     "skip_special_tokens": false, "include_stop_str_in_output": true, "stream": ...}

A list of ints as ``prompt`` is taken as token ids verbatim (no re-tokenisation). The reply's
``choices[0].token_ids`` (vLLM >= 0.10.2, ``return_token_ids``) are the sampled ids and
``choices[0].logprobs.token_logprobs`` their logprobs; ``finish_reason`` is ``stop``,
``length`` or ``abort``. Older servers started with ``--return-tokens-as-token-ids`` spell the
ids as ``"token_id:<n>"`` in ``logprobs.tokens``; that is the fallback. Ids are never
recovered from text: a reply without either is an error.

Logprobs are whatever the server's ``--logprobs-mode`` says: ``raw_logprobs`` (default: the
model's distribution before temperature) or ``processed_logprobs`` (after temperature and
top-k/top-p). Start vLLM with ``--logprobs-mode processed_logprobs`` to get the sampling
distribution (docs/engines.md).

``SamplingParams.extra["top_logprobs"] = k`` asks for ``"logprobs": k``; the reply's
``logprobs.top_logprobs`` (per token a ``{token text: logprob}`` map, keys spelled
``"token_id:<n>"`` by servers started with ``--return-tokens-as-token-ids``) becomes
``Generation.metrics["top_logprobs"]``.

Streaming is SSE: each ``data:`` event carries the new ``token_ids`` and ``token_logprobs``
of ``choices[0]``; the stream ends with ``data: [DONE]``. Closing the stream closes the
connection, and vLLM aborts a request whose client disconnected.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field
from rollhub.sampling import Generation, SamplingParams, TokenChunk, TurnContext

from .http_client import HTTPBackend, HTTPBackendOptions

log = logging.getLogger(__name__)

__all__ = ["VLLMBackend", "VLLMOptions"]

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


class VLLMOptions(HTTPBackendOptions):
    """Options of the vLLM backend."""

    base_url: str = Field("http://127.0.0.1:8000", description="vLLM server root (without /v1)")
    model: str = Field(..., description="the served model name (vLLM's --served-model-name)")


class VLLMBackend(HTTPBackend):
    """vLLM's ``/v1/completions`` with a token-id prompt and ``return_token_ids``."""

    name = "vllm"
    Options = VLLMOptions
    options: VLLMOptions

    def _body(self, prompt_ids: list[int], params: SamplingParams, stream: bool) -> dict[str, Any]:
        extra = dict(params.extra)
        top = int(extra.pop("top_logprobs", 0) or 0)
        body: dict[str, Any] = {
            "model": self.options.model,
            "prompt": list(prompt_ids),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": max(1, top),
            "return_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "stream": stream,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        if params.stop:
            body["stop"] = list(params.stop)
        body.update(extra)
        return body

    def _choice(self, data: dict[str, Any], url: str) -> dict[str, Any] | None:
        choices = data.get("choices")
        if not isinstance(choices, list):
            raise self._error("reply lacks 'choices'", url=url, unreachable=False)
        return choices[0] if choices else None  # a usage-only stream event has none

    def _tokens(self, choice: dict[str, Any], url: str) -> tuple[list[int], list[float]]:
        lp = choice.get("logprobs") or {}
        logprobs = lp.get("token_logprobs")
        ids = choice.get("token_ids")
        if ids is None and isinstance(lp.get("tokens"), list):
            try:
                ids = [int(str(t).removeprefix("token_id:")) for t in lp["tokens"]]
            except ValueError:
                ids = None
        if ids is None:
            raise self._error(
                "reply has no token ids: needs vLLM >= 0.10.2 (return_token_ids) or a server "
                "started with --return-tokens-as-token-ids",
                url=url,
                unreachable=False,
            )
        if not isinstance(logprobs, list) or len(logprobs) != len(ids):
            raise self._error(
                f"reply has {len(ids)} token ids but logprobs {logprobs!r:.200}",
                url=url,
                unreachable=False,
            )
        return [int(i) for i in ids], [float(x) for x in logprobs]

    def _tops(self, choice: dict[str, Any]) -> list[list[dict[str, Any]]]:
        """The alternatives of each token in ``choice`` (empty when the reply has none)."""
        rows = (choice.get("logprobs") or {}).get("top_logprobs")
        if not isinstance(rows, list):
            return []
        out = []
        for row in rows:
            alts = []
            for key, lp in (row or {}).items():
                alt: dict[str, Any] = {"logprob": float(lp)}
                if str(key).startswith("token_id:") and str(key)[9:].isdigit():
                    alt["token_id"] = int(str(key)[9:])
                else:
                    alt["token"] = str(key)
                alts.append(alt)
            out.append(alts)
        return out

    def _finish(self, reason: object, url: str) -> str:
        if reason not in _FINISH:
            raise self._error(f"unknown finish_reason {reason!r}", url=url, unreachable=False)
        return _FINISH[reason]

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        """One ``/v1/completions`` call, not streamed."""
        url = f"{self.base_url}/v1/completions"
        data = await self._post_json("/v1/completions", self._body(prompt_ids, params, False))
        choice = self._choice(data, url)
        if choice is None:
            raise self._error("reply has no choices", url=url, unreachable=False)
        ids, logprobs = self._tokens(choice, url)
        metrics: dict[str, Any] = {"usage": data.get("usage"), "id": data.get("id")}
        if params.extra.get("top_logprobs"):
            metrics["top_logprobs"] = self._tops(choice)
        return Generation(
            ids,
            logprobs,
            self._finish(choice.get("finish_reason"), url),
            self.options.weight_version,
            metrics,
        )

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> AsyncIterator[TokenChunk | Generation]:
        """Stream ``/v1/completions`` over SSE; closing early disconnects (vLLM aborts)."""
        url = f"{self.base_url}/v1/completions"
        ids: list[int] = []
        logprobs: list[float] = []
        tops: list[list[dict[str, Any]]] = []
        finish: str | None = None
        body = self._body(prompt_ids, params, True)
        async with self._post("/v1/completions", body) as resp:
            async for event in self._sse(resp):
                choice = self._choice(event, url)
                if choice is None:
                    continue
                if choice.get("token_ids") or (choice.get("logprobs") or {}).get("tokens"):
                    new_ids, new_lps = self._tokens(choice, url)
                    ids += new_ids
                    logprobs += new_lps
                    tops += self._tops(choice)
                    yield TokenChunk(new_ids, new_lps)
                if choice.get("finish_reason") is not None:
                    finish = self._finish(choice["finish_reason"], url)
        if finish is None:
            raise self._error("stream ended without a finish_reason", url=url, unreachable=False)
        metrics = {"top_logprobs": tops} if params.extra.get("top_logprobs") else {}
        yield Generation(ids, logprobs, finish, self.options.weight_version, metrics)
