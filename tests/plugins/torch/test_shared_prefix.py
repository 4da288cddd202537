"""The prompts of a step's groups share their start (a system prompt, the tools): the
trainer forwards it once a step and each prompt's rest on it, for the same gradient as
forwarding every record whole, on the real SmolLM2 model."""

from __future__ import annotations

import asyncio

import pytest
import torch
from rollhub_torch.sequences import (
    MIN_SHARED,
    PromptGroup,
    Response,
    response_parts,
    shared_prefix,
)
from rollhub_torch.trainer import TorchTrainer, TorchTrainerOptions

pytestmark = pytest.mark.slow

T = 0.7


def _ids(gen: torch.Generator, n: int) -> list[int]:
    return torch.randint(100, 40_000, (n,), generator=gen).tolist()


def _groups() -> list[PromptGroup]:
    gen = torch.Generator().manual_seed(3)
    system = _ids(gen, 48)
    prompts = [(*system, *_ids(gen, 7)), (*system, *_ids(gen, 12)), tuple(system)]
    groups = []
    for g, prompt in enumerate(prompts):
        responses = []
        for i in range(3):
            length = 5 + 3 * i
            mask = [1] * length
            mask[2] = 0  # a tool result inside the response: not trained
            # sampler logprobs of 0: every ratio is below the truncation cap
            responses.append(Response(_ids(gen, length), mask, [0.0] * length,
                                      1.0 if (g + i) % 2 else -1.0, f"e{g}{i}"))
        groups.append(PromptGroup(prompt, responses))
    return groups


def test_the_shared_start_is_found_only_where_it_is_long_enough() -> None:
    groups = _groups()
    assert shared_prefix([g.prompt_ids for g in groups]) == groups[2].prompt_ids
    assert shared_prefix([groups[0].prompt_ids]) == ()  # one prompt: nothing to share
    short = [(1, 2, 3, *range(10, 10 + MIN_SHARED)), (1, 2, 4)]
    assert shared_prefix(short) == ()  # 2 tokens in common: each prompt forwarded whole


@pytest.mark.parametrize("recompute", [False, True])
def test_groups_on_a_shared_prefix_give_the_gradient_of_whole_records(recompute: bool) -> None:
    trainer = TorchTrainer(TorchTrainerOptions(
        temperature=T, threads=1, learning_rate=0.0, grad_clip_norm=0.0, max_rows=2,
        recompute=recompute,
    ))
    asyncio.run(trainer.start())
    groups = _groups()
    tokens = sum(sum(r.mask) for g in groups for r in g.responses)
    trainer._train(groups, tokens)
    shared = {k: p.grad.clone() for k, p in trainer.trained.items()}
    trainer.optimizer.zero_grad(set_to_none=True)
    for group in groups:  # the same loss, one record at a time over its whole sequence
        for r in group.responses:
            full = torch.tensor([[*group.prompt_ids, *r.token_ids]])
            lps = torch.log_softmax(trainer.model(input_ids=full).logits[0].float() / T, -1)
            p = len(group.prompt_ids)
            loss = torch.zeros(())
            for j, (t, m) in enumerate(zip(r.token_ids, r.mask, strict=True)):
                if m:
                    loss = loss - torch.exp(lps[p + j - 1, t]) * r.advantage
            (loss / tokens).backward()
    for name, grad in shared.items():
        assert torch.allclose(grad, trainer.trained[name].grad, atol=1e-5, rtol=1e-3), name


def test_the_prompts_go_back_through_their_graph_once_a_step() -> None:
    """Each part's backward pass stops at the prompt's states; their sum goes back through
    the shared start once a step and through each prompt's own rest once."""
    trainer = TorchTrainer(TorchTrainerOptions(
        temperature=T, threads=1, learning_rate=0.0, grad_clip_norm=0.0, max_rows=1,
    ))
    asyncio.run(trainer.start())
    top = trainer.model.get_decoder().layers[-1].mlp.down_proj
    lengths: list[int] = []
    top.register_full_backward_hook(lambda _m, _gi, go: lengths.append(go[0].shape[1]))
    groups = _groups()  # 3 prompts on a 48-token start, 3 responses each, one per part
    tokens = sum(sum(r.mask) for g in groups for r in g.responses)
    trainer._train(groups, tokens)
    assert lengths.count(48) == 1  # the start: once (the code before: once per group)
    assert lengths.count(7) == 1 and lengths.count(12) == 1  # each prompt's rest: once
    assert sorted(n for n in lengths if n not in (7, 12, 48)) == [5, 5, 5, 8, 8, 8, 11, 11, 11]


def test_responses_are_parted_by_length_at_most_max_rows_each() -> None:
    def response(n: int) -> Response:
        return Response([1] * n, [1] * n, [0.0] * n, 1.0, f"e{n}")

    lengths = [40, 7, 134, 60, 60, 35, 40, 40]
    parts = response_parts([response(n) for n in lengths], max_rows=4)
    assert sorted(len(r.token_ids) for p in parts for r in p) == sorted(lengths)
    assert all(1 <= len(p) <= 4 for p in parts)
    padded = sum(len(p) * max(len(r.token_ids) for r in p) for p in parts)
    assert padded < 4 * 134 + 4 * 60  # in order: 776 padded tokens
    assert [len(r.token_ids) for r in parts[-1]] == [134]  # the long one alone
    assert response_parts([response(5)] * 3, max_rows=4) == [[response(5)] * 3]
