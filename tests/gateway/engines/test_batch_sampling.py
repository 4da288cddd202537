"""A step's draws, taken together, are each row's own ``sample_token`` draw, bit for bit.

The per-row generator is what makes a seeded request reproducible whatever shares its
batch; the batched path must consume each generator exactly as ``torch.multinomial`` does
and draw the same id, or a seed would mean something else in a batch than alone.
"""

from __future__ import annotations

import pytest
import torch
from rollhub_gateway.engines.batch_sampling import Draw, _winners, exact, sample_rows
from rollhub_gateway.engines.token_sampling import sample_token, truncate

SETTINGS = [  # (temperature, top_k, top_p)
    (0.7, -1, 1.0),
    (0.7, -1, 1.0),
    (1.0, -1, 1.0),
    (0.0, -1, 1.0),
    (1.3, 20, 1.0),
    (0.7, -1, 0.9),
    (0.7, 5, 0.8),
    (0.5, -1, 1.0),
]


def test_this_torch_draws_vectorised() -> None:
    assert exact()  # else the engine falls back to torch.multinomial (correct, slower)


@pytest.mark.parametrize("mode", ["sampling", "processed", "raw"])
def test_the_batched_draws_are_each_rows_own(mode: str) -> None:
    logits = torch.randn((len(SETTINGS), 49152), generator=torch.Generator().manual_seed(0)) * 3
    for step in range(3):
        seeds = [100 * step + i for i in range(len(SETTINGS))]
        alone = [
            sample_token(
                logits[i] + step,
                temperature=t,
                top_k=k,
                top_p=p,
                mode=mode,
                generator=torch.Generator().manual_seed(s) if t > 0 else None,
            )
            for i, ((t, k, p), s) in enumerate(zip(SETTINGS, seeds, strict=True))
        ]
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        draws = [
            Draw(t, k, p, g if t > 0 else None)
            for (t, k, p), g in zip(SETTINGS, generators, strict=True)
        ]
        together = sample_rows(logits + step, draws, mode)
        assert [i for i, _ in together] == [i for i, _ in alone]
        assert [lp for _, lp in together] == pytest.approx([lp for _, lp in alone], abs=1e-6)
        # each generator moved exactly as torch.multinomial moves it
        for (t, _, _), s, g in zip(SETTINGS, seeds, generators, strict=True):
            if t > 0:
                ref = torch.Generator().manual_seed(s)
                torch.empty(49152).exponential_(generator=ref)
                assert torch.equal(g.get_state(), ref.get_state())


def _plain_winners(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """What ``torch.multinomial`` computes from the same uniforms, every id at once."""
    return torch.argmax(probs / (-torch.log1p(-uniforms)).float(), dim=-1)


def test_the_candidates_winner_is_the_whole_rows_winner() -> None:
    """Flat, peaked and one-hot rows: the winner among the candidates is the argmax of
    every id's value."""
    gen = torch.Generator().manual_seed(7)
    for sharpness in (0.1, 1.0, 4.0, 30.0):
        logits = torch.randn((64, 49152), generator=gen) * sharpness
        probs = torch.softmax(logits, -1)
        uniforms = torch.empty(probs.shape, dtype=torch.float64).uniform_(generator=gen)
        assert torch.equal(_winners(probs, uniforms), _plain_winners(probs, uniforms))


def test_a_tie_goes_to_the_first_id_as_argmax_breaks_it() -> None:
    probs = torch.full((2, 6), 0.1)
    probs[:, 4] = 0.5
    uniforms = torch.full((2, 6), 0.999, dtype=torch.float64)
    uniforms[0, [1, 3]] = 0.02  # ids 1 and 3 reach the same value, above id 4's
    uniforms[1, [5, 2]] = 0.01
    want = _plain_winners(probs, uniforms)
    assert want.tolist() == [1, 2]
    assert torch.equal(_winners(probs, uniforms), want)


def test_non_finite_logits_are_an_error_not_a_token_and_fail_only_their_row() -> None:
    """A row that cannot be drawn (NaN logits, or a NaN temperature that reached the
    engine) gets an error; the rows beside it get exactly their own draw, generators
    moved as if alone."""
    logits = torch.randn((3, 100), generator=torch.Generator().manual_seed(3))
    logits[1, 3] = float("nan")
    for temperature in (0.7, 0.0):  # drawn, and greedy (argmax would pick the NaN's id)
        draws = [Draw(temperature, -1, 1.0, torch.Generator().manual_seed(i)) for i in range(3)]
        draws.append(Draw(float("nan"), -1, 1.0, torch.Generator().manual_seed(3)))
        got = sample_rows(torch.cat([logits, logits[:1]]), draws)
        assert isinstance(got[1], ValueError) and "NaN" in str(got[1])
        assert isinstance(got[3], ValueError) and "NaN" in str(got[3])
        for i in (0, 2):
            alone = sample_token(
                logits[i],
                temperature=temperature,
                top_k=-1,
                top_p=1.0,
                generator=torch.Generator().manual_seed(i),
            )
            assert got[i] == pytest.approx(alone)
            ref = torch.Generator().manual_seed(i)
            if temperature > 0:
                torch.empty(100).exponential_(generator=ref)
            assert torch.equal(draws[i].generator.get_state(), ref.get_state())


@pytest.mark.parametrize("top_p", [0.0, 1e-9, -1.0])
def test_a_nucleus_smaller_than_the_top_id_keeps_the_top_id(top_p: float) -> None:
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(5)) * 3
    kept = torch.isfinite(truncate(logits, -1, top_p)).nonzero().flatten().tolist()
    assert kept == [int(torch.argmax(logits))]
    for t in (0.7, 2.0):
        token, logprob = sample_token(
            logits, temperature=t, top_k=-1, top_p=top_p,
            generator=torch.Generator().manual_seed(1), mode="processed",
        )  # fmt: skip
        assert token == int(torch.argmax(logits)) and logprob == 0.0
        draws = [Draw(t, -1, top_p, torch.Generator().manual_seed(1))]
        assert sample_rows(logits[None], draws, "processed") == [(token, 0.0)]
