"""Write the slime arguments that put rollhub in charge of rollouts.

It reads a ``rollhub.toml``, writes one small file for slime's ``--custom-config-path``
(it sets ``args.rollhub_config`` to the absolute path of the rollhub.toml; JSON, which is
also YAML) and returns the arguments to add to slime's ``train.py`` command line. It starts
no process and stops none: the user runs slime with these arguments.

::

    python -m rollhub_slime.launch rollhub.toml --out runs/slime
    # prints: --rollout-function-path rollhub_slime.rollout.generate_rollout ...

What is derived from the rollhub.toml: the GRPO group size (``--n-samples-per-prompt`` from
``[experiment] n_samples``), the rollout sampling slime logs and uses for its own calls
(``--rollout-temperature``, ``--rollout-top-p``, ``--rollout-top-k`` and
``--rollout-max-response-len`` from ``[experiment] sampling``) and, for a ``slime-router``
engine with ``router_policy``, slime's ``--router-policy``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

from rollhub.config import RollhubConfig, load_config
from rollhub.errors import ConfigError, RollhubError

from rollhub_slime.runner import CONFIG_ARG, ROUTER_ENGINE, apply_slime_args
from rollhub_slime.settings import slime_settings

log = logging.getLogger(__name__)

__all__ = ["CUSTOM_CONFIG_NAME", "main", "slime_arguments", "write_launch_files"]

CUSTOM_CONFIG_NAME = "rollhub_slime.yaml"
ROLLOUT_FUNCTION = "rollhub_slime.rollout.generate_rollout"
GENERATE_FUNCTION = "rollhub_slime.rollout.generate"
REWARD_POST_PROCESS = "rollhub_slime.rewards.post_process_rewards"

#: [experiment] sampling key → slime argument
_SAMPLING_ARGS = {
    "temperature": "--rollout-temperature",
    "top_p": "--rollout-top-p",
    "top_k": "--rollout-top-k",
    "max_tokens": "--rollout-max-response-len",
}


def slime_arguments(
    config: RollhubConfig, custom_config: Path, *, mode: str = "rollout"
) -> list[str]:
    """slime command-line arguments for ``config``.

    :param custom_config: the file written for ``--custom-config-path``.
    :param mode: ``rollout`` (slime calls the rollout function) or ``generate`` (slime keeps
        its loop and calls the per-sample generate function).
    :raises ConfigError: an unknown ``mode``, a config that does not select the slime
        trainer, or a bad ``[plugins.slime]`` key.
    """
    apply_slime_args(config, None)
    # a bad key fails here, before slime allocates GPUs, not in slime's first rollout
    slime_settings(config)
    if mode == "rollout":
        args = ["--rollout-function-path", ROLLOUT_FUNCTION]
    elif mode == "generate":
        args = ["--custom-generate-function-path", GENERATE_FUNCTION]
    else:
        raise ConfigError(f"mode must be 'rollout' or 'generate', got {mode!r}", field="mode")
    args += ["--custom-reward-post-process-path", REWARD_POST_PROCESS]
    args += ["--custom-config-path", str(custom_config)]
    args += ["--n-samples-per-prompt", str(config.experiment.n_samples)]
    for key, flag in _SAMPLING_ARGS.items():
        value = config.experiment.sampling.get(key)
        if value is not None:
            args += [flag, str(value)]
    engine = (config.token_source.model_extra or {}).get("engine")
    if config.token_source.name == "gateway" and isinstance(engine, dict):
        policy = (engine.get("options") or {}).get("router_policy")
        if engine.get("name") == ROUTER_ENGINE and policy:
            args += ["--router-policy", str(policy)]
    return args


def write_launch_files(
    config_path: str | Path, out_dir: str | Path, *, mode: str = "rollout"
) -> list[str]:
    """Write ``out_dir/rollhub_slime.yaml`` and return the slime arguments.

    :raises ConfigError: the rollhub.toml is invalid or does not select the slime trainer.
    """
    path = Path(config_path).resolve()
    config = load_config(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    custom = (out / CUSTOM_CONFIG_NAME).resolve()
    args = slime_arguments(config, custom, mode=mode)
    custom.write_text(json.dumps({CONFIG_ARG: str(path)}, indent=2) + "\n", encoding="utf-8")
    return args


def main(argv: list[str] | None = None) -> int:
    """``python -m rollhub_slime.launch``: print the slime arguments for a rollhub.toml."""
    parser = argparse.ArgumentParser(
        prog="python -m rollhub_slime.launch",
        description="Write the slime arguments that run rollouts through rollhub.",
    )
    parser.add_argument("config", help="path of the rollhub.toml")
    parser.add_argument("--out", default=".", help="where to write rollhub_slime.yaml")
    parser.add_argument("--mode", choices=["rollout", "generate"], default="rollout")
    ns = parser.parse_args(argv)
    try:
        args = write_launch_files(ns.config, ns.out, mode=ns.mode)
    except RollhubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(shlex.join(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
