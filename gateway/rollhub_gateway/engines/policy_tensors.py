"""What the transformers engine accepts as a policy, checked before it reaches the worker.

A policy is either parameter name → new value (copied into the engine's model) or a whole
causal LM module (a trainer's own model, sampled from as it is). Checking on the caller's
thread turns a wrong name or shape into an error for the caller, not a dead worker.
"""

from __future__ import annotations

from typing import Any

from rollhub.errors import GatewayError

__all__ = ["checked_policy", "is_module"]


def is_module(policy: Any) -> bool:
    """Whether a policy is a whole model (sampled from as it is) rather than tensors."""
    return (
        callable(policy)
        and hasattr(policy, "named_parameters")
        and hasattr(policy, "get_input_embeddings")
    )


def checked_policy(model: Any, policy: Any) -> Any:
    """``policy`` ready to hand to the engine's worker: a module as it is, tensors as a
    dict of their own.

    :raises GatewayError: a name ``model`` does not have, a shape that differs, or a
        module with another vocabulary.
    """
    if is_module(policy):
        ours = model.get_input_embeddings().num_embeddings
        theirs = policy.get_input_embeddings().num_embeddings
        if ours != theirs:
            raise GatewayError(
                f"the policy module's vocabulary has {theirs} ids, the engine's model "
                f"{ours}: it must be the same model family",
                engine="transformers",
            )
        return policy
    params = dict(model.named_parameters())
    for name, value in policy.items():
        if name not in params:
            raise GatewayError(
                f"policy names a parameter the model lacks: {name!r}", engine="transformers"
            )
        if tuple(value.shape) != tuple(params[name].shape):
            raise GatewayError(
                f"policy tensor {name!r} has shape {tuple(value.shape)}, the model's is "
                f"{tuple(params[name].shape)}",
                engine="transformers",
            )
    return dict(policy)
