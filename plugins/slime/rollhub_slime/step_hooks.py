"""slime's per-step sampling arguments, checked and loaded before the hub starts.

slime's own rollout function (``slime/rollout/sglang_rollout.py::generate_rollout_async``)
honours these arguments; :func:`rollhub_slime.rollout.generate_rollout` honours them the
same way:

- ``--over-sampling-batch-size``: prompt groups are fetched from the data source in batches
  of this size while fewer than ``--rollout-batch-size`` candidates remain;
- ``--dynamic-sampling-filter-path``: ``fn(args, group) -> DynamicFilterOutput | bool`` on
  each finished group; dropped groups are replaced by fetching more;
- ``--rollout-sample-filter-path``: ``fn(args, groups)`` on the chosen groups (it sets
  ``remove_sample``);
- ``--rollout-all-samples-process-path``: ``fn(args, all_groups, data_source)`` on every
  finished group, dropped ones included.

``--partial-rollout`` (and ``--mask-offpolicy-in-partial-rollout``) are refused: slime
hands half-generated samples back to the data source to continue them in a later step, and
a rollhub episode (an agent program with its own state) cannot be resumed from a partial
response. In ``--custom-generate-function-path`` mode slime's own loop applies
over-sampling and the filters, and the partial-rollout refusal applies there too.

In ``--rollout-function-path`` mode two more checks run before the hub starts
(:meth:`StepHooks.from_args`):

- ``--custom-rm-path`` is refused. slime calls its reward function only from its own
  rollout loop (``slime/rollout/rm_hub``, reached from ``sglang_rollout.py``), never when a
  custom rollout function replaces that loop; rollhub's rollout function, for training and
  for evaluation alike, takes each episode's reward from the agent. In
  ``--custom-generate-function-path`` mode slime keeps its loop and scores with it the
  episodes the agent left without a reward, so it is honoured there.
- every dataset of ``args.eval_datasets`` is checked
  (:func:`rollhub_slime.eval_options.check_eval_datasets`), so a field rollhub's eval
  cannot honour fails at launch, not at the first evaluation. In
  ``--custom-generate-function-path`` mode slime's own loop runs the eval datasets.
"""

from __future__ import annotations

import importlib
import logging
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rollhub.errors import ConfigError

from rollhub_slime.eval_options import check_eval_datasets
from rollhub_slime.slime_types import SampleGroup

log = logging.getLogger(__name__)

__all__ = ["StepHooks", "check_slime_flags", "filter_decision", "load_hook"]

_PARTIAL = {
    "partial_rollout": "--partial-rollout",
    "mask_offpolicy_in_partial_rollout": "--mask-offpolicy-in-partial-rollout",
}


def check_slime_flags(args: Namespace) -> None:
    """Refuse slime arguments rollhub cannot honour in either hook mode.

    :raises ConfigError: ``--partial-rollout`` or ``--mask-offpolicy-in-partial-rollout``
        is set.
    """
    for attr, flag in _PARTIAL.items():
        if getattr(args, attr, False):
            raise ConfigError(
                f"slime's {flag} is set, but rollhub runs every rollout to its end and "
                f"cannot resume an agent from a partial response (slime would recycle "
                f"aborted samples into the next step); drop --partial-rollout and "
                f"--mask-offpolicy-in-partial-rollout from slime's command line",
                field=attr,
            )


def load_hook(flag: str, path: str) -> Callable[..., Any]:
    """The function at ``path`` (``package.module.function``), as slime's ``load_function``.

    :raises ConfigError: the module or the attribute cannot be found.
    """
    field = flag.lstrip("-").replace("-", "_")
    module_name, _, attr = path.rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(
            f"slime's {flag} {path} cannot be loaded: {exc}; give an importable "
            f"'package.module.function'",
            field=field,
        ) from exc
    if not callable(function):
        raise ConfigError(f"slime's {flag} {path} is not a function", field=field)
    hook: Callable[..., Any] = function
    return hook


@dataclass(frozen=True)
class StepHooks:
    """One training step's sampling arguments, loaded."""

    rollout_batch_size: int
    over_sampling_batch_size: int
    dynamic_filter: Callable[..., Any] | None = None
    sample_filter: Callable[..., Any] | None = None
    all_samples_process: Callable[..., Any] | None = None

    @classmethod
    def from_args(cls, args: Namespace) -> StepHooks:
        """Check and load the step arguments from slime's parsed arguments.

        :raises ConfigError: a flag from :func:`check_slime_flags`, ``--custom-rm-path``,
            an eval dataset field rollhub cannot honour, an over-sampling batch smaller than
            the rollout batch (slime asserts the same), or a hook that cannot be loaded.
        """
        check_slime_flags(args)
        if getattr(args, "custom_rm_path", None):
            raise ConfigError(
                f"slime's --custom-rm-path {args.custom_rm_path} is set, but with "
                f"--rollout-function-path slime never calls its reward function and rollhub "
                f"takes each episode's reward from the agent; compute the reward in the agent "
                f"(or a rollhub reward plugin) and drop --custom-rm-path",
                field="custom_rm_path",
            )
        check_eval_datasets(args)
        target = int(args.rollout_batch_size)
        over = getattr(args, "over_sampling_batch_size", None) or target
        if over < target:
            raise ConfigError(
                f"slime's --over-sampling-batch-size {over} is smaller than "
                f"--rollout-batch-size {target}; it must be at least as large",
                field="over_sampling_batch_size",
            )

        def hook(attr: str) -> Callable[..., Any] | None:
            path = getattr(args, attr, None)
            return load_hook("--" + attr.replace("_", "-"), path) if path else None

        return cls(
            rollout_batch_size=target,
            over_sampling_batch_size=int(over),
            dynamic_filter=hook("dynamic_sampling_filter_path"),
            sample_filter=hook("rollout_sample_filter_path"),
            all_samples_process=hook("rollout_all_samples_process_path"),
        )


def filter_decision(
    hooks: StepHooks, args: Namespace, group: SampleGroup, *, remaining: int
) -> tuple[bool, str | None]:
    """``(keep, reason)`` for a finished group, by slime's rule.

    A ``DynamicFilterOutput`` (or a bare bool, slime's legacy form) keeps the group when
    ``keep`` is true, or when ``keep_when_insufficient`` is set and dropping it would leave
    fewer candidates (``remaining``) than the rollout batch needs.
    """
    if hooks.dynamic_filter is None:
        return True, None
    output = hooks.dynamic_filter(args, group)
    if isinstance(output, bool) or not hasattr(output, "keep"):
        return bool(output), None
    if output.keep:
        return True, None
    if getattr(output, "keep_when_insufficient", False) and remaining <= hooks.rollout_batch_size:
        return True, None
    return False, getattr(output, "reason", None)
