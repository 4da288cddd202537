"""The engine's own forward pass against the Hugging Face forward, on small random models of
every family it computes, and its refusal of the others.

Each pass here mixes what the engine mixes: a prompt prefilled into a span in two chunks,
a second prompt continuing part of that span in a slot, rows decoding together on one
span, a row still prefilling while the others decode. Every logit must match a fresh HF
forward over the row's whole sequence.
"""

from __future__ import annotations

import pytest
import torch
from rollhub.errors import ConfigError
from rollhub_gateway.engines.decoder import Chunk, Decoder, Group, Pass, check_model
from rollhub_gateway.engines.kv_store import SlotCache, Span

TOL = 1e-4


def tiny(kind: str, **extra: object) -> torch.nn.Module:
    """A random model of ``kind`` small enough to build in milliseconds."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        kind,
        vocab_size=97,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        **extra,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def reference(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("llama", {}),
        ("llama", {"attention_bias": True, "mlp_bias": True}),
        ("mistral", {"sliding_window": None}),
        ("qwen2", {}),  # biases on q, k and v
    ],
)
def test_every_kind_of_pass_matches_the_hf_forward(kind: str, extra: dict) -> None:
    model = tiny(kind, **extra)
    decoder = Decoder(model)
    slots = SlotCache(decoder.shape, 3, 4, decoder.dtype)  # grown below, as the engine does
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, 97, (40,), generator=g).tolist()
    b = a[:25] + torch.randint(0, 97, (9,), generator=g).tolist()
    c = torch.randint(0, 97, (7,), generator=g).tolist()
    with torch.inference_mode():
        span = Span.empty(decoder.shape, len(a), decoder.dtype)
        for lo, hi in ((0, 17), (17, 40)):  # a prompt in two chunks
            step = Pass(
                tokens=a[lo:hi],
                positions=list(range(lo, hi)),
                rows=0,
                chunks=[Chunk(0, hi - lo, span.keys, span.values, lo)],
                sample=[hi - lo - 1],
            )
            logits = decoder.forward(step, slots)
            span.length = hi
            torch.testing.assert_close(logits[0], reference(model, a[:hi]), atol=TOL, rtol=0)
        slots.reserve(64, 0)
        step = Pass(
            tokens=b[25:],
            positions=list(range(25, len(b))),
            rows=0,
            chunks=[Chunk(0, 9, *slots.layers(1), 0, span, 25)],
            sample=[8],
        )
        logits = decoder.forward(step, slots)
        torch.testing.assert_close(logits[0], reference(model, b), atol=TOL, rtol=0)
        seqs = [list(a), list(b)]
        private = [0, 9]
        nxt = [3, 5]
        for turn in range(4):
            tokens = list(nxt)
            chunks, sample = [], [0, 1]
            if turn == 1:  # a third row prefills in slot 2 while the two decode
                chunks = [Chunk(2, len(c), *slots.layers(2), 0)]
                tokens += c
                sample.append(2 + len(c) - 1)
            step = Pass(
                tokens=tokens,
                positions=[len(s) for s in seqs] + list(range(len(c)))[: len(tokens) - 2],
                rows=3 if turn else 2,
                decode_slots=[0, 1],
                decode_write=list(private),
                slot_len=[p + 1 for p in private] + ([len(c)] if turn else []),
                groups=[Group(span, [0, 1], [40, 25])],
                chunks=chunks,
                sample=sample,
            )
            logits = decoder.forward(step, slots)
            for i in range(2):
                seqs[i].append(nxt[i])
                private[i] += 1
                torch.testing.assert_close(logits[i], reference(model, seqs[i]), atol=TOL, rtol=0)
            if turn == 1:
                torch.testing.assert_close(logits[2], reference(model, c), atol=TOL, rtol=0)
            nxt = [int(x) for x in logits[:2].argmax(-1)]


@pytest.mark.parametrize(
    "order",
    [["a", "a", "b", "b"], ["a", "b", "a", "b"]],
    ids=["adjacent slots, indexed as views", "interleaved slots, gathered"],
)
def test_rows_of_two_spans_decode_right_wherever_their_slots_are(order: list[str]) -> None:
    model = tiny("llama")
    decoder = Decoder(model)
    g = torch.Generator().manual_seed(2)
    prompts = {
        name: torch.randint(0, 97, (n,), generator=g).tolist() for name, n in (("a", 30), ("b", 21))
    }
    spans = {}
    with torch.inference_mode():
        for name, ids in prompts.items():
            span = spans[name] = Span.empty(decoder.shape, len(ids), decoder.dtype)
            step = Pass(
                tokens=ids,
                positions=list(range(len(ids))),
                rows=0,
                chunks=[Chunk(0, len(ids), span.keys, span.values, 0)],
                sample=[0],
            )
            decoder.forward(step, None)
            span.length = len(ids)
        slots = SlotCache(decoder.shape, len(order), 8, decoder.dtype)
        slots.reserve(8, 0, rows=len(order))
        seqs = [list(prompts[name]) for name in order]
        nxt = [11 + slot for slot in range(len(order))]  # a different token in every row
        for turn in range(3):
            step = Pass(
                tokens=list(nxt),
                positions=[len(s) for s in seqs],
                rows=len(order),
                decode_slots=list(range(len(order))),
                decode_write=[turn] * len(order),
                slot_len=[turn + 1] * len(order),
                groups=[
                    Group(
                        spans[name],
                        [i for i, o in enumerate(order) if o == name],
                        [len(prompts[name])] * order.count(name),
                    )
                    for name in ("a", "b")
                ],
                sample=list(range(len(order))),
            )
            logits = decoder.forward(step, slots)
            for i, seq in enumerate(seqs):
                seq.append(nxt[i])
                torch.testing.assert_close(logits[i], reference(model, seq), atol=TOL, rtol=0)
            nxt = [int(x) for x in logits.argmax(-1)]


def test_other_architectures_are_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="gpt2") as err:
        check_model(tiny_gpt2())
    assert err.value.field == "model"
    with pytest.raises(ConfigError, match="sliding-window"):
        check_model(tiny("mistral", sliding_window=16))


def tiny_gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=97, n_embd=32, n_layer=1, n_head=2))


def test_released_slots_hold_nothing_and_come_back_at_their_initial_capacity() -> None:
    slots = SlotCache((2, 1, 4), 3, 8, torch.float32)
    slots.reserve(20, 0)
    assert slots.capacity == 32  # doubled from 8 until it fits
    slots.release()  # the engine's batch emptied
    assert slots.capacity == 0 and slots.nbytes == 0
    slots.reserve(5, 0)
    assert slots.capacity == 8 and slots.nbytes == 2 * 2 * 3 * 1 * 8 * 4 * 4
    slots.write(1, 0, torch.ones(2, 1, 5, 4), torch.ones(2, 1, 5, 4))
    assert sum(float(k[1, :, :5].sum()) for k in slots.keys) == 2 * 5 * 4


def test_slots_are_allocated_for_the_rows_present_and_growth_keeps_their_states() -> None:
    slots = SlotCache((2, 1, 4), 32, 8, torch.float32)
    slots.reserve(5, 0, rows=3)
    assert (slots.slots, slots.capacity) == (8, 8)  # a multiple of 8 rows, not all 32
    slots.write(2, 0, torch.full((2, 1, 5, 4), 2.0), torch.full((2, 1, 5, 4), 3.0))
    slots.reserve(20, 5, rows=3)  # a long row grows every slot present: 3 rows' worth
    assert (slots.slots, slots.capacity) == (8, 32)
    slots.reserve(20, 5, rows=17)  # more rows joined
    assert (slots.slots, slots.capacity) == (24, 32)
    assert slots.nbytes == 2 * 2 * 24 * 1 * 32 * 4 * 4
    keys, values = slots.layers(2)
    for layer in range(2):
        assert torch.equal(keys[layer][:, :5], torch.full((1, 5, 4), 2.0))
        assert torch.equal(values[layer][:, :5], torch.full((1, 5, 4), 3.0))
    span = slots.span(2, 5)
    assert span.keys.shape == (2, 1, 5, 4) and float(span.values.sum()) == 3.0 * 2 * 5 * 4
