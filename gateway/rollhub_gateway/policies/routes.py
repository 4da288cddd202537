"""Which policy serves a model call: routes by the ``model`` the agent sends.

A gateway serves one policy (its sampling backend, under its model id) unless it is given
several (``[[policies]]`` in a ``rollhub.toml``, ``policies`` in a gateway config). Then
every policy has its own route: a name, the model id agents send to reach it, its own
sampling backend (its own weights) and its own weight version. A call is served by the
route its ``model`` names; a model name no route has, or no model at all, is a 400 that
lists the policies. A gateway with one policy keeps serving whatever model name an agent
sends (or none), as it always has.

The weight version a turn is stamped with is its policy's: a trainer that publishes the
weights of one policy moves that policy's version only. A frozen route refuses new
weights, so a policy marked frozen cannot be changed by a bug in a trainer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rollhub.errors import UsageError
from rollhub.sampling import SamplingBackend

from rollhub_gateway.policies.names import check_policy_names
from rollhub_gateway.protocols.base import WireError

__all__ = ["PolicyRoute", "PolicyRoutes"]

log = logging.getLogger(__name__)


@dataclass
class PolicyRoute:
    """One served policy.

    :param name: its ``[[policies]]`` name; None for the only policy of a gateway without
        policies (its turns carry no policy name).
    :param model_id: the model name that reaches it.
    :param backend: the sampling backend holding its weights.
    :param trainable: False: a frozen policy; :meth:`PolicyRoutes.publish` refuses it.
    :param weight_version: its own version (None: the gateway's single version).
    """

    name: str | None
    model_id: str
    backend: SamplingBackend
    trainable: bool = True
    weight_version: int | None = None


class PolicyRoutes:
    """The routes of one gateway, looked up by the model name a call sends.

    :param routes: the first is the default (the one policy of an unrouted gateway).
    :param version: the gateway's own version, read for a route that has none (one policy).
    :raises UsageError: no route, or a model name that would reach two routes.
    """

    def __init__(self, routes: list[PolicyRoute], *, version: Callable[[], int | None]) -> None:
        if not routes:
            raise UsageError("a gateway serves at least one policy")
        try:
            check_policy_names([(r.name, r.model_id) for r in routes])
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.routes = list(routes)
        self.default = self.routes[0]
        self._by_model = {r.model_id: r for r in self.routes}
        self._by_name = {r.name: r for r in self.routes if r.name is not None}
        self._version = version

    @property
    def routed(self) -> bool:
        """Whether calls are routed by model name (the gateway serves named policies)."""
        return bool(self._by_name)

    def __iter__(self) -> Iterator[PolicyRoute]:
        return iter(self.routes)

    def __len__(self) -> int:
        return len(self.routes)

    def for_model(self, model: str | None) -> PolicyRoute:
        """The route serving a call that sent ``model``.

        :raises WireError: 400 (``model``) when policies are served and none has that
            model name, or the call sends none; the message lists them.
        """
        if not self.routed:
            return self.default
        if model is None:
            # no silent default: the agent would be served by a policy it never chose
            served = ", ".join(repr(r.model_id) for r in self.routes)
            raise WireError(
                "invalid_request",
                f"'model' is required: this gateway routes each call by its model name to "
                f"one of the policies {self.listing()}; send one of the model names {served}",
                param="model",
            )
        route = self._by_model.get(model)
        if route is None:
            raise WireError(
                "invalid_request",
                f"model {model!r} is not served here; this gateway serves the policies "
                f"{self.listing()}: send one of these model names",
                param="model",
            )
        return route

    def named(self, name: str) -> PolicyRoute:
        """The route of policy ``name``.

        :raises UsageError: no such policy (the message lists them).
        """
        route = self._by_name.get(name)
        if route is None:
            raise UsageError(f"no policy named {name!r} is served here; policies: {self.listing()}")
        return route

    def listing(self) -> str:
        """``'proposer' (model 'proposer'), …`` for messages."""
        return ", ".join(
            f"{r.name!r} (model {r.model_id!r}{'' if r.trainable else ', frozen'})"
            for r in self.routes
        )

    def version(self, route: PolicyRoute) -> int | None:
        """The version a turn of ``route`` is stamped with when it starts."""
        return route.weight_version if route.weight_version is not None else self._version()

    def models(self) -> dict[str, str]:
        """Policy name → model id of every named route (empty with one policy)."""
        return {r.name: r.model_id for r in self.routes if r.name is not None}

    def backends(self) -> list[SamplingBackend]:
        """Every route's backend, once each."""
        seen: dict[int, SamplingBackend] = {}
        for r in self.routes:
            seen.setdefault(id(r.backend), r.backend)
        return list(seen.values())

    def publish(self, updates: Mapping[str, Any]) -> None:
        """Apply a step's per-policy updates (:class:`rollhub.policies.PolicyUpdates`):
        each policy's new weights to its backend (none: its backend's weights are relabeled
        with the new version), then its version.

        :raises UsageError: an update names a policy not served here, or gives new weights
            to a frozen one.
        """
        for name, update in updates.items():
            route = self.named(name)
            if update.policy is not None:
                if not route.trainable:
                    raise UsageError(
                        f"policy {name!r} is frozen (trainable = false): it takes no new "
                        f"weights; a trainer must not train it"
                    )
                route.backend.update_policy(update.policy, update.version)
            elif route.trainable:  # a step that changed nothing: same weights, new version
                route.backend.set_weight_version(update.version)
            route.weight_version = update.version
            log.debug("policy %s: version %s", name, update.version)
