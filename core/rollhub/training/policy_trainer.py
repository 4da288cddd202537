"""One trainer per trainable policy, driven as one by the core's loop.

With ``[[policies]]`` and a :class:`~rollhub.training.roles.PolicyTrainer`, the hub builds
a :class:`PolicyTrainers`: the ``[trainer]`` component once per trainable policy (its
options: ``[trainer]``'s with the policy's ``trainer`` table over them; its context names
the policy and gives it a run directory of its own). Each training step, for every trainable policy:

1. the batch is seen by the policy (:func:`rollhub.policies.policy_groups`): only the
   episodes it takes part in (an episode with records of other policies only is left
   out), each with only the records that policy sampled and the reward that trains it (its
   ``reward_key``, else the episode's reward);
2. its advantages are estimated over those rewards, group by group (``training.advantage``),
   so an episode it sat out never moves its baseline;
3. its trainer steps on that batch, at the policy's own weight version, with its own
   optimizer;
4. its new weights and version go into :class:`~rollhub.policies.PolicyUpdates`, which the
   gateway routes to that policy's engine.

Frozen policies are never handed to a trainer. Checkpoints keep each trainer's files under
``policies/<name>/`` of the checkpoint's trainer folder, with every policy's version.
Metrics, under ``policy/<name>/``: every policy's reward, success, tool calls, turns,
tokens and staleness over its own episodes, records and reward (frozen ones too, when
:func:`rollhub.policies.reports_figures` says so), and each trainer's own figures (loss,
gradient norm…) with its new version. The run's ``staleness_max`` and ``staleness_mean``
are over every turn the trainable policies train on: the mean is weighted by turns.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig
from rollhub.errors import ConfigError, UsageError
from rollhub.policies import (
    PolicyConfig,
    PolicyUpdate,
    PolicyUpdates,
    policy_groups,
    reports_figures,
)
from rollhub.registry import ComponentContext, ComponentRegistry
from rollhub.training.advantages import group_advantages
from rollhub.training.batch_metrics import batch_metrics, staleness_lags
from rollhub.training.roles import PolicyTrainer, TrainerRole, role_of
from rollhub.training.step import StepResult, TrainingBatch
from rollhub.training.trainer import Trainer

__all__ = ["PolicyTrainers", "build_trainer", "policy_batch"]

log = logging.getLogger(__name__)

#: where each policy's trainer files go inside a checkpoint's trainer folder
POLICIES_DIR = "policies"
#: the trainer-neutral figures recorded per policy (of :func:`~rollhub.training.batch_metrics.batch_metrics`)
POLICY_FIGURES = (
    "reward_mean", "success_rate", "tool_call_rate", "turns_mean", "sampled_tokens",
    "episodes_trained", "groups_without_signal", "staleness_max", "staleness_mean",
)  # fmt: skip


def build_trainer(
    registry: ComponentRegistry, config: RollhubConfig, context: ComponentContext
) -> Trainer:
    """The ``[trainer]`` component, or with ``[[policies]]`` and a policy trainer, a
    :class:`PolicyTrainers` of one such trainer per trainable policy.

    :raises ConfigError: a policy's ``trainer`` options do not validate (naming
        ``policies.<name>.trainer``).
    """
    section = config.trainer
    cls = registry.get("trainer", section.name, field="trainer.name")
    if not config.policies or role_of(cls) is not TrainerRole.POLICY_TRAINER:
        return registry.build(
            "trainer", section.name, section.options, section="trainer", context=context
        )
    trainers: dict[str, Trainer] = {}
    for policy in config.policies:
        if not policy.trainable:
            continue
        run_dir = context.run_dir / POLICIES_DIR / policy.name if context.run_dir else None
        trainers[policy.name] = registry.build(
            "trainer",
            section.name,
            {**section.options, **policy.trainer},
            section=f"policies.{policy.name}.trainer",
            context=dataclasses.replace(context, run_dir=run_dir, policy=policy.name),
        )
    return PolicyTrainers(trainers, list(config.policies), config=config, context=context)


def policy_batch(
    batch: TrainingBatch, policy: PolicyConfig, version: int, estimator: str
) -> TrainingBatch:
    """``batch`` as ``policy`` trains on it: its records, its rewards, its advantages, its
    weight version."""
    groups = policy_groups(batch.groups, policy)
    advantages: dict[str, float] = {}
    for g in groups:
        advantages.update(group_advantages(g, estimator))
    return TrainingBatch(batch.step, groups, advantages, version)


class PolicyTrainers(PolicyTrainer):
    """The trainers of a run with several policies, one per trainable policy.

    :param trainers: policy name → its trainer (trainable policies only).
    :param policies: every ``[[policies]]`` entry, frozen ones included (their versions
        are published as they are).
    """

    name = "policies"

    def __init__(
        self,
        trainers: dict[str, Trainer],
        policies: list[PolicyConfig],
        *,
        config: RollhubConfig,
        context: ComponentContext | None = None,
    ) -> None:
        super().__init__(context=context)
        if not trainers:
            raise ConfigError(
                "every policy in [[policies]] is frozen (trainable = false), so nothing "
                "trains; mark one trainable, or run with a trainer that does not train",
                field="policies",
            )
        self.trainers = trainers
        self.policies = {p.name: p for p in policies}
        self.config = config
        #: each policy's own weight version (frozen ones stay at 0)
        self.versions = {p.name: 0 for p in policies}

    async def start(self) -> None:
        """Start every policy's trainer."""
        for trainer in self.trainers.values():
            await trainer.start()

    async def initial_policy(self) -> PolicyUpdates:
        """Every policy's starting weights (what its trainer starts from) and version."""
        updates = {}
        for name, version in self.versions.items():
            trainer = self.trainers.get(name)
            policy = await trainer.initial_policy() if trainer is not None else None
            updates[name] = PolicyUpdate(policy, version)
        return PolicyUpdates(updates)

    async def step(self, batch: TrainingBatch) -> StepResult:
        """Step every trainable policy's trainer on its own view of ``batch``."""
        estimator = self.config.training.advantage
        metrics: dict[str, Any] = {}
        updates: dict[str, PolicyUpdate] = {}
        lags: list[int] = []
        for name, version in self.versions.items():
            policy = self.policies[name]
            sub = policy_batch(batch, policy, version, estimator)
            trainer = self.trainers.get(name)
            if reports_figures(policy, batch.episodes):
                metrics.update(self._figures(name, sub))
            if trainer is None:
                updates[name] = PolicyUpdate(None, version)
                continue
            lags.extend(staleness_lags(sub))
            result = await trainer.step(sub)
            if not isinstance(result, StepResult) or result.weight_version <= version:
                raise UsageError(
                    f"the trainer of policy {name!r} returned {result!r} after training "
                    f"version {version}; a step must return a StepResult with a newer version"
                )
            self.versions[name] = result.weight_version
            updates[name] = PolicyUpdate(result.policy, result.weight_version)
            metrics.update({f"policy/{name}/{k}": v for k, v in result.metrics.items()})
            metrics[f"policy/{name}/weight_version"] = result.weight_version
        # the run's staleness is over every turn its trainable policies train on (a frozen
        # policy never lags): a mean by turns, so a policy of few turns does not set it
        metrics["staleness_max"] = max(lags) if lags else 0
        metrics["staleness_mean"] = round(sum(lags) / len(lags), 4) if lags else 0.0
        return StepResult(batch.weight_version + 1, metrics, PolicyUpdates(updates))

    def _figures(self, name: str, sub: TrainingBatch) -> dict[str, Any]:
        """The policy's own reward, success, tokens and staleness, under ``policy/<name>/``."""
        figures = batch_metrics(sub, self.config.rewards.success_threshold)
        return {f"policy/{name}/{k}": figures[k] for k in POLICY_FIGURES}

    async def save_state(self, directory: Path) -> dict[str, Any]:
        """Each trainer's files under ``policies/<name>/``, and every policy's version."""
        states = {}
        for name, trainer in self.trainers.items():
            sub = directory / POLICIES_DIR / name
            sub.mkdir(parents=True, exist_ok=True)
            states[name] = await trainer.save_state(sub)
        return {"policies": states, "versions": dict(self.versions)}

    async def drop_state(self, state: dict[str, Any]) -> None:
        """Each trainer is handed its own policy's state of the deleted checkpoint; one that
        cannot free it is logged with the policy's name, and the others still free theirs."""
        for name, sub in (state.get("policies") or {}).items():
            trainer = self.trainers.get(name)
            if trainer is None or not sub:
                continue
            try:
                await trainer.drop_state(sub)
            except Exception:
                log.warning("policy %r: its trainer could not free a deleted checkpoint's "
                            "state %s", name, sub, exc_info=True)

    async def load_state(self, directory: Path, state: dict[str, Any]) -> None:
        """Restore what :meth:`save_state` wrote.

        :raises UsageError: the checkpoint holds no state of a trainable policy (it was
            taken with other ``[[policies]]``).
        """
        states = state.get("policies") or {}
        missing = sorted(set(self.trainers) - set(states))
        if missing:
            raise UsageError(
                f"checkpoint {directory} holds no state of policy {missing[0]!r} (it has: "
                f"{', '.join(sorted(states)) or 'none'}); resume with the [[policies]] it "
                f"was taken with"
            )
        for name, trainer in self.trainers.items():
            await trainer.load_state(directory / POLICIES_DIR / name, states[name])
        for name, version in (state.get("versions") or {}).items():
            if name in self.versions:
                self.versions[name] = int(version)

    async def close(self) -> dict[str, Any]:
        """Close every trainer; their summaries by policy."""
        out: dict[str, Any] = {}
        for name, trainer in self.trainers.items():
            out[name] = await trainer.close()
        return {"policies": out}
