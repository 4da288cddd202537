"""The ``slime-router`` sampling backend: the gateway samples from slime's SGLang router.

It speaks SGLang's native ``POST /generate`` (token ids in, ``output_token_logprobs`` out)
through the gateway's SGLang backend, with what slime's own rollout sends on top:

- the router address comes from slime's ``--sglang-router-ip``/``--sglang-router-port``
  (the rollout function fills ``base_url`` in from slime's arguments when it is unset);
- with ``--router-policy consistent_hashing`` every turn carries
  ``X-SMG-Routing-Key: <session id>``, so all turns of one rollout reach the engine that
  holds their prefix;
- each turn is stamped with the engine's own ``meta_info.weight_version`` (slime sends its
  version as a string of digits; anything else falls back to the hub's version).

Example ``rollhub.toml``::

    [token_source]
    name = "gateway"
    engine = { name = "slime-router", options = { router_policy = "consistent_hashing" } }
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import Field, model_validator
from rollhub.errors import ConfigError
from rollhub_gateway.engines.sglang import SGLangBackend, SGLangOptions

log = logging.getLogger(__name__)

__all__ = ["ROUTING_HEADER", "SlimeRouterBackend", "SlimeRouterOptions"]

#: the header slime's rollout sends to a consistent-hashing SGLang model gateway
ROUTING_HEADER = "X-SMG-Routing-Key"


class SlimeRouterOptions(SGLangOptions):
    """Options of the slime router backend (the SGLang ones, and slime's routing policy)."""

    base_url: str = Field(
        "", description="router root; empty: filled from slime's --sglang-router-ip/port"
    )
    router_policy: str | None = Field(
        None, description="slime's --router-policy; 'consistent_hashing' sends the routing key"
    )
    routing_key_header: str | None = Field(
        None, description="header of the routing key (default X-SMG-Routing-Key when hashing)"
    )
    weight_version_source: Literal["engine", "hub"] = Field(
        "engine", description="'engine': the router's meta_info.weight_version wins"
    )

    @model_validator(mode="after")
    def _routing_header(self) -> SlimeRouterOptions:
        if self.router_policy == "consistent_hashing" and self.routing_key_header is None:
            self.routing_key_header = ROUTING_HEADER
        return self


class SlimeRouterBackend(SGLangBackend):
    """SGLang ``/generate`` on slime's router, routed by rollout session."""

    name = "slime-router"
    Options = SlimeRouterOptions
    options: SlimeRouterOptions

    @property
    def base_url(self) -> str:
        if not self.options.base_url:
            raise ConfigError(
                "engine.options.base_url of the slime-router backend is empty; run the hub "
                "through rollhub_slime's rollout function (it fills in slime's "
                "--sglang-router-ip/--sglang-router-port) or set base_url to the router's root",
                field="token_source.engine.options.base_url",
            )
        return self.options.base_url.rstrip("/")

    def _version(self, meta: dict[str, Any]) -> int | None:
        if self.options.weight_version_source == "hub":
            return None
        return super()._version(meta)
