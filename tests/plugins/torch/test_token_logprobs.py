"""The sampled-token logprobs the torch trainer's loss starts from: the same values and
gradients as plain autograd over the whole logits, without keeping the logits."""

from __future__ import annotations

import pytest
import torch
from rollhub_torch.token_logprobs import sampled_logprobs

VOCAB, HIDDEN, TOKENS, T = 3000, 48, 70, 0.7


def _setup(seed: int, *, bias: bool = False) -> tuple[torch.Tensor, torch.nn.Linear, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=gen) * 0.3)
        if bias:
            head.bias.copy_(torch.randn(VOCAB, generator=gen))
    head.requires_grad_(False)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen, requires_grad=True)
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    return hidden, head, ids


def _autograd(hidden: torch.Tensor, head: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = head(hidden).float() / T
    return torch.log_softmax(logits, -1).gather(1, ids.unsqueeze(1)).squeeze(1)


@pytest.mark.parametrize("chunk", [1, 16, 256])
@pytest.mark.parametrize("bias", [False, True])
def test_values_and_gradients_are_autograds(chunk: int, bias: bool) -> None:
    hidden, head, ids = _setup(chunk, bias=bias)
    weights = torch.randn(TOKENS)  # an advantage-like weighting of each token's logprob

    ours = sampled_logprobs(hidden, head, ids, T, chunk=chunk)
    (ours * weights).sum().backward()
    ours_grad, hidden.grad = hidden.grad.clone(), None

    theirs = _autograd(hidden, head, ids)
    (theirs * weights).sum().backward()

    # equal up to float32 rounding: a 1-row chunk is a matrix-vector product, another kernel
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-6)
    assert torch.allclose(ours_grad, hidden.grad, atol=5e-5, rtol=1e-4)  # max seen: 1.5e-5
    assert ours_grad.abs().sum() > 0


def test_no_vocabulary_sized_tensor_is_kept_for_the_backward_pass() -> None:
    hidden, head, ids = _setup(0)
    kept: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sampled_logprobs(hidden, head, ids, T, chunk=16).sum().backward()
    assert not [s for s in kept if VOCAB in s], kept

    # plain autograd keeps the logits: the check above can fail
    kept.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _autograd(hidden, head, ids).sum()
    assert (TOKENS, VOCAB) in kept


def test_a_trained_output_projection_gets_its_gradient() -> None:
    hidden, head, ids = _setup(3)
    head.requires_grad_(True)
    sampled_logprobs(hidden, head, ids, T).sum().backward()
    assert head.weight.grad is not None and head.weight.grad.abs().sum() > 0
    assert hidden.grad is not None


def test_without_grad_only_values_are_computed() -> None:
    hidden, head, ids = _setup(4)
    with torch.no_grad():
        ours = sampled_logprobs(hidden, head, ids, T, chunk=32)
    assert not ours.requires_grad
    assert torch.allclose(ours, _autograd(hidden.detach(), head, ids), atol=1e-6)
