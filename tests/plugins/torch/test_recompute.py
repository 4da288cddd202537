"""With ``recompute``, the trained layers' activations are recomputed in the backward
pass, not kept.

The gradient itself is checked against whole-record forward passes in
``test_trainer.py::test_grouped_forward_gives_the_gradient_of_whole_records``; here, what a
response batch leaves for the backward pass, on the real SmolLM2 model.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from rollhub_torch.prompt_forward import PromptForward
from rollhub_torch.recompute import ReplayableCache
from rollhub_torch.sequences import PromptGroup, Response, response_tensors
from rollhub_torch.trainer import TorchTrainer, TorchTrainerOptions

pytestmark = pytest.mark.slow

T = 0.7


@pytest.fixture(scope="module")
def trainer() -> TorchTrainer:
    trainer = TorchTrainer(TorchTrainerOptions(temperature=T, threads=1))
    asyncio.run(trainer.start())
    return trainer


def _group(rows: int, length: int) -> PromptGroup:
    gen = torch.Generator().manual_seed(0)
    prompt = tuple(torch.randint(100, 40_000, (48,), generator=gen).tolist())
    responses = [
        Response(torch.randint(100, 40_000, (length,), generator=gen).tolist(), [1] * length,
                 [-1.0] * length, 1.0, f"e{i}")
        for i in range(rows)
    ]
    return PromptGroup(prompt, responses)


def test_a_response_batch_keeps_only_the_trained_layers_inputs(trainer: TorchTrainer) -> None:
    config = trainer.model.config
    group = _group(rows=4, length=24)
    ids, trained, _, _ = response_tensors(group)
    prompt = PromptForward.run(trainer.model, group.prompt_ids, trainer._cache_kw)
    kept: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logprobs = prompt.token_logprobs(group, ids, trained, T, recompute=True)
    # the MLP's intermediates (the largest activations) would be kept for every trained layer
    assert not [s for s in kept if s and s[-1] == config.intermediate_size], kept
    # each trained layer's input is
    assert kept.count((4, 24, config.hidden_size)) >= 8
    logprobs.sum().backward()  # and the backward pass recomputes the rest
    grads = [p.grad for p in trainer.trained.values()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    trainer.optimizer.zero_grad(set_to_none=True)


def test_a_replayed_update_sees_what_the_first_saw_and_nothing_is_stored() -> None:
    prefix = [(torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)) for _ in range(2)]
    cache = ReplayableCache(prefix)
    new = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    first = cache.update(*new, 1)
    again = cache.update(*new, 1)  # a recomputed layer updates a second time
    assert first[0].shape == (2, 3, 6, 4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert torch.equal(first[0][:, :, :5], prefix[1][0])
    assert cache.get_seq_length() == 5  # the prefix only, however often a layer updated
