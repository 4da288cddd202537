"""The embedded transformers engine with the real SmolLM2-135M-Instruct model."""

from __future__ import annotations

import asyncio
import gc
import itertools
import time

import pytest
import torch
from rollhub.errors import GatewayError
from rollhub.sampling import Generation, SamplingParams, TokenChunk
from rollhub_gateway.engines import batching
from rollhub_gateway.engines.kv_store import Span
from rollhub_gateway.engines.step_plan import Row
from rollhub_gateway.engines.transformers_engine import TransformersBackend

pytestmark = pytest.mark.slow

QUESTIONS = [
    "Write a haiku about rust.",
    "Name three rivers in Europe.",
    "Explain recursion briefly.",
    "What is a prime number?",
    "Describe the colour blue to a child.",
    "List two uses of copper.",
]


def forward_logprobs(backend: TransformersBackend, prompt: list[int], ids: list[int], t: float):
    """log_softmax(logits / t) of ``ids`` from one fresh forward pass over prompt + ids."""
    full = torch.tensor([prompt + ids])
    with torch.inference_mode():
        logits = backend.model(input_ids=full).logits[0].float()
    rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(ids)]
    lps = torch.log_softmax(rows / t, dim=-1)
    return lps.gather(1, torch.tensor(ids)[:, None]).squeeze(1), rows.argmax(dim=-1)


async def test_greedy_logprobs_match_a_forward_pass(smollm: TransformersBackend, chat_ids) -> None:
    prompt = chat_ids(QUESTIONS[0])
    gen = await smollm.generate(prompt, SamplingParams(max_tokens=16, temperature=0.0))
    assert len(gen.token_ids) == len(gen.logprobs) == 16 and gen.finish_reason == "length"
    ref, argmax = forward_logprobs(smollm, prompt, gen.token_ids, 1.0)
    assert gen.token_ids == argmax.tolist()
    assert max(abs(a - b) for a, b in zip(gen.logprobs, ref.tolist(), strict=True)) < 1e-3


async def test_temperature_logprobs_are_log_softmax_of_scaled_logits(
    smollm: TransformersBackend, chat_ids
) -> None:
    prompt = chat_ids(QUESTIONS[1])
    params = SamplingParams(max_tokens=16, temperature=0.7, seed=3)
    gen = await smollm.generate(prompt, params)
    ref, _ = forward_logprobs(smollm, prompt, gen.token_ids, 0.7)
    assert max(abs(a - b) for a, b in zip(gen.logprobs, ref.tolist(), strict=True)) < 1e-3
    ref_t1, _ = forward_logprobs(smollm, prompt, gen.token_ids, 1.0)
    # the reported value is the T=0.7 distribution, not the raw one
    assert max(abs(a - b) for a, b in zip(gen.logprobs, ref_t1.tolist(), strict=True)) > 1e-2


async def test_batched_greedy_equals_unbatched(smollm: TransformersBackend, chat_ids) -> None:
    prompts = [chat_ids(q) for q in QUESTIONS]
    params = SamplingParams(max_tokens=16, temperature=0.0)
    alone = [await smollm.generate(p, params) for p in prompts]
    assert all(g.metrics["max_batch"] <= 1 for g in alone)
    together = await asyncio.gather(*(smollm.generate(p, params) for p in prompts))
    assert max(g.metrics["max_batch"] for g in together) >= 4  # they really shared passes
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids
        assert a.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3


