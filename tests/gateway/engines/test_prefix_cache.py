"""Prefix reuse and weight swaps in the embedded engine.

The cache's bookkeeping is tested on plain tensors; the engine tests use the real SmolLM2
model and check what matters to a trainer: a turn served from cached states samples the
same ids with the same logprobs as one prefilled from scratch, and new weights never mix
into a row that started on the old ones.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from rollhub.sampling import Generation, SamplingParams
from rollhub_gateway.engines.kv_store import Span
from rollhub_gateway.engines.prefix_cache import (
    MIN_REUSE,
    PrefixCache,
    common_prefix,
    waits_for_prefill,
)
from rollhub_gateway.engines.transformers_engine import TransformersBackend, TransformersOptions

from tests.gateway.engines.test_engine_transformers import QUESTIONS, forward_logprobs

SYSTEM = (
    "<|im_start|>system\nYou are a patient teacher. Answer in plain words, one short "
    "paragraph at most, and never use lists or headings in your replies.<|im_end|>\n"
)


def _span(n: int, tag: float = 0.0) -> Span:
    """A fake span of two layers whose position i holds the value i + tag."""
    pos = torch.arange(n, dtype=torch.float32).view(1, 1, n, 1) + tag
    keys = pos.expand(2, 1, n, 1).clone()
    return Span(keys, -keys, n)


def test_common_prefix() -> None:
    assert common_prefix((1, 2, 3, 4), [1, 2, 3, 4]) == 4
    assert common_prefix((1, 2, 3, 4), [1, 2, 9, 4, 5]) == 2
    assert common_prefix((1, 2), [1, 2, 3]) == 2
    assert common_prefix((5,), [1]) == 0
    assert common_prefix((), [1]) == 0
    long = tuple(range(1000))
    assert common_prefix(long, [*range(777), -1]) == 777


def test_lookup_returns_the_longest_shared_prefix_and_forwards_one_token() -> None:
    cache = PrefixCache(10_000)
    prompt = list(range(100))
    cache.store(prompt[:40], _span(40), 40)
    diverging = _span(72, tag=0.5)
    cache.store([*prompt[:70], 999, 998], diverging, 72)  # diverges after 70
    hit = cache.lookup(prompt)
    assert hit is not None and hit.length == 70 and hit.span is diverging
    assert hit.span_len == 70 and hit.tail is None  # a prefix of the span: nothing to copy
    # the whole prompt cached: one token is still forwarded, for its logits
    cache.store(prompt, _span(100), 100)
    hit = cache.lookup(prompt)
    assert hit is not None and hit.length == 99


def test_a_prompt_waits_for_a_prefill_that_shares_more_than_the_cache_holds() -> None:
    prompt = list(range(100))
    building = [*range(60), 7, 7]  # shares 60 tokens with the prompt
    assert not waits_for_prefill(prompt, [], None)
    assert not waits_for_prefill(prompt, [[*range(MIN_REUSE - 1), 7]], None)  # too short
    assert waits_for_prefill(prompt, [building], None)
    cache = PrefixCache(10_000)
    assert waits_for_prefill(prompt, [building], cache)  # the cache holds nothing of it
    cache.store(prompt[:50], _span(50), 50)
    assert not waits_for_prefill(prompt, [building], cache)  # 60 is not 50 + MIN_REUSE
    assert waits_for_prefill(prompt, [[*range(80)]], cache)
    # its own last token never counts: the same prompt shares len - 1
    assert waits_for_prefill(prompt, [prompt], None)
    assert not waits_for_prefill(prompt[:MIN_REUSE], [prompt], None)
    assert cache.stats["hits"] == cache.stats["misses"] == 0  # deciding is not a lookup


def test_an_entry_is_a_shared_span_then_a_private_tail() -> None:
    cache = PrefixCache(10_000)
    shared = _span(50)
    tail = _span(20, tag=100.0)
    turn = [*range(50), *range(500, 520)]  # the group's prompt, then one row's own tokens
    cache.store(turn, shared, 50, tail)
    within = cache.lookup([*range(45), 7, 7])  # another row of the group: the span only
    assert within is not None and (within.length, within.span_len, within.tail) == (45, 45, None)
    beyond = cache.lookup([*turn, 1, 2, 3])  # the session's next turn: span, then tail
    assert beyond is not None and beyond.span is shared and beyond.span_len == 50
    assert beyond.tail is tail and beyond.tail_len == 20 and beyond.length == 70
    assert cache.tokens == 70


def test_short_matches_are_misses() -> None:
    cache = PrefixCache(10_000)
    cache.store(list(range(MIN_REUSE - 1)), _span(MIN_REUSE - 1), MIN_REUSE - 1)
    assert cache.lookup(list(range(50))) is None
    assert cache.stats["misses"] == 1
    assert cache.lookup(list(range(50)), count=False) is None
    assert cache.stats["misses"] == 1  # a peek counts nothing


def test_a_longer_entry_replaces_its_prefixes_and_old_entries_are_evicted() -> None:
    cache = PrefixCache(100)
    first = _span(30)
    cache.store(list(range(30)), first, 30)
    cache.store(list(range(50)), first, 30, _span(20))
    assert len(cache) == 1 and cache.tokens == 50  # the 30-token entry was a prefix
    cache.store([*range(30), 7, 7], first, 30, _span(2))  # the shared span counts once
    assert len(cache) == 2 and cache.tokens == 52
    cache.store([7] * 40, _span(40), 40)
    cache.store([8] * 40, _span(40), 40)  # 132 tokens > 100: the least recently used go
    assert cache.tokens <= 100
    assert cache.lookup(list(range(60))) is None
    cache.clear()
    assert len(cache) == 0 and cache.tokens == 0


@pytest.fixture(scope="module")
def engine() -> TransformersBackend:
    backend = TransformersBackend(
        TransformersOptions(max_batch_size=8, threads=1, prefix_cache_tokens=8192)
    )
    backend._load()
    yield backend
    assert backend.engine is not None
    backend.engine.stop()


async def test_a_group_and_its_second_turns_reuse_states_with_exact_logprobs(
    engine: TransformersBackend,
) -> None:
    tok = engine.tokenizer
    prompt = tok.encode(
        f"{SYSTEM}<|im_start|>user\n{QUESTIONS[2]}<|im_end|>\n<|im_start|>assistant\n"
    )
    cache = engine.engine.prefix_cache
    assert cache is not None
    cache.clear()
    stats = engine.engine.stats
    before = dict(cache.stats)
    forwarded = stats["prefill_tokens"]
    params = SamplingParams(max_tokens=12, temperature=0.7)
    first = await asyncio.gather(*(engine.generate(prompt, params) for _ in range(4)))
    # the group's prompt was forwarded once; a sample that joined after that prefill
    # forwards only the prompt's last token (for its own logits)
    assert stats["prefill_tokens"] - forwarded <= len(prompt) + 3
    tail = tok.encode(
        "<|im_end|>\n<|im_start|>user\nAnd in one word?<|im_end|>\n<|im_start|>assistant\n"
    )
    forwarded = stats["prefill_tokens"]
    second = await asyncio.gather(
        *(engine.generate(prompt + g.token_ids + tail, params) for g in first)
    )
    # each second turn forwarded only its new tokens: the last sampled token of its first
    # turn (never forwarded) and the tail
    assert stats["prefill_tokens"] - forwarded <= 4 * (1 + len(tail))
    # one lookup per distinct second turn (two samples alike join as one prompt)
    distinct = {tuple(g.token_ids): g for g in first}
    assert cache.stats["hits"] - before["hits"] >= len(distinct), cache.stats
    reused = cache.stats["reused_tokens"] - before["reused_tokens"]
    assert reused >= sum(len(prompt) + len(g.token_ids) - 1 for g in distinct.values())
    for g, g2 in zip(first, second, strict=True):
        for p, gen in ((prompt, g), (prompt + g.token_ids + tail, g2)):
            ref, _ = forward_logprobs(engine, p, gen.token_ids, 0.7)
            assert max(abs(a - b) for a, b in zip(gen.logprobs, ref.tolist(), strict=True)) < 1e-3


async def test_greedy_ids_are_the_same_with_and_without_the_cache(
    engine: TransformersBackend,
) -> None:
    tok = engine.tokenizer
    prompt = tok.encode(
        f"{SYSTEM}<|im_start|>user\n{QUESTIONS[3]}<|im_end|>\n<|im_start|>assistant\n"
    )
    params = SamplingParams(max_tokens=16, temperature=0.0)
    engine.engine.prefix_cache.clear()
    cold = await engine.generate(prompt, params)
    warm = await engine.generate(prompt, params)  # served from the cached prompt
    assert engine.engine.prefix_cache.stats["hits"] >= 1
    assert warm.token_ids == cold.token_ids
    assert max(abs(a - b) for a, b in zip(warm.logprobs, cold.logprobs, strict=True)) < 1e-3


async def test_new_weights_wait_for_rows_in_flight_and_stamp_the_new_version(
    engine: TransformersBackend,
) -> None:
    tok = engine.tokenizer
    prompt = tok.encode(f"<|im_start|>user\n{QUESTIONS[4]}<|im_end|>\n<|im_start|>assistant\n")
    long = SamplingParams(max_tokens=24, temperature=0.0, extra={"ignore_eos": True})
    before = await engine.generate(prompt, long)
    norm = "model.norm.weight"
    original = dict(engine.model.named_parameters())[norm].detach().clone()
    flipped = {norm: -original}  # negated final norm: a different argmax everywhere
    started = asyncio.Event()

    async def decode_old() -> Generation:
        async for item in engine.stream(prompt, long):
            started.set()  # its first token is out: the row is decoding
            if isinstance(item, Generation):
                return item
        raise AssertionError("the stream ended without a generation")

    in_flight = asyncio.ensure_future(decode_old())
    await started.wait()
    engine.update_policy(flipped, 7)
    after = await engine.generate(prompt, long)
    old = await in_flight
    try:
        # the row that was decoding finished on the old weights, under the old version
        assert old.token_ids == before.token_ids and old.weight_version != 7
        assert after.weight_version == 7 and after.token_ids != before.token_ids
    finally:
        engine.update_policy({norm: original}, 0)
        await engine.generate(prompt, SamplingParams(max_tokens=1, temperature=0.0))
    with pytest.raises(Exception, match="lacks"):
        engine.update_policy({"no.such.weight": original}, 8)
    with pytest.raises(Exception, match="mapping"):
        engine.update_policy(object(), 8)


async def test_a_module_policy_is_sampled_from_as_it_is_and_in_place_steps_show(
    engine: TransformersBackend,
) -> None:
    from rollhub_gateway.models import load_causal_lm
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = engine.tokenizer
    prompt = tok.encode(f"<|im_start|>user\n{QUESTIONS[1]}<|im_end|>\n<|im_start|>assistant\n")
    greedy = SamplingParams(max_tokens=16, temperature=0.0, extra={"ignore_eos": True})
    own = engine.model
    before = await engine.generate(prompt, greedy)
    trained, _ = load_causal_lm(engine.options.model)  # a trainer's own copy
    try:
        engine.update_policy(trained, 3)
        same = await engine.generate(prompt, greedy)
        assert engine.engine.model is trained and engine.model is trained  # no copy
        assert same.weight_version == 3 and same.token_ids == before.token_ids
        with torch.no_grad():  # a trainer's step, in place, then the new version published
            trained.model.norm.weight.neg_()
        engine.update_policy(trained, 4)
        misses = engine.engine.prefix_cache.stats["misses"]
        after = await engine.generate(prompt, greedy)
        assert after.weight_version == 4 and after.token_ids != before.token_ids
        # the states of version 3 were dropped: the same prompt was a miss
        assert engine.engine.prefix_cache.stats["misses"] == misses + 1
    finally:
        engine.update_policy(own, 0)
        await engine.generate(prompt, SamplingParams(max_tokens=1, temperature=0.0))
    assert engine.engine.model is own
    other = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=100,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    with pytest.raises(Exception, match="vocabulary"):
        engine.update_policy(other, 9)


async def test_a_step_that_changed_nothing_relabels_the_weights_not_the_turns_in_flight(
    engine: TransformersBackend,
) -> None:
    """A training step with no signal publishes no weights but a new version: the turns
    sampled after it carry that version (they are not stale), and a version set while new
    weights wait to be applied does not label the old weights with it."""
    tok = engine.tokenizer
    prompt = tok.encode(f"<|im_start|>user\n{QUESTIONS[2]}<|im_end|>\n<|im_start|>assistant\n")
    greedy = SamplingParams(max_tokens=4, temperature=0.0)
    norm = "model.norm.weight"
    original = dict(engine.model.named_parameters())[norm].detach().clone()
    try:
        engine.update_policy({norm: original}, 5)
        assert (await engine.generate(prompt, greedy)).weight_version == 5
        engine.set_weight_version(6)  # the step trained nothing: same weights, version 6
        assert (await engine.generate(prompt, greedy)).weight_version == 6
        long = SamplingParams(max_tokens=24, temperature=0.0, extra={"ignore_eos": True})
        started = asyncio.Event()

        async def decode_old() -> Generation:
            async for item in engine.stream(prompt, long):
                started.set()
                if isinstance(item, Generation):
                    return item
            raise AssertionError("the stream ended without a generation")

        in_flight = asyncio.ensure_future(decode_old())
        await started.wait()
        engine.update_policy({norm: original * 1.0}, 7)  # waits for the row above
        engine.set_weight_version(7)  # what the hub does right after publishing
        old = await in_flight
        assert old.weight_version == 6  # the old weights keep their version
        assert (await engine.generate(prompt, greedy)).weight_version == 7
    finally:
        engine.update_policy({norm: original}, 0)
        await engine.generate(prompt, SamplingParams(max_tokens=1, temperature=0.0))
