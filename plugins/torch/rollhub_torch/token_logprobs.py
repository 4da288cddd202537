"""Log-probabilities of sampled tokens without a ``[tokens, vocabulary]`` tensor kept for
the backward pass.

The loss needs ``log_softmax(h·Wᵀ / T)[id]`` for every sampled token. Computed through
autograd, each token keeps its whole row of logits (and their log-softmax) until the
backward pass: 49,152 floats a token for SmolLM2, about 0.2 GB per 500 tokens, the largest
activation of a training step. When the output projection is frozen (the trainer's default:
only the top layers and the final norm train) only the gradient with respect to ``h`` is
needed, and it is known in the forward pass:

    ∂ log p(id) / ∂h = (onehot(id) − softmax(h·Wᵀ / T)) · W / T

so :func:`sampled_logprobs` computes the logprobs and that gradient chunk by chunk and
keeps only the latter (``[tokens, hidden]``). The arithmetic is what autograd would do (the
same projection forward, the same product with ``W`` backward); a chunk's products may round
differently in the last float32 bit from the whole batch's.
A trained output projection falls back to plain autograd.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["sampled_logprobs"]

#: tokens whose logits exist at once (~12 MB of float32 logits at SmolLM2's vocabulary; a
#: chunk's few temporaries of that size are the peak of a response batch's forward pass)
CHUNK = 64


def sampled_logprobs(
    hidden: torch.Tensor, head: torch.nn.Module, ids: torch.Tensor, temperature: float,
    *, chunk: int = CHUNK,
) -> torch.Tensor:
    """``log_softmax(head(hidden) / temperature)`` at ``ids``, one value per row of
    ``hidden`` (``[tokens, hidden]``; ``ids``: ``[tokens]``), differentiable in ``hidden``."""
    weight = head.weight
    bias = getattr(head, "bias", None)
    if weight.requires_grad or (bias is not None and bias.requires_grad):
        logits = head(hidden).float() / temperature
        return torch.log_softmax(logits, -1).gather(1, ids.unsqueeze(1)).squeeze(1)
    out: torch.Tensor = _SampledLogprobs.apply(hidden, weight, bias, ids, temperature, chunk)
    return out


class _SampledLogprobs(torch.autograd.Function):
    """Forward: the logprobs, and their gradient in ``hidden`` kept for the backward pass."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
        ids: torch.Tensor, temperature: float, chunk: int,
    ) -> torch.Tensor:
        need_grad = bool(ctx.needs_input_grad[0])
        out = torch.empty(len(ids), dtype=torch.float32)
        grads = torch.empty_like(hidden) if need_grad else None
        for start in range(0, len(ids), chunk):
            part = slice(start, start + chunk)
            logp = torch.log_softmax(F.linear(hidden[part], weight, bias).float() / temperature, -1)
            index = ids[part].unsqueeze(1)
            out[part] = logp.gather(1, index).squeeze(1)
            if grads is not None:
                # d log p(id) / d logits = onehot(id) - softmax; through "/ T" and "· Wᵀ"
                d = logp.exp_().neg_()
                d.scatter_add_(1, index, torch.ones(index.shape, dtype=d.dtype))
                grads[part] = (d / temperature).to(weight.dtype) @ weight
        ctx.save_for_backward(grads)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grads,) = ctx.saved_tensors
        grad_hidden = None if grads is None else grad_out.unsqueeze(1).to(grads.dtype) * grads
        return grad_hidden, None, None, None, None, None
