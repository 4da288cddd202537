"""The parser of verl's console-logger lines (``step:N - key:value - ...``)."""

from __future__ import annotations

import math

from gpucheck.verl_step import STEP_OVERRIDES, parse_steps, parse_value, step_problems

# as verl 0.9.1's LocalLogger prints them under Ray: pprint.pformat of each number, NumPy
# scalars spelled np.float64(...), the line prefixed by the Ray actor, sometimes in colour
VERL_OUTPUT = """\
(TaskRunner pid=80211) Training from scratch
(TaskRunner pid=80211) step:1 - global_seqlen/mean:3512.0 - actor/entropy:np.float64(1.2043) - actor/pg_loss:np.float64(-0.003125) - actor/pg_clipfrac:0.0 - actor/ppo_kl:np.float64(1.5e-05) - actor/grad_norm:np.float32(0.812) - critic/score/mean:0.375 - critic/score/max:1.0 - response_length/mean:211.5 - timing_s/gen:20.7 - timing_s/step:41.92 - perf/throughput:np.float64(623.1)
\x1b[36m(TaskRunner pid=80211)\x1b[0m step:2 - actor/pg_loss:nan - critic/score/mean:0.5 - timing_s/step:30.1
(WorkerDict pid=80577) kv cache step:3 looks like this but is not a metrics line: value
"""


def test_parse_steps_reads_every_metric_of_each_step():
    steps = parse_steps(VERL_OUTPUT)
    assert sorted(steps) == [1, 2]
    one = steps[1]
    assert one["actor/pg_loss"] == -0.003125
    assert one["critic/score/mean"] == 0.375
    assert one["timing_s/step"] == 41.92
    assert one["response_length/mean"] == 211.5
    assert one["actor/ppo_kl"] == 1.5e-05 and one["actor/grad_norm"] == 0.812
    assert len(one) == 12
    assert steps[2]["critic/score/mean"] == 0.5 and math.isnan(steps[2]["actor/pg_loss"])


def test_a_later_line_of_the_same_step_adds_and_overrides():
    steps = parse_steps("step:1 - a:1 - b:2\nstep:1 - b:3 - c:4\n")
    assert steps == {1: {"a": 1.0, "b": 3.0, "c": 4.0}}


def test_values_in_every_spelling_and_non_numbers():
    assert parse_value("np.float32(0.5)") == 0.5
    assert parse_value("-1e-05") == -1e-05
    assert parse_value("np.int64(7)") == 7.0
    assert parse_value("3") == 3.0
    assert parse_value("True") == 1.0
    assert math.isinf(parse_value("-inf"))
    assert parse_value("tensor(0.5)") is None
    assert parse_value("abc") is None


def test_step_problems_names_missing_and_non_finite_metrics():
    steps = parse_steps(VERL_OUTPUT)
    assert step_problems(steps, 1) == []
    assert step_problems(steps, 2) == ["step 2: actor/pg_loss = nan"]
    assert step_problems({1: {"actor/pg_loss": 0.1}}, 1) == ["step 1 lacks critic/score/mean"]
    assert step_problems({}, 1) == ["no console line for step 1 (steps seen: none)"]


def test_the_step_overrides_make_one_small_step_without_flash_attn():
    assert "trainer.total_training_steps=1" in STEP_OVERRIDES
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in STEP_OVERRIDES
    assert "actor_rollout_ref.model.use_remove_padding=false" in STEP_OVERRIDES
