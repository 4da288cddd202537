"""The per-dataset fields of slime's ``EvalDatasetConfig``: each honoured or refused.

slime resolves a dataset's fields when it parses its arguments
(``slime/utils/eval_config.py::build_eval_dataset_configs``): the dataset's own value, else
``eval.defaults`` of ``--eval-config``, else slime's arguments (``--eval-temperature`` then
``--rollout-temperature``, ``--eval-custom-rm-path`` then ``--custom-rm-path``, ...).
rollhub reads the resolved values. :func:`check_eval_datasets` runs before any eval rollout
(and, in ``--rollout-function-path`` mode, before the hub starts; see
:mod:`rollhub_slime.step_hooks`).

Honoured:

- ``name``, ``path``, ``input_key``, ``label_key``, ``metadata_key``,
  ``n_samples_per_eval_prompt``: how the file becomes prompt groups
  (:mod:`rollhub_slime.eval_data`).
- ``rm_type`` and ``metadata_overrides``: merged into each sample's metadata as slime's
  ``inject_metadata`` merges them (``rm_type`` when set, then the overrides, which win), so
  they reach the agent's payload (:func:`eval_metadata`).
- ``temperature``, ``top_p``, ``top_k``, ``max_response_len`` (rollhub's ``max_tokens``) and
  ``stop``: the dataset's episodes run with them merged over ``[experiment] sampling``
  (:func:`eval_sampling`). The first four become the gateway session's sampling defaults;
  ``stop`` reaches the agent in ``_rollout.sampling`` for its own model calls (the session
  policy holds no stop strings), as a ``stop`` in ``[experiment] sampling`` does.
- ``min_eval_samples``: rollhub runs every eval sample to its end, so the minimum is met.

Refused with a :class:`~rollhub.errors.ConfigError` naming the dataset and the field:

- ``custom_generate_function_path``, ``app_service``, ``message_processor``,
  ``reward_model``, ``remote_environment``: slime's own generation and reward machinery,
  which the agent replaces (it generates and computes the reward); what the agent needs
  goes in through ``metadata_overrides``.
- ``custom_rm_path`` (from the dataset, ``eval.defaults``, ``--eval-custom-rm-path`` or
  ``--custom-rm-path``): slime calls its reward function only from its own rollout loop,
  never when ``--rollout-function-path`` replaces it, so rollhub's rollout function (train
  and eval alike) has the agent's reward and nothing else. In ``--custom-generate-function-
  path`` mode slime's own loop runs the eval and scores rewardless episodes with it; that
  loop hands each call the dataset's ``sampling_params``, of which rollhub takes the keys
  :func:`generate_eval_sampling` lists.
- ``stop_token_ids``, ``min_new_tokens``, ``repetition_penalty``, ``skip_special_tokens``,
  ``no_stop_trim``: the gateway takes none of them, from a session or from an agent's call
  (it stops at the model's own end tokens and returns the text the agent's protocol asks
  for).
- ``multimodal_keys`` and non-empty ``apply_chat_template_kwargs``: the agent receives the
  row's ``input_key`` value as its prompt and the gateway renders its calls with the model's
  own chat template, so neither media columns nor template arguments reach the model.
- ``eval_task_timeout``: every rollout's deadline is ``[experiment] timeout_s`` (a rollout
  past it ends as ``timeout`` and counts with reward 0); there is no per-dataset deadline.
- ``eval_early_stop_remaining``, ``eval_early_stop_idle_timeout``: rollhub runs every eval
  sample to its end; it does not stop a dataset early.

Not read: ``tool_key`` and ``apply_chat_template`` (slime's own prompt rendering: the agent
declares its tools and makes chat calls, which the gateway renders with the model's
template, so the rendered prompt is the model's either way).
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from rollhub.errors import ConfigError

from rollhub_slime.slime_types import EvalDataset

__all__ = [
    "HONOURED",
    "NOT_READ",
    "REFUSED",
    "SAMPLING_KEYS",
    "check_eval_dataset",
    "check_eval_datasets",
    "eval_metadata",
    "eval_sampling",
    "generate_eval_sampling",
]

#: dataset fields honoured other than the sampling ones (see the module docstring)
HONOURED = (
    "name",
    "path",
    "input_key",
    "label_key",
    "metadata_key",
    "n_samples_per_eval_prompt",
    "rm_type",
    "metadata_overrides",
    "min_eval_samples",
)
#: dataset fields of slime's own prompt rendering, which the agent and the gateway replace
NOT_READ = ("tool_key", "apply_chat_template")

#: dataset field → rollhub sampling key
SAMPLING_KEYS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_response_len": "max_tokens",
    "stop": "stop",
}

_AGENT_REPLACES = "rollhub's agent generates every response and computes its reward"

#: refused dataset field → why rollhub cannot honour it
REFUSED = {
    "custom_generate_function_path": f"slime's per-dataset generate function; {_AGENT_REPLACES}",
    "app_service": f"slime's app-service generation; {_AGENT_REPLACES}",
    "message_processor": f"slime's message processing; {_AGENT_REPLACES}",
    "reward_model": f"slime's reward model; {_AGENT_REPLACES}",
    "remote_environment": f"slime's remote environment; {_AGENT_REPLACES}",
    "custom_rm_path": (
        "slime's reward function (it also comes from --eval-custom-rm-path or "
        "--custom-rm-path); with --rollout-function-path slime never calls it and "
        f"{_AGENT_REPLACES}"
    ),
    "stop_token_ids": (
        "the gateway stops at the model's own end tokens and takes no stop token ids "
        "(it also comes from --rollout-stop-token-ids)"
    ),
    "min_new_tokens": (
        "the gateway takes no minimum length (it also comes from --eval-min-new-tokens)"
    ),
    "repetition_penalty": "the gateway takes no repetition penalty",
    "skip_special_tokens": "the gateway returns the text the agent's protocol asks for",
    "no_stop_trim": "the gateway returns the text the agent's protocol asks for",
    "multimodal_keys": "the agent receives only the row's input_key value as its prompt",
    "apply_chat_template_kwargs": (
        "the gateway renders the agent's calls with the model's chat template as it is"
    ),
    "eval_task_timeout": (
        "each rollout's deadline is [experiment] timeout_s in rollhub.toml (a rollout past "
        "it counts with reward 0); set that instead"
    ),
    "eval_early_stop_remaining": "rollhub runs every eval sample to its end",
    "eval_early_stop_idle_timeout": "rollhub runs every eval sample to its end",
}


def check_eval_datasets(args: Namespace) -> None:
    """Refuse, for every dataset of ``args.eval_datasets``, what rollhub cannot honour.

    :raises ConfigError: as :func:`check_eval_dataset`.
    """
    for cfg in getattr(args, "eval_datasets", None) or []:
        check_eval_dataset(cfg)


def check_eval_dataset(cfg: EvalDataset) -> None:
    """Refuse a dataset field rollhub cannot honour (the module docstring lists them).

    :raises ConfigError: the first such field that is set, naming the dataset, the field
        and what to do instead.
    """
    for name, why in REFUSED.items():
        value = getattr(cfg, name, None)
        if value is None or (isinstance(value, (Mapping, list, str)) and not value):
            continue
        hint = (
            "pass what the agent needs through metadata_overrides"
            if _AGENT_REPLACES in why
            else "drop it"
        )
        raise ConfigError(
            f"eval dataset {cfg.name!r} sets {name}={value!r}, which rollhub cannot honour: "
            f"{why}; remove it from the dataset (and eval.defaults, and the slime argument it "
            f"comes from) and {hint}",
            field=f"eval_datasets.{cfg.name}.{name}",
        )


def eval_sampling(cfg: EvalDataset) -> dict[str, Any]:
    """The sampling keys a dataset sets, as rollhub names them (unset fields left out)."""
    return _rollhub_sampling(
        {name: getattr(cfg, name, None) for name in SAMPLING_KEYS}, SAMPLING_KEYS
    )


#: slime's SGLang ``sampling_params`` key → rollhub's sampling key
_SGLANG_KEYS = {
    **{k: v for k, v in SAMPLING_KEYS.items() if k != "max_response_len"},
    "max_new_tokens": "max_tokens",
}


def generate_eval_sampling(sampling_params: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of slime's per-dataset ``sampling_params`` (what slime's own eval loop hands
    a ``--custom-generate-function-path`` function) that rollhub honours, as rollhub names
    them; the others are not the gateway's to take (see the module docstring)."""
    return _rollhub_sampling(sampling_params, _SGLANG_KEYS)


def _rollhub_sampling(values: Mapping[str, Any], keys: Mapping[str, str]) -> dict[str, Any]:
    """``values`` renamed by ``keys``, unset ones left out; a single stop string as a list."""
    sampling = {key: values[name] for name, key in keys.items() if values.get(name) is not None}
    stop = sampling.get("stop")
    if stop is not None:
        sampling["stop"] = [stop] if isinstance(stop, str) else list(stop)
    return sampling


def eval_metadata(cfg: EvalDataset, metadata: object) -> dict[str, Any]:
    """A sample's metadata with the dataset's ``rm_type`` and ``metadata_overrides``.

    As slime's ``EvalDatasetConfig.inject_metadata``: a copy of ``metadata`` (a non-mapping
    becomes empty), then ``rm_type`` when set, then every override, which wins.
    """
    merged = dict(metadata) if isinstance(metadata, Mapping) else {}
    rm_type = getattr(cfg, "rm_type", None)
    if rm_type is not None:
        merged["rm_type"] = rm_type
    merged.update(getattr(cfg, "metadata_overrides", None) or {})
    return merged
