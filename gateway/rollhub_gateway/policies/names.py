"""Names and model ids of served policies: each model name reaches exactly one policy.

A call is routed by the model name it sends (:mod:`rollhub_gateway.policies.routes`), so two
policies under one model id would leave one of them unreachable (the last one listed would
take every call), and a policy whose model id is another policy's name would take the calls
of an agent that sends that policy's name. Both are refused before anything is served: in
the gateway config, in a run's ``[[policies]]`` at config check, and in routes built in code.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["check_policy_names"]


def check_policy_names(policies: Sequence[tuple[str | None, str]]) -> None:
    """Refuse ``(name, model id)`` pairs where a model name could reach two policies.

    Refused: two policies with one name, two with one model id, and a policy whose model id
    is another policy's name. A policy served under its own name is fine (the default).

    :param policies: each policy's name (None: the unnamed policy of a one-policy
        gateway) and the model id that reaches it, in order.
    :raises ValueError: naming both entries and the clash.
    """
    names: dict[str, int] = {}
    models: dict[str, int] = {}
    for i, (name, model_id) in enumerate(policies):
        if name is not None:
            if name in names:
                raise ValueError(
                    f"policies[{i}] has the name {name!r} of policies[{names[name]}]; each "
                    f"policy needs its own"
                )
            names[name] = i
        if model_id in models:
            j = models[model_id]
            raise ValueError(
                f"policies[{i}] {name!r} has the model id {model_id!r} of policies[{j}] "
                f"{policies[j][0]!r}: a call naming {model_id!r} can reach only one of them; "
                f"give each policy its own model_id"
            )
        models[model_id] = i
    for i, (name, model_id) in enumerate(policies):
        # checked once every name is known: the clash may be with a later entry
        other = names.get(model_id)
        if other is not None and other != i:
            raise ValueError(
                f"policies[{i}] {name!r} has the model id {model_id!r}, the name of "
                f"policies[{other}] (model {policies[other][1]!r}): an agent sending {model_id!r} "
                f"would reach {name!r}; give {name!r} another model_id"
            )
