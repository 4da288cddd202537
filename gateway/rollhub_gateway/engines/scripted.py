"""A scripted sampling backend: returns given token ids, for tests that need exact output.

Each call pops the next script entry (a list of token ids, or a callable of the prompt ids
returning one); with the script empty, the ``reply`` option answers (a gateway built from
config). Logprobs are deterministic functions of position so a test can check they were
carried through unchanged. A trainer's published policies are kept in ``published``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from pydantic import Field
from rollhub.errors import GatewayError
from rollhub.sampling import (
    Generation,
    SamplingBackend,
    SamplingBackendOptions,
    SamplingParams,
    TokenChunk,
    TurnContext,
)

Script = list[int] | Callable[[list[int]], list[int]]


class ScriptedOptions(SamplingBackendOptions):
    """Options of the scripted backend."""

    token_delay_s: float = Field(0.0, ge=0, description="sleep per generated token")
    latency_s: float = Field(0.0, ge=0, description="sleep before the first token")
    reply: list[int] | None = Field(
        None, description="ids every call returns once the script is empty (None: an error)"
    )


def scripted_logprob(position: int, token_id: int) -> float:
    """The logprob the scripted backend reports for ``token_id`` at ``position``."""
    return -((position * 7919 + token_id) % 1000) / 997.0 - 0.001


def scripted_top_logprobs(position: int, token_id: int, k: int) -> list[dict[str, Any]]:
    """The ``k`` alternatives reported at ``position`` (``extra["top_logprobs"] = k``): the
    sampled token first, then ids ``token_id + 1 …`` each one nat less likely."""
    lp = scripted_logprob(position, token_id)
    return [{"token_id": token_id + j, "logprob": lp - j} for j in range(k)]


class ScriptedBackend(SamplingBackend):
    """Replays scripted outputs; records every prompt it was given in ``prompts`` and the
    turn each call served in ``turns``."""

    name = "scripted"
    Options = ScriptedOptions
    options: ScriptedOptions

    def __init__(
        self,
        options: ScriptedOptions | None = None,
        *,
        script: Iterable[Script] = (),
        **kwargs: object,
    ) -> None:
        super().__init__(options, **kwargs)
        self.script: deque[Script] = deque(script)
        self.prompts: list[list[int]] = []
        self.turns: list[TurnContext | None] = []
        self.aborted = 0
        #: ``(policy, version)`` of every :meth:`update_policy` call
        self.published: list[tuple[Any, int]] = []

    def add(self, *entries: Script) -> None:
        """Append outputs to the script."""
        self.script.extend(entries)

    def _next(self, prompt_ids: list[int], params: SamplingParams) -> tuple[list[int], str]:
        if not self.script and self.options.reply is not None:
            self.script.append(list(self.options.reply))
        if not self.script:
            raise GatewayError("scripted backend ran out of scripted outputs")
        entry = self.script.popleft()
        ids = list(entry(prompt_ids) if callable(entry) else entry)
        finish = "stop"
        if len(ids) > params.max_tokens:
            ids, finish = ids[: params.max_tokens], "length"
        return ids, finish

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        self.prompts.append(list(prompt_ids))
        self.turns.append(turn)
        ids, finish = self._next(prompt_ids, params)
        delay = self.options.latency_s + self.options.token_delay_s * len(ids)
        if delay:
            await asyncio.sleep(delay)
        lps = [scripted_logprob(i, t) for i, t in enumerate(ids)]
        return Generation(ids, lps, finish, metrics=_tops(ids, params))

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> AsyncIterator[TokenChunk | Generation]:
        self.prompts.append(list(prompt_ids))
        self.turns.append(turn)
        ids, finish = self._next(prompt_ids, params)
        if self.options.latency_s:
            await asyncio.sleep(self.options.latency_s)
        lps = [scripted_logprob(i, t) for i, t in enumerate(ids)]
        try:
            for i, t in enumerate(ids):
                if self.options.token_delay_s:
                    await asyncio.sleep(self.options.token_delay_s)
                yield TokenChunk([t], [lps[i]])
        except (GeneratorExit, asyncio.CancelledError):
            self.aborted += 1
            raise
        yield Generation(ids, lps, finish, metrics=_tops(ids, params))


    def update_policy(self, policy: object, weight_version: int) -> None:
        """Keep ``(policy, weight_version)`` in :attr:`published` (the outputs stay scripted)."""
        self.published.append((policy, weight_version))


def _tops(ids: list[int], params: SamplingParams) -> dict[str, Any]:
    k = int(params.extra.get("top_logprobs") or 0)
    if not k:
        return {}
    return {"top_logprobs": [scripted_top_logprobs(i, t, k) for i, t in enumerate(ids)]}
