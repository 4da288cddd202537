"""From a run's ``[[policies]]`` to the policies its gateway serves.

The ``gateway`` token source serves every ``[[policies]]`` entry of the run's config from
an engine of its own (the ``engine`` section, with the policy's ``weights`` loaded over the
model), routed by model name (:mod:`rollhub_gateway.policies.routes`). What it cannot do is
refused before anything runs, with the reason:

- a remote gateway (``token_source.url``): the trainer's per-policy weights are Python
  objects that only reach an in-process gateway;
- a pool of replicas (``token_source.pool``): every replica would need an engine per
  policy and the per-policy versions; not wired;
- ``policies`` in ``[token_source]`` as well as ``[[policies]]``: one list of policies;
- a policy whose ``model_id`` is another policy's name (or names and model ids shared):
  a model name would reach the wrong policy (:mod:`rollhub_gateway.policies.names`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rollhub.errors import ConfigError

from rollhub_gateway.config import ServedPolicy
from rollhub_gateway.policies.names import check_policy_names

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig

__all__ = ["check_policy_serving", "served_policies"]


def check_policy_serving(config: RollhubConfig) -> None:
    """Refuse ``[[policies]]`` with gateway settings that cannot serve them.

    :raises ConfigError: naming the field, the reason and the fix.
    """
    if not getattr(config, "policies", None) or config.token_source.name != "gateway":
        return
    try:
        check_policy_names([(p.name, p.model_id or p.name) for p in config.policies])
    except ValueError as exc:
        raise ConfigError(f"[[policies]]: {exc}", field="policies") from None
    options = config.token_source.options
    if options.get("url"):
        raise ConfigError(
            "[[policies]] need the gateway in process: token_source.url points at a remote "
            "gateway, which a trainer's per-policy weights cannot reach; drop "
            "token_source.url",
            field="token_source.url",
        )
    if options.get("pool"):
        raise ConfigError(
            "[[policies]] are served by one in-process gateway: token_source.pool (replicas, "
            "each needing an engine per policy) does not serve several policies yet; drop "
            "token_source.pool",
            field="token_source.pool",
        )
    if options.get("policies"):
        raise ConfigError(
            "policies are given twice: in [[policies]] and in token_source.policies; keep "
            "[[policies]]",
            field="token_source.policies",
        )


def served_policies(config: RollhubConfig, base_dir: str | Path | None) -> list[ServedPolicy]:
    """The gateway's view of ``config.policies`` (weights paths made absolute)."""
    check_policy_serving(config)
    out = []
    for p in getattr(config, "policies", None) or []:
        weights = p.weights
        if weights and base_dir is not None and not Path(weights).expanduser().is_absolute():
            weights = str(Path(base_dir) / weights)
        out.append(
            ServedPolicy(name=p.name, model_id=p.model_id, trainable=p.trainable, weights=weights)
        )
    return out
