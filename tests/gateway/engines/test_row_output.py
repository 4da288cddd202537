"""A batch row's output: the tokens it keeps and emits, what ends it, what it ends with."""

from __future__ import annotations

from rollhub.sampling import Generation, SamplingParams, TokenChunk
from rollhub_gateway.engines.row_output import final_generation, take_token
from rollhub_gateway.engines.step_plan import Row


def _row(
    max_tokens: int = 8, stop_ids: frozenset[int] = frozenset(), stop: tuple[str, ...] = ()
) -> Row:
    return _row_and_emitted(max_tokens, stop_ids, stop)[0]


def _row_and_emitted(
    max_tokens: int = 8, stop_ids: frozenset[int] = frozenset(), stop: tuple[str, ...] = ()
) -> tuple[Row, list[object]]:
    emitted: list[object] = []
    row = Row(
        [1, 2, 3],
        SamplingParams(max_tokens=max_tokens, stop=stop),
        max_tokens,
        stop_ids,
        emitted.append,
        decode=lambda ids: " ".join(f"t{i}" for i in ids),
    )
    return row, emitted


def test_a_token_is_kept_and_emitted_and_the_row_goes_on():
    row, emitted = _row_and_emitted()
    assert take_token(row, 5, -0.5) is None
    assert row.token_ids == [5] and row.logprobs == [-0.5]
    assert row.first_token_at is not None
    (chunk,) = emitted
    assert isinstance(chunk, TokenChunk) and chunk.token_ids == [5] and chunk.logprobs == [-0.5]


def test_a_stop_id_a_stop_string_or_max_tokens_ends_the_row():
    assert take_token(_row(stop_ids=frozenset({9})), 9, -1.0) == "stop"
    assert take_token(_row(stop=("t4 t5",)), 4, -1.0) is None
    row = _row(stop=("t4 t5",))
    take_token(row, 4, -1.0)
    assert take_token(row, 5, -1.0) == "stop"
    row = _row(max_tokens=2)
    assert take_token(row, 4, -1.0) is None
    assert take_token(row, 4, -1.0) == "length"


def test_an_empty_stop_string_ends_nothing_as_the_gateways_cut_skips_it():
    row = _row(max_tokens=3, stop=("", "t9"))
    assert take_token(row, 4, -1.0) is None
    assert take_token(row, 5, -1.0) is None
    assert take_token(row, 9, -1.0) == "stop"


def test_the_final_generation_holds_the_tokens_the_reason_and_the_version():
    row = _row()
    take_token(row, 4, -0.25)
    take_token(row, 6, -0.75)
    gen = final_generation(row, "length", 3)
    assert isinstance(gen, Generation)
    assert gen.token_ids == [4, 6] and gen.logprobs == [-0.25, -0.75]
    assert gen.finish_reason == "length" and gen.weight_version == 3
    assert gen.metrics["prompt_tokens"] == 3 and gen.metrics["completion_tokens"] == 2
    assert 0 <= gen.metrics["ttft_s"] <= gen.metrics["total_s"]
    assert gen.token_ids is not row.token_ids  # the row's lists are not handed out
