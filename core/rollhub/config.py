"""``rollhub.toml``: one file that names the runtime, store, token source and trainer.

::

    [experiment]
    name = "math-demo"
    dataset = "data/math.jsonl"
    n_samples = 4

    [runtime]
    name = "local"                       # a registered runtime
    app = "examples/math/agent.py:app"   # options of that runtime

    [store]
    url = "file://runs/results"

    [token_source]
    name = "gateway"

    [trainer]
    name = "export"

Each component section has a ``name`` (a config word some plugin registered) and the
component's own options, validated by the component's ``Options`` model when it is built.
Environment variables override the file: ``ROLLHUB_RUNTIME__WORKERS=4`` sets
``runtime.workers`` (values are read as TOML when they parse, else as strings).

Errors are :class:`~rollhub.errors.ConfigError`s that name the field, the bad value and
the fix.
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rollhub.errors import ConfigError
from rollhub.judge.config import JudgeConfig
from rollhub.policies import PolicyConfig, check_policies
from rollhub.sessions.config import SessionsConfig
from rollhub.validation import explain, first_loc

__all__ = [
    "ComponentSection",
    "EvalConfig",
    "ExperimentConfig",
    "LoggingConfig",
    "PluginsConfig",
    "RewardsConfig",
    "RollhubConfig",
    "RuntimeSection",
    "StoreSection",
    "TokenSourceSection",
    "TrainerSection",
    "TrainingConfig",
    "env_note",
    "load_config",
    "parse_config",
]

ENV_PREFIX = "ROLLHUB_"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ExperimentConfig(_Strict):
    """What to run: the dataset, samples per prompt, concurrency, outputs."""

    name: str = Field("rollhub", description="experiment name; default exp_id")
    exp_id: str | None = Field(
        None, description="result-store prefix; reruns with the same id resume"
    )
    dataset: str | None = Field(None, description="JSONL file of payloads, one prompt per line")
    id_field: str = Field("id", description="payload field that holds the prompt id (input_id)")
    max_prompts: int | None = Field(None, ge=1, description="use only the first N prompts")
    n_samples: int = Field(4, ge=1, description="samples per prompt (the GRPO group size)")
    concurrency: int = Field(16, ge=1, description="rollouts in flight at once")
    timeout_s: float = Field(600.0, gt=0, description="deadline of one rollout")
    session_attempts: int = Field(
        2, ge=1,
        description="runtime sessions per rollout when the infrastructure fails under it (a "
        "dead or unreachable worker, a lost session); agent errors, timeouts and "
        "cancellations are never retried; 1: never",
    )
    output_dir: str = Field("runs", description="where run directories are created")
    seed: int = 0
    sampling: dict[str, Any] = Field(
        default_factory=dict,
        description="sampling defaults sent to agents (temperature, max_tokens…; not seed)",
    )
    max_staleness: int | None = Field(
        None, ge=0, description="stop submitting when the oldest rollout lags this many versions"
    )
    progress: bool = True
    store_stall_warn_s: float = Field(
        30.0, gt=0, description="warn when the result store does not answer for this long"
    )

    @field_validator("sampling")
    @classmethod
    def _no_fixed_seed(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "seed" in value:
            raise ValueError("experiment.sampling.seed would draw the same tokens for every "
                             "sample of a prompt; set experiment.seed (one seed per episode)")
        return value

    @property
    def resolved_exp_id(self) -> str:
        """``exp_id`` or, when unset, the experiment name."""
        return self.exp_id or self.name


class ComponentSection(BaseModel):
    """A component choice: its ``name`` plus that component's options (extra keys)."""

    model_config = ConfigDict(extra="allow")

    name: str

    @property
    def options(self) -> dict[str, Any]:
        """The component's own options (every key but ``name``)."""
        return dict(self.model_extra or {})


class RuntimeSection(ComponentSection):
    """``[runtime]``: where agent code runs (default ``local``: worker processes here)."""

    name: str = "local"


class TokenSourceSection(ComponentSection):
    """``[token_source]``: where token ids come from (default ``none``: no capture)."""

    name: str = "none"


