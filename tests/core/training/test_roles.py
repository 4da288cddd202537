"""Trainer roles: each trainer's role comes from its base class, decided by ``role_of`` alone;
trainers written with the older ``trains``/``drives`` flags are still classified."""

from __future__ import annotations

import asyncio
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from rollhub.commands.run import run_experiment
from rollhub.config import parse_config
from rollhub.errors import PluginError, UsageError
from rollhub.plugins import build_host
from rollhub.training import (
    DrivenRun,
    GroupConsumer,
    LaunchedBackend,
    LoopDriver,
    PolicyTrainer,
    StepResult,
    Trainer,
    TrainerRole,
    TrainerRoleError,
    TrainingBatch,
    role_of,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("export", TrainerRole.CONSUMER),
        ("rllm", TrainerRole.CONSUMER),
        ("torch", TrainerRole.POLICY_TRAINER),
        ("tinker", TrainerRole.POLICY_TRAINER),
        ("trl", TrainerRole.LOOP_DRIVER),
        ("verl", TrainerRole.LAUNCHED_BACKEND),
        ("slime", TrainerRole.LAUNCHED_BACKEND),
    ],
)
def test_each_built_in_trainer_declares_its_role_by_its_base(name, role):
    cls = build_host().registry.get("trainer", name, field="trainer.name")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # no built-in uses the old flags
        assert role_of(cls) is role
    # code that still reads the older flags sees what they used to say
    assert (cls.trains, cls.drives) == (
        role is TrainerRole.POLICY_TRAINER,
        role is TrainerRole.LOOP_DRIVER,
    )


def test_the_multi_policy_trainer_is_a_policy_trainer():
    from rollhub.training.policy_trainer import PolicyTrainers

    assert role_of(PolicyTrainers) is TrainerRole.POLICY_TRAINER


class OldLearner(Trainer):
    name = "old-learner"
    trains = True

    async def step(self, batch: TrainingBatch) -> StepResult:
        return StepResult(batch.weight_version + 1, {})


class OldDriver(Trainer):
    name = "old-driver"
    drives = True

    async def drive(self, run: DrivenRun) -> dict[str, Any]:
        return {}


class OldBoth(Trainer):
    """Both flags: ``rollhub run`` handed it to ``drive`` before, and still does."""

    name = "old-both"
    trains = True
    drives = True


class OldConsumer(Trainer):
    name = "old-consumer"

    async def consume(self, group: Any) -> dict[str, Any] | None:
        return None


@pytest.mark.parametrize(
    ("cls", "role", "base"),
    [
        (OldLearner, TrainerRole.POLICY_TRAINER, "PolicyTrainer"),
        (OldDriver, TrainerRole.LOOP_DRIVER, "LoopDriver"),
        (OldBoth, TrainerRole.LOOP_DRIVER, "LoopDriver"),
        (OldConsumer, TrainerRole.CONSUMER, "GroupConsumer"),
    ],
)
def test_an_older_trainer_is_classified_once_and_told_which_base_to_subclass(cls, role, base):
    with pytest.warns(DeprecationWarning, match=rf"subclass rollhub\.training\.{base} instead"):
        assert role_of(cls) is role
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert role_of(cls) is role  # the same answer, without a second warning


def test_a_trainer_of_no_role_is_a_typed_error_naming_the_fix():
    class Nothing(Trainer):
        name = "nothing"

    with pytest.raises(TrainerRoleError) as info:
        role_of(Nothing)
    err = info.value
    assert isinstance(err, PluginError) and isinstance(err, TypeError)
    assert err.trainer.endswith("Nothing")
    assert "declares no role" in str(err)
    assert "GroupConsumer, PolicyTrainer, LoopDriver, LaunchedBackend" in str(err)
    again = pickle.loads(pickle.dumps(err))  # errors cross process boundaries
    assert type(again) is TrainerRoleError and again.trainer == err.trainer
    assert str(again) == str(err)


def test_a_class_that_is_no_trainer_is_refused():
    with pytest.raises(TrainerRoleError, match=r"builtins\.dict is not a trainer; subclass"):
        role_of(dict)


def test_a_trainer_has_one_role():
    class Confused(GroupConsumer, PolicyTrainer):
        name = "confused"

    with pytest.raises(TrainerRoleError, match="subclasses GroupConsumer and PolicyTrainer"):
        role_of(Confused)


def test_the_type_wins_over_an_old_flag():
    class Consumer(GroupConsumer):
        name = "flagged"
        trains = True  # ignored: the base class says what it is

        async def consume(self, group: Any) -> None:
            return None

    assert role_of(Consumer) is TrainerRole.CONSUMER


@pytest.mark.parametrize(("base", "method"), [
    (GroupConsumer, "consume"), (PolicyTrainer, "step"), (LoopDriver, "drive"),
])  # fmt: skip
def test_a_role_base_needs_its_method(base, method):
    incomplete = type("Incomplete", (base,), {"name": "incomplete"})
    with pytest.raises(TypeError, match=method):
        incomplete()


async def test_a_launched_backend_refuses_groups_with_its_hint():
    class Backend(LaunchedBackend):
        name = "backend"
        launch_hint = "start it with 'backend launch'"

    with pytest.raises(UsageError, match="start it with 'backend launch'"):
        await Backend().consume(None)


def test_rollhub_run_refuses_a_launched_backend_before_its_hub_starts(tmp_path):
    cfg = parse_config(
        {
            "experiment": {"name": "slime", "progress": False},
            "runtime": {"name": "local", "app": "agent.py:app"},
            "trainer": {"name": "slime"},
        }
    )
    run_dir = tmp_path / "run"
    with pytest.raises(UsageError, match=r"rollhub_slime\.launch\) instead of 'rollhub run'"):
        asyncio.run(run_experiment(cfg, [{"prompt": "x"}], run_dir))
    assert not run_dir.exists()  # nothing was started or written


#: reading the older flags to dispatch on them, anywhere but role_of
FLAG_READ = re.compile(r"""getattr\([^)]*["'](?:trains|drives)["']|\.(?:trains|drives)\b""")


def test_only_role_of_reads_the_older_flags():
    roles = ROOT / "core" / "rollhub" / "training" / "roles.py"
    sources = [
        *(ROOT / "core").rglob("*.py"),
        *(ROOT / "gateway").rglob("*.py"),
        *(ROOT / "sandbox").rglob("*.py"),
        *(ROOT / "plugins").rglob("*.py"),
    ]
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sources
        if path != roles
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FLAG_READ.search(line)
    ]
    assert offenders == []
    assert FLAG_READ.search(roles.read_text(encoding="utf-8"))  # the pattern still finds them
