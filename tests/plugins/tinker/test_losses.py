"""The step's ``loss`` metric is the loss the server optimised: its own figure when it
reports one, else Tinker's definition of the configured loss (the clipped one for ppo and
cispo). The definitions are checked against a real server in test_local_server.py."""

from __future__ import annotations

import math

import pytest
from rollhub_tinker.datums import DatumArrays
from rollhub_tinker.losses import loss_metrics, token_loss
from tinker import types

PROMPT_POSITIONS = 2
#: sampled positions: (sampler logprob, learner logprob, advantage); ratios e^-1, e^1, ~1
SAMPLED = [(-1.0, -2.0, 1.0), (-3.0, -2.0, 1.0), (-2.0, -2.0, -1.0), (-1.0, -2.0, -1.0)]


def arrays() -> DatumArrays:
    pad = [0.0] * PROMPT_POSITIONS
    return DatumArrays(
        model_input=list(range(6)), target_tokens=list(range(1, 7)),
        logprobs=[*pad, *(s for s, _, _ in SAMPLED)],
        advantages=[*pad, *(a for _, _, a in SAMPLED)],
        episode_id="e", branch_id=0,
    )  # fmt: skip


def output(*, elementwise: list[float] | None = None, metrics: dict | None = None):
    learner = [-5.0] * PROMPT_POSITIONS + [lp for _, lp, _ in SAMPLED]
    out = {"logprobs": types.TensorData(data=learner, dtype="float32", shape=[len(learner)])}
    if elementwise is not None:
        out["elementwise_loss"] = types.TensorData(
            data=elementwise, dtype="float32", shape=[len(elementwise)]
        )
    return types.ForwardBackwardOutput(
        loss_fn_output_type="scalar", loss_fn_outputs=[out], metrics=metrics or {}
    )


def test_each_loss_by_its_definition():
    e = math.e
    # ratio e^-1 with A = +1: importance sampling -1/e; ppo takes the smaller objective
    # (r·A = 0.37 against clip·A = 0.8); cispo weights the learner logprob by clip(r)
    assert token_loss("importance_sampling", -2.0, -1.0, 1.0) == pytest.approx(-1 / e)
    assert token_loss("ppo", -2.0, -1.0, 1.0) == pytest.approx(-1 / e)
    assert token_loss("cispo", -2.0, -1.0, 1.0) == pytest.approx(-0.8 * -2.0)
    # ratio e with A = +1: ppo is clipped at 1.2, cispo's weight too
    assert token_loss("ppo", -2.0, -3.0, 1.0) == pytest.approx(-1.2)
    assert token_loss("cispo", -2.0, -3.0, 1.0) == pytest.approx(-1.2 * -2.0)
    # ratio e^-1 with A = -1: ppo keeps the clipped (smaller) objective -0.8
    assert token_loss("ppo", -2.0, -1.0, -1.0) == pytest.approx(0.8)
    # thresholds from loss_fn_config
    assert token_loss("ppo", -2.0, -3.0, 1.0, (0.5, 2.0)) == pytest.approx(-2.0)
    with pytest.raises(ValueError, match="cross_entropy"):
        token_loss("cross_entropy", -2.0, -3.0, 1.0)


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo"])
def test_without_a_reported_loss_the_configured_one_is_recomputed(loss_fn: str):
    want = sum(token_loss(loss_fn, lp, s, a) for s, lp, a in SAMPLED)
    got = loss_metrics([arrays()], output(), loss_fn)
    assert got["loss"] == pytest.approx(want)
    assert got["sampler_learner_kl"] == pytest.approx(sum(s - lp for s, lp, _ in SAMPLED) / 4)
    if loss_fn != "importance_sampling":  # the clip changed the figure
        unclipped = loss_metrics([arrays()], output(), "importance_sampling")["loss"]
        assert got["loss"] != pytest.approx(unclipped)


def test_the_servers_own_figures_win():
    elementwise = [0.0, 0.0, 0.5, 0.25, 0.125, 0.0625]
    got = loss_metrics([arrays()], output(elementwise=elementwise), "ppo")
    assert got["loss"] == pytest.approx(0.9375)
    reported = output(elementwise=elementwise, metrics={"loss:sum": 3.5})
    assert loss_metrics([arrays()], reported, "ppo")["loss"] == 3.5