class TrainerSection(ComponentSection):
    """``[trainer]``: what consumes finished groups (default ``export``: Parquet + JSONL)."""

    name: str = "export"


class StoreSection(_Strict):
    """The result store, chosen by URL scheme."""

    url: str = Field("file://runs/results", description="file://DIR or s3://bucket/prefix")
    options: dict[str, Any] = Field(default_factory=dict, description="store options")

    @field_validator("url")
    @classmethod
    def _has_scheme(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError("needs a scheme: file://DIR or s3://bucket/prefix")
        return value

    @property
    def scheme(self) -> str:
        """The URL scheme, which names the store component."""
        return self.url.split("://", 1)[0]


class RewardsConfig(_Strict):
    """How rewards are collected and what happens to failed rollouts."""

    on_failure: Literal["exclude_episode", "drop_group", "zero_reward"] = Field(
        "exclude_episode", description="what training sees of a failed rollout"
    )
    weights: dict[str, float] = Field(
        default_factory=dict, description="weight per reward component (default 1.0 each)"
    )
    success_threshold: float = Field(1.0, description="reward at which a sample passes (pass@k)")
    min_group_size: int = Field(
        2, ge=1,
        description="episodes a group must keep once those lost to infrastructure faults "
        "(infra_error) are left out; a smaller group is dropped and counted",
    )


class TrainingConfig(_Strict):
    """``[training]``: the core's training loop (used when the trainer trains).

    Each step trains on ``batch_groups`` groups of ``experiment.n_samples`` samples. The run
    ends after ``steps`` steps or ``epochs`` passes over the dataset, whichever comes first.
    ``experiment.max_staleness`` bounds how far sampling runs ahead: 0 (the default here)
    is on-policy (sample, train, update, repeat); ``k`` lets groups for step ``s`` be
    sampled by weights as old as version ``s - k``.
    """

    batch_groups: int = Field(4, ge=1, description="groups (prompts) per training step")
    steps: int | None = Field(None, ge=1, description="stop after this many steps")
    epochs: int = Field(1, ge=1, description="passes over the dataset")
    shuffle: bool = Field(True, description="shuffle prompts each epoch (experiment.seed)")
    stratify: str | None = Field(
        None,
        description="a prompt field (e.g. 'split'): every step's prompts hold its values in "
        "the dataset's proportions, not whatever mix the shuffle dealt",
    )
    advantage: Literal["grpo", "grpo_mean", "rloo"] = Field(
        "grpo", description="advantage estimator over each group's rewards"
    )
    checkpoint_every: int = Field(10, ge=0, description="checkpoint every N steps (0: never)")
    keep_checkpoints: int = Field(
        2, ge=1,
        description="checkpoints kept: the newest N; an older one is deleted once a newer "
        "one is complete",
    )
    metric_sinks: list[str] = Field(
        default_factory=list, description="extra metric sinks: wandb, tensorboard, mlflow…"
    )
    sinks: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="options per metric sink ([training.sinks.wandb])"
    )
    keep_episodes: Literal["all"] | float = Field(
        "all",
        description='episodes kept in episodes.jsonl: "all", or a fraction in (0, 1] chosen '
        "deterministically by episode id (0.1 keeps about one in ten)",
    )

    @field_validator("keep_episodes", mode="before")
    @classmethod
    def _keep_fraction(cls, value: object) -> str | float:
        if value == "all":
            return "all"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError('must be "all" or a fraction in (0, 1], e.g. 0.1')
        if not 0 < value <= 1:
            raise ValueError('must be a fraction in (0, 1] (or "all"), e.g. 0.1')
        return float(value)


class EvalConfig(_Strict):
    """``[eval]``: held-out prompts scored by ``rollhub eval``, and by a training run before
    its first step and after its last (the same engine, base weights then trained ones)."""

    dataset: str | None = Field(None, description="JSONL of held-out prompts (None: no eval)")
    max_prompts: int | None = Field(None, ge=1, description="use only the first N prompts")
    n_samples: int = Field(4, ge=1, description="samples per prompt (pass@k uses k = n)")
    before_training: bool = Field(True, description="a training run scores the base policy")
    after_training: bool = Field(True, description="a training run scores its final policy")
    split_field: str | None = Field(
        "split",
        description="payload field naming each prompt's split; reports give figures per "
        "split (None: no splits)",
    )


