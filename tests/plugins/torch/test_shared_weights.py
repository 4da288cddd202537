"""Copies of the trainer's model (the engine's, the KL reference) share only what is frozen."""

from __future__ import annotations

import torch
from rollhub_gateway.models import train_top_layers
from rollhub_torch.shared_weights import copy_trained
from transformers import LlamaConfig, LlamaForCausalLM


def _tied_model(train_layers: int | None) -> tuple[LlamaForCausalLM, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(config)  # SmolLM2 ties its output layer to its embedding too
    train_top_layers(model, train_layers)
    return model, {k: p for k, p in model.named_parameters() if p.requires_grad}


def test_a_trained_tied_embedding_is_copied_not_shared() -> None:
    # every parameter trained: the output layer's name is not among the trained names (it
    # is the embedding's tensor), yet the copy must not follow the trainer's steps
    model, trained = _tied_model(None)
    clone = copy_trained(model, trained)
    embedding = clone.get_input_embeddings().weight
    assert embedding is not model.get_input_embeddings().weight
    assert clone.get_output_embeddings().weight is embedding  # still tied in the copy
    before = embedding.detach().clone()
    with torch.no_grad():
        model.get_input_embeddings().weight.add_(1.0)  # an optimizer step
    assert torch.equal(embedding, before)


def test_frozen_parameters_are_shared_and_trained_ones_copied() -> None:
    model, trained = _tied_model(1)
    clone = copy_trained(model, trained)
    ours = dict(model.named_parameters())
    for name, param in clone.named_parameters():
        assert (param is ours[name]) is (name not in trained), name
        assert not param.requires_grad
