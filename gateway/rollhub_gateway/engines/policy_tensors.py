"""What the transformers engine accepts as a policy, checked before it reaches the worker.

A policy is either parameter name → new value (copied into the engine's model) or a whole
causal LM module (a trainer's own model, sampled from as it is). Checking on the caller's
thread turns a wrong name or shape into an error for the caller, not a dead worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias

from rollhub.errors import GatewayError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

__all__ = ["Policy", "checked_policy", "embedding_dtype", "input_embedding", "is_module", "vocab_size"]

#: what the engine samples from: parameter name → new value, or a whole causal LM module
Policy: TypeAlias = "Mapping[str, torch.Tensor] | PreTrainedModel"


def is_module(policy: object) -> TypeIs[PreTrainedModel]:
    """Whether a policy is a whole model (sampled from as it is) rather than tensors.

    The check is by shape (a callable with parameters and input embeddings), so a trainer's
    own causal LM passes whatever class wraps it.
    """
    return (
        callable(policy)
        and hasattr(policy, "named_parameters")
        and hasattr(policy, "get_input_embeddings")
    )


def input_embedding(model: PreTrainedModel) -> torch.nn.Embedding:
    """``model``'s input embeddings.

    :raises GatewayError: they are not an ``nn.Embedding`` (no Llama-family model).
    """
    import torch

    embedding = model.get_input_embeddings()
    if not isinstance(embedding, torch.nn.Embedding):
        raise GatewayError(
            f"the model's input embeddings are a {type(embedding).__name__}, not an "
            "nn.Embedding",
            engine="transformers",
        )
    return embedding


def vocab_size(model: PreTrainedModel) -> int:
    """The number of token ids ``model``'s input embeddings hold."""
    return input_embedding(model).num_embeddings


def embedding_dtype(model: PreTrainedModel) -> torch.dtype:
    """The dtype of ``model``'s input embeddings (the dtype it computes in)."""
    return input_embedding(model).weight.dtype


def checked_policy(model: PreTrainedModel, policy: Policy) -> Policy:
    """``policy`` ready to hand to the engine's worker: a module as it is, tensors as a
    dict of their own.

    :raises GatewayError: a name ``model`` does not have, a shape that differs, or a
        module with another vocabulary.
    """
    if is_module(policy):
        ours = vocab_size(model)
        theirs = vocab_size(policy)
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