class LoggingConfig(_Strict):
    """Standard-library logging settings.

    The level of the ``rollhub`` loggers: ``rollhub --log-level`` when given, else this
    ``level`` (default WARNING, the same as the command line's).
    """

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    file: str | None = None


class PluginsConfig(BaseModel):
    """``[plugins]``: extra plugin modules and per-plugin settings (``[plugins.<name>]``)."""

    model_config = ConfigDict(extra="allow")

    modules: list[str] = Field(default_factory=list, description="dotted plugin modules to load")

    def settings(self, plugin: str) -> dict[str, Any]:
        """The ``[plugins.<plugin>]`` table (empty when absent)."""
        value = (self.model_extra or {}).get(plugin, {})
        return dict(value) if isinstance(value, Mapping) else {}


class RollhubConfig(_Strict):
    """The whole ``rollhub.toml``."""

    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig)
    runtime: RuntimeSection = Field(default_factory=RuntimeSection)
    store: StoreSection = Field(default_factory=StoreSection)
    token_source: TokenSourceSection = Field(default_factory=TokenSourceSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    plugins: PluginsConfig = Field(default_factory=PluginsConfig)
    #: bounds of rollouts run as sessions (runtimes that offer them: ``a2a``)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    #: several policies in one episode (:mod:`rollhub.policies`); none: one policy
    policies: list[PolicyConfig] = Field(default_factory=list)
    #: a frozen model that scores or ranks each group's episodes (:mod:`rollhub.judge`)
    judge: JudgeConfig | None = None

    #: directory relative paths in the file are resolved against (set by the loader).
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)

    @field_validator("policies")
    @classmethod
    def _unique_policies(cls, value: list[PolicyConfig]) -> list[PolicyConfig]:
        check_policies(value)
        return value

    def path(self, value: str | os.PathLike[str]) -> Path:
        """Resolve a path from the config against the config file's directory."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    def to_toml_dict(self) -> dict[str, Any]:
        """The resolved config as plain data (for the run directory's copy)."""
        return self.model_dump(mode="json", exclude_none=True)


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> RollhubConfig:
    """Read, override from the environment, and validate a ``rollhub.toml``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} does not exist", field=None) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}", field=None) from exc
    return parse_config(data, env=env, base_dir=p.resolve().parent, source=str(p))


def parse_config(
    data: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
    source: str = "config",
) -> RollhubConfig:
    """Validate config data (a parsed TOML document), after environment overrides."""
    env = os.environ if env is None else env
    merged = _apply_env(copy.deepcopy(dict(data)), env)
    try:
        cfg = RollhubConfig.model_validate(merged)
    except ValidationError as exc:
        field = first_loc(exc)
        message = explain(exc, RollhubConfig, source) + env_note(field, env)
        raise ConfigError(message, field=field) from None
    if base_dir is not None:
        cfg.base_dir = base_dir
    return cfg


def env_note(field: str | None, env: Mapping[str, str]) -> str:
    """`` (set by ROLLHUB_A__B in the environment)`` when a ``ROLLHUB_*`` variable set the
    dotted key ``field`` or a key above it; else ``""``. An error then blames the variable,
    not the file, which may not hold the key at all."""
    for var in sorted(env) if field else ():
        path = ".".join(_env_parts(var))
        if path and (field == path or str(field).startswith(f"{path}.")):
            return f" (set by {var} in the environment)"
    return ""


def _env_parts(var: str) -> list[str]:
    if not var.startswith(ENV_PREFIX) or "__" not in var:
        return []
    return [p.lower() for p in var[len(ENV_PREFIX) :].split("__")]


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    for var, raw in sorted(env.items()):
        parts = _env_parts(var)
        if not parts:
            continue
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = _parse_env_value(raw)
    return data


def _parse_env_value(raw: str) -> object:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
