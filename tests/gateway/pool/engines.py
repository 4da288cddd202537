"""The engine every pool replica builds in these tests (``engine_factory``).

Each reply names its session and turn (``"<policy> <session> turn <n>"``), so a test knows
exactly which ids every turn of every session must record, whichever replica served it;
logprobs are the scripted backend's function of position. ``engine.options.latency_s``
keeps a turn in flight long enough to kill its replica under it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rollhub.sampling import Generation, SamplingBackend, SamplingParams, TurnContext
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedOptions, scripted_logprob
from rollhub_gateway.models import load_tokenizer

#: the policy a fresh replica samples from
FIRST_POLICY = "p0"


def reply_text(session_id: str, turn_index: int, policy: str = FIRST_POLICY) -> str:
    """What the engine answers to turn ``turn_index`` of ``session_id``."""
    return f"{policy} {session_id} turn {turn_index}"


def reply_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids the engine samples for ``text`` (ChatML end marker included)."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [*tokenizer.encode(text, add_special_tokens=False), end]


class TurnEcho(SamplingBackend):
    """Answers each turn with :func:`reply_text`; takes strings as policies."""

    name = "turn-echo"
    Options = ScriptedOptions

    def __init__(self, tokenizer: Any, options: ScriptedOptions) -> None:
        super().__init__(options)
        self.tokenizer = tokenizer
        self.policy = FIRST_POLICY

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        assert turn is not None, "the gateway passes every turn's session"
        ids = reply_ids(self.tokenizer, reply_text(turn.session_id, turn.turn_index, self.policy))
        if self.options.latency_s:
            await asyncio.sleep(self.options.latency_s)
        return Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")

    def update_policy(self, policy: Any, weight_version: int) -> None:
        self.policy = str(policy)


def turn_echo(config: GatewayConfig) -> TurnEcho:
    """The ``engine_factory`` of the pool tests."""
    options = ScriptedOptions.model_validate(config.engine.options)
    return TurnEcho(load_tokenizer(config.model), options)
