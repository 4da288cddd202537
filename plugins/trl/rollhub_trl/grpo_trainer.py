"""TRL's ``GRPOTrainer`` as the ``trl`` trainer runs it: on rollhub's advantages, with a
check of the sampler's logprobs against the learner's (see :func:`grpo_trainer_class`).

The class is built on first use, so that importing this module (and registering the
plugin) imports neither TRL nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollhub.episode import Episode

from rollhub_trl.rollout import EPISODE_FIELD, HubRollout

if TYPE_CHECKING:
    from trl import GRPOTrainer

__all__ = ["grpo_trainer_class"]


def grpo_trainer_class() -> type[GRPOTrainer]:
    """GRPOTrainer that trains on rollhub's advantages and checks the sampler's logprobs.

    - Advantages: TRL's own estimate (its std has Bessel's correction and a 1e-4 floor)
      is replaced by ``[training] advantage`` computed by the core, so the ``torch``,
      ``tinker`` and ``trl`` trainers weigh the same episode alike.
    - Sampler check: the learner's logprobs of the batch's sampled tokens, before the
      update, against the ones the engine reported (``sampler_learner_kl``,
      ``sampler_learner_abs_diff``): a broken hand-over of TRL's weights to the engine
      shows there.
    """
    from trl import GRPOTrainer

    class RollhubGRPOTrainer(GRPOTrainer):
        #: the last generation batch as TRL's loss consumes it, and its episodes in order
        last_scored: dict[str, Any] | None = None
        rollout_order: list[str | None] = []

        def _generate_and_score_completions(
            self, inputs: list[dict[str, Any]]
        ) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            self.last_scored = out
            rollout = self.rollout_func
            if isinstance(rollout, HubRollout) and rollout.pending:
                pending = rollout.pending[-1]
                ids: list[str | None] = [x.get(EPISODE_FIELD) for x in inputs]
                self.rollout_order = ids
                advantages = pending.batch.advantages
                trained: dict[str | None, float] = {
                    e.episode_id: advantages.get(e.episode_id, 0.0)
                    for e in pending.batch.episodes if e.trainable
                }
                out["advantages"] = out["advantages"].new_tensor(
                    [trained.get(eid, 0.0) for eid in ids]
                )
                by_id: dict[str | None, Episode] = {e.episode_id: e for e in pending.batch.episodes}
                pending.metrics.update(self._sampler_check(out, [by_id.get(i) for i in ids]))
            return out

        def _sampler_check(
            self, out: dict[str, Any], episodes: list[Episode | None]
        ) -> dict[str, float]:
            import torch

            completion = out["completion_ids"]
            ids = torch.cat([out["prompt_ids"], completion], dim=1)
            attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
            with torch.no_grad():
                learner = self._get_per_token_logps_and_entropies(
                    self.model, ids, attention, completion.size(1),
                    batch_size=completion.size(0),
                )[0]
            diffs = []
            for i, episode in enumerate(episodes):
                if episode is None or not episode.trainable or not episode.traces:
                    continue
                rec = episode.traces[-1]
                for j, (lp, m) in enumerate(zip(rec.response_logprobs, rec.response_mask,
                                                strict=True)):
                    if m and j < learner.size(1):
                        diffs.append(float(lp) - float(learner[i, j]))
            if not diffs:
                return {}
            return {
                "sampler_learner_kl": sum(diffs) / len(diffs),
                "sampler_learner_abs_diff": sum(abs(d) for d in diffs) / len(diffs),
            }

    return RollhubGRPOTrainer
