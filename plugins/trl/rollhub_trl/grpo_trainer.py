"""TRL's ``GRPOTrainer`` as the ``trl`` trainer runs it: on rollhub's advantages, with a
check of the sampler's logprobs against the learner's (see :func:`grpo_trainer_class`).

The class is built on first use, so that importing this module (and registering the
plugin) imports neither TRL nor torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollhub.episode import Episode

from rollhub_trl.rollout import EPISODE_FIELD, HubRollout, final_record
from rollhub_trl.trained_weights import load_trained, save_trained

if TYPE_CHECKING:
    from trl import GRPOTrainer

__all__ = ["grpo_trainer_class"]


def grpo_trainer_class(base_model: str = "", train_layers: int | None = None) -> type[GRPOTrainer]:
    """GRPOTrainer that trains on rollhub's advantages and checks the sampler's logprobs.

    - Advantages: TRL's own estimate (its std has Bessel's correction and a 1e-4 floor)
      is replaced by ``[training] advantage`` computed by the core, so the ``torch``,
      ``tinker`` and ``trl`` trainers weigh the same episode alike.
    - Sampler check: the learner's logprobs of the batch's sampled tokens, before the
      update, against the ones the engine reported (``sampler_learner_kl``,
      ``sampler_learner_abs_diff``): a broken hand-over of TRL's weights to the engine
      shows there. They are taken from the loss's own forward pass, not computed again.
    - Checkpoints: with ``train_layers`` set, a ``checkpoint-N`` holds the trained
      parameters, not the whole model (:mod:`rollhub_trl.trained_weights`); ``base_model``
      (the model's name or directory) and ``train_layers`` are what they belong to.
    """
    from trl import GRPOTrainer

    class RollhubGRPOTrainer(GRPOTrainer):
        #: True while TRL saves a checkpoint (not the run's final model)
        _in_checkpoint = False
        #: the last generation batch as TRL's loss consumes it, and its episodes in order
        last_scored: dict[str, Any] | None = None
        rollout_order: list[str | None] = []
        #: the batch's rows awaiting the learner's logprobs, and where to report them
        _check: _SamplerCheck | None = None
        #: the rows of the micro-batch whose loss is being computed
        _loss_rows: Any = None

        def _generate_and_score_completions(
            self, inputs: list[dict[str, Any]]
        ) -> dict[str, Any]:
            import torch

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
                # TRL shuffles the rows and splits them into micro-batches: each carries
                # its index here, so the loss's logprobs can be matched to its episode.
                out[ROW_FIELD] = torch.arange(len(ids))
                self._check = _SamplerCheck([by_id.get(i) for i in ids], pending.metrics)
            return out

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            self._loss_rows = inputs.get(ROW_FIELD)
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._loss_rows = None

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            rows, check = self._loss_rows, self._check
            if rows is not None and check is not None:
                # The loss's own forward, before the optimizer step (one generation batch
                # is one step): the learner's logprobs at no extra forward pass.
                self._loss_rows = None
                check.add(rows.tolist(), out[0].detach())
                if check.complete:
                    self._check = None
            return out

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            self._in_checkpoint = True
            try:
                super()._save_checkpoint(model, trial)
            finally:
                self._in_checkpoint = False

        def _save(
            self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None
        ) -> None:
            # a checkpoint keeps the trained parameters only (see trained_weights), unless
            # something reads it as a whole model: the best-model reload, a push to the Hub,
            # or a sharded model whose parameters only the gathered state_dict holds
            args = self.args
            whole = (args.load_best_model_at_end or args.push_to_hub
                     or self.is_fsdp_enabled or self.is_deepspeed_enabled)  # fmt: skip
            if self._in_checkpoint and args.should_save and not whole:
                folder = Path(output_dir or str(self.args.output_dir))
                model = self.accelerator.unwrap_model(self.model)
                if save_trained(folder, model, base_model, train_layers):
                    return
            super()._save(output_dir, state_dict)

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
            target = self.accelerator.unwrap_model(model if model is not None else self.model)
            folder = Path(resume_from_checkpoint)
            if not load_trained(folder, target, base_model, train_layers):
                super()._load_from_checkpoint(resume_from_checkpoint, model)

    return RollhubGRPOTrainer


#: the column of TRL's generation batch that holds each row's index in it
ROW_FIELD = "rollhub_row"


class _SamplerCheck:
    """The learner's logprobs of one batch's sampled tokens against the engine's.

    Fed by the loss's micro-batches; when every row has been seen, it writes
    ``sampler_learner_kl`` (mean sampler − learner logprob over the trained tokens) and
    ``sampler_learner_abs_diff`` into the step's metrics.
    """

    def __init__(self, episodes: list[Episode | None], metrics: dict[str, Any]) -> None:
        self.episodes = episodes
        self.metrics = metrics
        self.seen: set[int] = set()
        self.diffs: list[float] = []

    @property
    def complete(self) -> bool:
        return len(self.seen) == len(self.episodes)

    def add(self, rows: list[int], learner: Any) -> None:
        """The learner's per-token logprobs of ``rows`` (one row of ``learner`` each)."""
        for k, i in enumerate(rows):
            if i in self.seen:
                continue
            self.seen.add(i)
            episode = self.episodes[i]
            rec = final_record(episode.traces) if episode is not None else None
            # the rows episode_sample trained: its record, or a filler that has nothing to check
            if episode is None or not episode.trainable or not episode.ok or rec is None:
                continue
            logps = learner[k].tolist()
            for j, (lp, m) in enumerate(zip(rec.response_logprobs, rec.response_mask,
                                            strict=True)):
                if m and j < len(logps):
                    self.diffs.append(float(lp) - logps[j])
        if self.complete and self.diffs:
            self.metrics["sampler_learner_kl"] = sum(self.diffs) / len(self.diffs)
            self.metrics["sampler_learner_abs_diff"] = (
                sum(abs(d) for d in self.diffs) / len(self.diffs)
            )