async def test_an_idle_engine_holds_no_key_value_slots(
    smollm: TransformersBackend, chat_ids, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the main job trains while the engine waits: its slots must not hold memory meanwhile,
    # nor malloc's arenas the pages the batch freed
    released: list[float] = []
    monkeypatch.setattr(batching, "release_free_memory", lambda: released.append(1.0) or True)
    params = SamplingParams(max_tokens=8, temperature=0.0)
    prompts = [chat_ids(q) for q in QUESTIONS[:3]]
    first = await asyncio.gather(*(smollm.generate(p, params) for p in prompts))
    engine = smollm.engine
    assert engine is not None
    deadline = time.monotonic() + 5
    while engine.slots.nbytes and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the engine thread releases them after its last row left
    assert engine.slots.nbytes == 0
    assert released, "the engine did not hand the emptied batch's pages back"
    again = await asyncio.gather(*(smollm.generate(p, params) for p in prompts))
    assert [g.token_ids for g in again] == [g.token_ids for g in first]


async def test_a_finished_row_frees_its_states_without_the_cycle_collector(
    smollm: TransformersBackend, chat_ids
) -> None:
    # A row's key/value states are megabytes: if a finished row sat in a reference cycle,
    # they would stay resident until a full collection, which a process with half a million
    # objects runs rarely (the main job's live tensors grew ~35 MB a step, its resident set ~40).
    params = SamplingParams(max_tokens=6, temperature=0.7)
    prompt = chat_ids(QUESTIONS[1])
    engine = smollm.engine
    assert engine is not None and engine.prefix_cache is not None
    gc.collect()
    gc.disable()
    try:
        await asyncio.gather(*(smollm.generate(prompt, params) for _ in range(3)))
        deadline = time.monotonic() + 5
        while engine.slots.nbytes and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        engine.prefix_cache.clear()  # what a weight update does between steps
        alive = [type(o).__name__ for o in gc.get_objects() if type(o) in (Row, Span)]
    finally:
        gc.enable()
    assert alive == []


async def test_stream_yields_tokens_before_the_generation_ends(
    smollm: TransformersBackend, chat_ids
) -> None:
    prompt = chat_ids(QUESTIONS[2])
    arrivals: list[tuple[float, TokenChunk | Generation]] = []
    start = time.perf_counter()
    async for item in smollm.stream(prompt, SamplingParams(max_tokens=16, temperature=0.0)):
        arrivals.append((time.perf_counter(), item))
    chunks = [i for _, i in arrivals if isinstance(i, TokenChunk)]
    final = arrivals[-1][1]
    assert isinstance(final, Generation) and len(chunks) == 16
    assert [t for c in chunks for t in c.token_ids] == final.token_ids
    assert [x for c in chunks for x in c.logprobs] == final.logprobs
    # the first token arrived well before the last: tokens are streamed as produced
    total = arrivals[-1][0] - start
    assert arrivals[0][0] - start < 0.5 * total
    assert arrivals[7][0] - start < 0.8 * total  # half the tokens came well before the end
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(arrivals))


async def test_closing_a_stream_aborts_the_row(smollm: TransformersBackend, chat_ids) -> None:
    engine = smollm.engine
    assert engine is not None
    prompt = chat_ids(QUESTIONS[3])
    before = engine.stats["tokens"]
    agen = smollm.stream(prompt, SamplingParams(max_tokens=400, temperature=0.0))
    got = 0
    async for item in agen:
        assert isinstance(item, TokenChunk)
        got += 1
        if got == 3:
            break
    await agen.aclose()
    deadline = time.monotonic() + 5
    while engine.active and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert engine.active == 0
    settled = engine.stats["tokens"]
    await asyncio.sleep(0.3)
    assert engine.stats["tokens"] == settled  # nothing decodes any more
    assert settled - before < 12  # the row stopped near where the client left


async def test_finish_reasons_eos_stop_ids_and_length(
    smollm: TransformersBackend, chat_ids
) -> None:
    prompt = chat_ids("What is 2+2? Answer with a number only.")
    eos = await smollm.generate(prompt, SamplingParams(max_tokens=32, temperature=0.0))
    assert eos.finish_reason == "stop" and eos.token_ids[-1] in smollm.eos_ids
    stop_at = eos.token_ids[2]
    stopped = await smollm.generate(
        prompt, SamplingParams(max_tokens=32, temperature=0.0, stop_token_ids=(stop_at,))
    )
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == eos.token_ids[: eos.token_ids.index(stop_at) + 1]
    text = smollm.tokenizer.decode(eos.token_ids)
    word = text.split()[1]  # a stop string from the middle of the answer
    by_text = await smollm.generate(
        prompt, SamplingParams(max_tokens=32, temperature=0.0, stop=(word,))
    )
    assert by_text.finish_reason == "stop" and len(by_text.token_ids) < len(eos.token_ids)
    assert by_text.token_ids == eos.token_ids[: len(by_text.token_ids)]
    assert smollm.tokenizer.decode(by_text.token_ids).endswith(word)
    short = await smollm.generate(prompt, SamplingParams(max_tokens=3, temperature=0.0))
    assert short.finish_reason == "length" and short.token_ids == eos.token_ids[:3]


