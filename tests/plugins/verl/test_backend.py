"""The ``verl`` sampling backend against verl's ``LLMServerClient.generate`` contract.

The client here is a stand-in with the real method's signature and ``TokenOutput``'s fields
(``verl/workers/rollout/llm_server.py``, ``replica.py``); the verl-side suite runs the real
client and load balancer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from rollhub.errors import GatewayError
from rollhub.sampling import SamplingParams, TurnContext
from rollhub_verl.backend import VerlServerBackend, bind_server, binding


@dataclass
class TokenOutput:
    token_ids: list[int]
    log_probs: list[float] | None = None
    routed_experts: Any = None
    stop_reason: str | None = None
    num_preempted: int | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)


class Client:
    def __init__(self, output: TokenOutput | Exception) -> None:
        self.output = output
        self.calls: list[tuple[str, list[int], dict[str, Any]]] = []
        self.priorities: list[int | None] = []

    async def generate(
        self,
        request_id,
        *,
        prompt_ids,
        sampling_params,
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs=None,
        **kwargs,
    ):
        self.calls.append((request_id, prompt_ids, dict(sampling_params)))
        self.priorities.append(kwargs.get("priority"))
        if isinstance(self.output, Exception):
            raise self.output
        return self.output


TURN = TurnContext(session_id="g-0-abc", turn_index=1, weight_version=4)


async def test_session_id_is_the_sticky_request_id_and_step_the_weight_version():
    out = TokenOutput([5, 6], [-0.1, -0.2], stop_reason="completed",
                      extra_fields={"global_steps": 7, "num_cached_tokens": 3})  # fmt: skip
    client = Client(out)
    backend = VerlServerBackend(server=client)
    gen = await backend.generate([1, 2, 3], SamplingParams(max_tokens=8, temperature=0.5,
                                 stop_token_ids=(9,)), turn=TURN)  # fmt: skip
    ((request_id, prompt, params),) = client.calls
    assert request_id == "g-0-abc" and prompt == [1, 2, 3]
    assert params == {"max_tokens": 8, "temperature": 0.5, "top_p": 1.0, "top_k": -1,
                      "logprobs": True, "stop_token_ids": [9]}  # fmt: skip
    assert (gen.token_ids, gen.logprobs, gen.finish_reason) == ([5, 6], [-0.1, -0.2], "stop")
    assert gen.weight_version == 7 and gen.metrics["cached_tokens"] == 3


async def test_verl_sampling_of_the_session_wins_over_the_agents():
    client = Client(TokenOutput([5], [-0.1], stop_reason="completed"))
    binding().sessions[TURN.session_id] = {
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": -1,
        "repetition_penalty": 1.1,
        "logprobs": False,
        "priority": 12,
    }
    try:
        await VerlServerBackend(server=client).generate([1], SamplingParams(temperature=0.9),
                                                        turn=TURN)  # fmt: skip
    finally:
        binding().sessions.pop(TURN.session_id)
    params = client.calls[0][2]
    assert params["temperature"] == 0.0 and params["repetition_penalty"] == 1.1
    assert params["logprobs"] is True  # the gateway always needs them
    assert "priority" not in params and client.priorities == [12]


@pytest.mark.parametrize(
    ("stop", "n", "finish"),
    [("completed", 4, "length"), ("aborted", 1, "abort"), (None, 2, "stop")],
)
async def test_finish_reasons(stop, n, finish):
    client = Client(TokenOutput(list(range(n)), [-1.0] * n, stop_reason=stop))
    gen = await VerlServerBackend(server=client).generate([1], SamplingParams(max_tokens=4))
    assert gen.finish_reason == finish and gen.weight_version is None


async def test_missing_logprobs_and_engine_errors_are_gateway_errors():
    with pytest.raises(GatewayError, match="calculate_log_probs"):
        await VerlServerBackend(server=Client(TokenOutput([1, 2]))).generate([1], SamplingParams())
    with pytest.raises(GatewayError, match="RuntimeError: replica gone") as info:
        await VerlServerBackend(server=Client(RuntimeError("replica gone"))).generate(
            [1], SamplingParams(), turn=TURN
        )
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_unbound_backend_says_where_it_runs():
    saved = binding().server
    binding().server = None
    try:
        with pytest.raises(GatewayError, match="only runs inside a verl agent-loop worker"):
            await VerlServerBackend().generate([1], SamplingParams())
        bind_server(Client(TokenOutput([3], [-0.3])))
        gen = await VerlServerBackend().generate([1], SamplingParams())
        assert gen.token_ids == [3]
    finally:
        binding().server = saved
