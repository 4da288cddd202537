"""The framework-adapter tests' engine and what they check with it: :class:`RecordingBackend`
(the scripted engine, noting how each call came in), the model and chat template the gateway
serves, and assertions on the recorded turns and sampling parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollhub_gateway.engines.scripted import ScriptedBackend, scripted_logprob

MODEL = "smollm2-135m-instruct"
TEMPLATE = Path(__file__).parents[3] / "examples" / "math" / "chatml_tools.jinja"


class RecordingBackend(ScriptedBackend):
    """The scripted engine, also noting how each call came in and with which parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    async def generate(self, prompt_ids: list[int], params: Any, *, turn: Any = None) -> Any:
        self.calls.append(("generate", params))
        return await super().generate(prompt_ids, params, turn=turn)

    def stream(self, prompt_ids: list[int], params: Any, *, turn: Any = None) -> Any:
        self.calls.append(("stream", params))
        return super().stream(prompt_ids, params, turn=turn)


def recorded(traces: list[Any]) -> list[tuple[list[int], list[float], str]]:
    """``(sampled ids, logprobs, drift)`` of every turn, in turn order."""
    out = {}
    for rec in traces:
        for t in rec.turns:
            out[t.turn_index] = (
                rec.response_ids[t.start : t.end],
                rec.response_logprobs[t.start : t.end],
                t.drift,
            )
    return [out[i] for i in sorted(out)]


def assert_two_turns(traces: list[Any], first: list[int], second: list[int]) -> None:
    """Both turns are recorded with the engine's exact ids and logprobs, the second appended."""
    turns = recorded(traces)
    assert [t[0] for t in turns] == [first, second]
    for got_ids, got_lps, _ in turns:
        assert got_lps == [scripted_logprob(i, tok) for i, tok in enumerate(got_ids)]
    assert turns[1][2] == "append"


def assert_sampling(scripted: RecordingBackend, mode: str) -> None:
    """Both calls came in as ``mode`` with the rollout's sampling parameters."""
    assert [m for m, _ in scripted.calls] == [mode, mode]
    for _, params in scripted.calls:
        assert (params.temperature, params.max_tokens, params.top_k) == (0.7, 128, 20)