async def test_seed_makes_sampling_reproducible(smollm: TransformersBackend, chat_ids) -> None:
    prompt = chat_ids(QUESTIONS[4])
    p = SamplingParams(max_tokens=16, temperature=1.0, seed=1234)
    first = await smollm.generate(prompt, p)
    # same seed while sharing the batch with other requests: same draw
    others = [
        smollm.generate(chat_ids(q), SamplingParams(max_tokens=16, temperature=1.0))
        for q in QUESTIONS[:3]
    ]
    again, *_ = await asyncio.gather(smollm.generate(prompt, p), *others)
    assert again.token_ids == first.token_ids
    other_seed = await smollm.generate(
        prompt, SamplingParams(max_tokens=16, temperature=1.0, seed=99)
    )
    assert other_seed.token_ids != first.token_ids


async def test_top_k_one_is_greedy(smollm: TransformersBackend, chat_ids) -> None:
    prompt = chat_ids(QUESTIONS[5])
    greedy = await smollm.generate(prompt, SamplingParams(max_tokens=12, temperature=0.0))
    top1 = await smollm.generate(prompt, SamplingParams(max_tokens=12, temperature=1.3, top_k=1))
    assert top1.token_ids == greedy.token_ids


async def test_bad_requests_name_the_field(smollm: TransformersBackend) -> None:
    with pytest.raises(GatewayError, match="prompt_ids"):
        await smollm.generate([], SamplingParams(max_tokens=4))
    with pytest.raises(GatewayError, match="max_tokens"):
        await smollm.generate([1] * 8000, SamplingParams(max_tokens=1000))
    with pytest.raises(GatewayError, match="vocabulary"):
        await smollm.generate([1, 10**7], SamplingParams(max_tokens=4))
    ok = await smollm.generate([1, 2, 3], SamplingParams(max_tokens=2))  # still serving
    assert len(ok.token_ids) == 2


