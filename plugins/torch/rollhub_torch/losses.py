"""The ``torch`` trainer's loss per sampled token, for each ``loss_fn``, and its KL
penalty to the reference policy.

Each function takes flat tensors over the batch's sampled tokens (the learner's
logprobs, the sampler's, the advantages); the trainer sums the result and divides by the
number of sampled tokens in the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

__all__ = ["LossFn", "reference_penalty", "token_loss"]

#: ``importance_sampling``: truncated importance sampling; ``ppo``: the dual-clipped
#: surrogate; ``cross_entropy``: minus the logprob (a supervised phase)
LossFn = Literal["importance_sampling", "ppo", "cross_entropy"]


def token_loss(
    learner: torch.Tensor, sampler: torch.Tensor, advantage: torch.Tensor, *,
    loss_fn: LossFn, clip: float, dual_clip: float, tis_cap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss per token, number of tokens clipped or truncated)``.

    :param learner: the learner's logprobs of the sampled tokens (with their gradient)
    :param sampler: the sampler's logprobs of the same tokens
    :param advantage: each token's advantage
    """
    import torch

    clipped = torch.zeros(())
    if loss_fn == "cross_entropy":
        per_token = -learner
    else:
        ratio = torch.exp(learner - sampler)
        if loss_fn == "ppo":
            per_token = -ratio * advantage
            bounded = -torch.clamp(ratio, 1 - clip, 1 + clip) * advantage
            clipped = (bounded > per_token).float().sum()
            per_token = torch.maximum(per_token, bounded)
            # dual clip: with a negative advantage PPO's bound never applies to a large
            # ratio; cap that token's loss at dual_clip·|A| too
            capped = torch.minimum(per_token, -dual_clip * advantage)
            clipped = clipped + ((advantage < 0) & (capped < per_token)).float().sum()
            per_token = torch.where(advantage < 0, capped, per_token)
        else:
            # truncated importance sampling: value min(ratio, cap)·A, gradient
            # min(ratio, cap)·∇log π·A; a token the sampler found far less likely than
            # the learner does cannot dominate the step
            weight = torch.clamp(ratio.detach(), max=tis_cap) / ratio.detach()
            clipped = (ratio.detach() > tis_cap).float().sum()
            per_token = -ratio * weight * advantage
    return per_token, clipped


def reference_penalty(learner: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The k3 estimator of KL(π ‖ π_ref) at each sampled token: unbiased, never negative.

    :param learner: the learner's logprobs of the sampled tokens
    :param reference: the reference policy's logprobs of the same tokens
    """
    import torch

    delta = reference - learner
    return torch.exp(delta) - delta - 1
