"""Training's ``success_rate`` counts an agent's failure as not solved (as evaluation and
``rollhub compare`` do); only episodes the infrastructure lost are left out."""

from __future__ import annotations

from rollhub.episode import Episode, EpisodeGroup
from rollhub.runs.evaluation import summarize_episodes
from rollhub.training.batch_metrics import batch_metrics
from rollhub.training.step import TrainingBatch


def _batch(episodes: list[Episode]) -> TrainingBatch:
    return TrainingBatch(0, [EpisodeGroup("g", {}, episodes)], {}, 0)


def test_failed_episodes_count_as_not_solved_as_in_evaluation() -> None:
    eps = [Episode("e0", "g", "s0", 0, "ok", reward=1.0)] + [
        Episode(f"e{i}", "g", f"s{i}", i, "agent_error") for i in range(1, 8)
    ]
    m = batch_metrics(_batch(eps))
    assert m["success_rate"] == 0.125 and m["episodes_failed"] == 7
    assert m["success_rate"] == summarize_episodes("x", {"g": eps}, 8).pass_at_1
    assert m["reward_mean"] == 1.0  # rewards: of the episodes that have one


def test_infrastructure_failures_are_left_out_and_a_clean_batch_is_unchanged() -> None:
    solved = Episode("e0", "g", "s0", 0, "ok", reward=1.0)
    missed = Episode("e1", "g", "s1", 1, "ok", reward=0.0)
    lost = Episode("e2", "g", "s2", 2, "infra_error")
    timed_out = Episode("e3", "g", "s3", 3, "timeout")
    assert batch_metrics(_batch([solved, missed]))["success_rate"] == 0.5
    assert batch_metrics(_batch([solved, missed, lost]))["success_rate"] == 0.5
    assert batch_metrics(_batch([solved, missed, lost, timed_out]))["success_rate"] == 0.3333
    # nothing the policy can be judged on: no figure rather than a made-up one
    assert batch_metrics(_batch([lost]))["success_rate"] is None
    assert batch_metrics(_batch([timed_out]))["success_rate"] == 0.0