def test_converted_copy_location(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from rollhub_gateway.models import converted_dir

    monkeypatch.setenv("ROLLHUB_CACHE", str(tmp_path))
    where = converted_dir("smollm2-135m-instruct")
    assert where is not None and where.parent == tmp_path / "models"
    assert where.name.startswith("SmolLM2-135M-Instruct")
    monkeypatch.setenv("ROLLHUB_CACHE_MODELS", "0")
    assert converted_dir("smollm2-135m-instruct") is None


def test_the_engine_loaded_a_complete_converted_copy(smollm: TransformersBackend) -> None:
    from rollhub_gateway.models import converted_dir

    where = converted_dir("smollm2-135m-instruct")
    assert where is not None
    names = {p.name for p in where.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert smollm.eos_ids == {2} and smollm.tokenizer.chat_template


def test_a_model_that_cannot_load_names_the_config_field(tmp_path) -> None:
    from rollhub.errors import ConfigError
    from rollhub_gateway.models import load_causal_lm

    (tmp_path / "config.json").write_text("{}")  # a directory that is not a model
    with pytest.raises(ConfigError) as err:
        load_causal_lm(str(tmp_path), field="trainer.model")
    assert err.value.field == "trainer.model" and str(tmp_path) in str(err.value)


def test_only_the_top_layers_and_the_norm_train(smollm: TransformersBackend) -> None:
    import copy

    from rollhub.errors import ConfigError
    from rollhub_gateway.models import train_top_layers

    model = copy.deepcopy(smollm.model)
    layers = model.get_decoder().layers
    train_top_layers(model, 2)
    trained = {k.split(".layers.")[-1].split(".")[0] for k, p in model.named_parameters()
               if p.requires_grad and ".layers." in k}
    assert trained == {str(len(layers) - 2), str(len(layers) - 1)}
    assert model.get_decoder().norm.weight.requires_grad
    assert not model.get_input_embeddings().weight.requires_grad
    train_top_layers(model, None)
    assert all(p.requires_grad for p in model.parameters())
    with pytest.raises(ConfigError, match="train_layers=99") as err:
        train_top_layers(model, 99)
    assert err.value.field == "trainer.train_layers"


def bare_decode(
    backend: TransformersBackend, prompt: list[int], params: SamplingParams
) -> tuple[list[int], list[float]]:
    """The reference the engine must equal: one row alone, the HF forward with its own
    cache, the same per-row generator and sampling function, no engine around it."""
    import inspect

    from rollhub_gateway.engines.token_sampling import sample_token
    from transformers import DynamicCache

    model = backend.model
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    generator = torch.Generator().manual_seed(params.seed) if params.temperature > 0 else None
    cache = DynamicCache()
    ids, logprobs = [], []
    feed = prompt
    with torch.inference_mode():
        for _ in range(params.max_tokens):
            out = model(input_ids=torch.tensor([feed]), use_cache=True, **{kw: cache})
            token, logprob = sample_token(
                out.logits[0, -1].float(), temperature=params.temperature, top_k=params.top_k,
                top_p=params.top_p, generator=generator,
            )
            ids.append(token)
            logprobs.append(logprob)
            if token in backend.eos_ids:
                break
            feed = [token]
    return ids, logprobs


async def test_rows_joining_and_leaving_at_any_step_sample_what_a_bare_loop_samples(
    smollm: TransformersBackend, chat_ids
) -> None:
    """Rows of different lengths, seeds and sampling settings join while others decode and
    leave at different steps (and two share a prompt): each row's ids and logprobs are
    those of the row decoded alone by a bare loop."""
    shared = chat_ids(QUESTIONS[0])
    plan = [  # (prompt, params, delay before submitting in seconds)
        (shared, SamplingParams(max_tokens=8, temperature=0.8, seed=11), 0.0),
        (shared, SamplingParams(max_tokens=14, temperature=0.8, seed=12), 0.0),
        (chat_ids(QUESTIONS[1]), SamplingParams(max_tokens=4, temperature=0.0), 0.0),
        (chat_ids(QUESTIONS[2]), SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9,
                                                seed=13), 0.2),
        (chat_ids(QUESTIONS[3]), SamplingParams(max_tokens=8, temperature=0.7, top_k=20,
                                                seed=14), 0.4),
    ]

    async def submit(prompt: list[int], params: SamplingParams, delay: float) -> Generation:
        await asyncio.sleep(delay)
        return await smollm.generate(prompt, params)

    gens = await asyncio.gather(*(submit(*p) for p in plan))
    assert max(g.metrics["max_batch"] for g in gens) >= 3  # they really shared passes
    for (prompt, params, _), gen in zip(plan, gens, strict=True):
        ids, logprobs = bare_decode(smollm, prompt, params)
        assert gen.token_ids == ids
        assert max(abs(a - b) for a, b in zip(gen.logprobs, logprobs, strict=True)) < 1e-3


async def test_nan_weights_fail_the_requests_and_the_engine_serves_on(
    smollm: TransformersBackend, chat_ids
) -> None:
    """A bad weight copy gives errors naming the NaN, greedy or drawn, never tokens."""
    prompt = chat_ids(QUESTIONS[1])
    name = "model.norm.weight"
    good = dict(smollm.model.named_parameters())[name].detach().clone()
    version = smollm.engine.weight_version
    smollm.update_policy({name: torch.full_like(good, float("nan"))}, 7)
    try:
        for temperature in (0.0, 0.7):
            with pytest.raises(GatewayError, match="NaN"):
                params = SamplingParams(max_tokens=4, temperature=temperature, seed=1)
                await smollm.generate(prompt, params)
    finally:
        smollm.update_policy({name: good}, version)
    ok = await smollm.generate(prompt, SamplingParams(max_tokens=4, temperature=0.0))
    assert len(ok.token_ids) == 4


async def test_a_row_that_cannot_be_drawn_fails_alone(
    smollm: TransformersBackend, chat_ids
) -> None:
    """Settings no token can be drawn with (here a NaN temperature, which the gateway
    refuses, sent to the engine directly) fail that request only: the row sharing its
    passes samples exactly what it samples alone."""
    good = (chat_ids(QUESTIONS[2]), SamplingParams(max_tokens=12, temperature=0.8, seed=21))

    async def bad(delay: float) -> Generation:
        await asyncio.sleep(delay)
        return await smollm.generate(
            chat_ids(QUESTIONS[3]), SamplingParams(max_tokens=4, temperature=float("nan"))
        )

    for delay in (0.0, 0.1):  # drawing its first token beside the other, or decoding
        gen, failed = await asyncio.gather(
            smollm.generate(*good), bad(delay), return_exceptions=True
        )
        assert isinstance(gen, Generation) and gen.metrics["max_batch"] >= 2
        assert isinstance(failed, GatewayError) and "temperature=nan" in str(failed)
        ids, logprobs = bare_decode(smollm, *good)
        assert gen.token_ids == ids
        assert max(abs(a - b) for a, b in zip(gen.logprobs, logprobs, strict=True)) < 1e-3
