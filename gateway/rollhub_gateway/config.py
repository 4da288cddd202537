"""Configuration of the gateway: where it listens, which model and engine, session policy.

One pydantic model, :class:`GatewayConfig`, serves the standalone server (``rollhub gateway
serve --config gateway.toml``), the in-process gateway and the ``gateway`` token source
(whose options extend it with the URL of a remote gateway).

A TOML file holds the same keys at its top level, or under a ``[gateway]`` table::

    host = "127.0.0.1"
    port = 8790
    model = "smollm2-135m-instruct"
    journal_path = "runs/gateway.sqlite"

    [engine]
    name = "transformers"
    options = { max_batch_size = 8 }

    [policy]
    temperature = 1.0
    pinned = ["temperature", "top_p"]
    max_turns = 64
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rollhub.errors import ConfigError

from rollhub_gateway.policies.names import check_policy_names

__all__ = [
    "EngineSection",
    "GatewayConfig",
    "PoolSection",
    "ServedPolicy",
    "SessionPolicy",
    "load_gateway_config",
]

#: sampling fields a policy can pin (the agent's value is then ignored)
PinnableField = Literal["temperature", "top_p", "top_k", "seed", "max_tokens", "stop"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionPolicy(_Strict):
    """Sampling defaults and limits of one session.

    The agent's own sampling fields (``temperature``, ``max_tokens``…) apply unless the
    field is listed in ``pinned``; ``max_tokens`` is always clipped to ``max_tokens_cap``
    and to what is left of ``max_context_tokens``.
    """

    temperature: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="default sampling temperature"
    )
    top_p: float = Field(1.0, gt=0, le=1, allow_inf_nan=False, description="default nucleus mass")
    top_k: int = Field(-1, description="default top-k (-1: off)")
    seed: int | None = Field(None, description="default sampling seed")
    max_tokens: int = Field(1024, ge=1, description="output tokens when the agent sets none")
    max_tokens_cap: int | None = Field(None, ge=1, description="upper bound of max_tokens")
    pinned: list[PinnableField] = Field(
        default_factory=list,
        description="fields whose policy value wins over the agent's (e.g. temperature)",
    )
    max_turns: int | None = Field(None, ge=1, description="model calls allowed per session")
    max_context_tokens: int | None = Field(
        None, ge=1, description="prompt + output tokens allowed per call"
    )
    max_concurrent_requests: int = Field(
        8, ge=1, description="model calls of one session in flight at once (more: 429)"
    )


class EngineSection(_Strict):
    """The sampling backend: a registered name plus that backend's own options."""

    name: str = Field("transformers", description="a registered sampling backend")
    options: dict[str, Any] = Field(default_factory=dict, description="the backend's options")


class ServedPolicy(_Strict):
    """One policy a gateway serves beside others, reached by its model name
    (:mod:`rollhub_gateway.policies.routes`); each gets its own engine from ``engine``."""

    name: str = Field(description="the policy's name, stamped on its turns")
    model_id: str | None = Field(None, description="the model name agents send (default: name)")
    trainable: bool = Field(True, description="false: frozen, its engine takes no new weights")
    weights: str | None = Field(
        None, description="a safetensors file of parameters loaded over its engine's model"
    )

    @property
    def served_id(self) -> str:
        """The model name that reaches it."""
        return self.model_id or self.name


class GatewayConfig(_Strict):
    """Everything the gateway needs to serve: network, model, engine, sessions, limits."""

    host: str = Field("127.0.0.1", description="interface to bind (loopback by default)")
    port: int = Field(0, ge=0, le=65535, description="port to bind; 0 picks a free one")
    admin_token: str | None = Field(
        None, description="bearer token of the /sessions admin routes; random when unset"
    )
    model: str = Field(
        "smollm2-135m-instruct", description="model config word or a local model directory"
    )
    model_id: str | None = Field(None, description="name served in /v1/models (default: model)")
    chat_template: str | None = Field(
        None, description="chat template override: Jinja text or a path to a .jinja file"
    )
    family: str | None = Field(None, description="template family override (output parser)")
    engine: EngineSection = Field(default_factory=EngineSection)
    journal_path: str | None = Field(None, description="SQLite journal of sessions (durable)")
    session_ttl_s: float = Field(
        3600.0, gt=0, description="idle sessions are dropped after this many seconds"
    )
    reap_interval_s: float | None = Field(
        None, gt=0, description="how often idle sessions are looked for (default ttl/4)"
    )
    policy: SessionPolicy = Field(default_factory=SessionPolicy)
    max_body_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="largest request body accepted (else 413)"
    )
    log_turns: bool = Field(True, description="one structured INFO log line per turn")
    policies: list[ServedPolicy] = Field(
        default_factory=list,
        description="several policies, each its own engine, routed by the model name a "
        "call sends (the first is the default); empty: one policy, any model name",
    )

    @field_validator("policies")
    @classmethod
    def _one_policy_per_model_name(cls, policies: list[ServedPolicy]) -> list[ServedPolicy]:
        """Each model name reaches one policy (:mod:`rollhub_gateway.policies.names`)."""
        check_policy_names([(p.name, p.served_id) for p in policies])
        return policies

    @property
    def served_model_id(self) -> str:
        """The model name clients see."""
        return self.model_id or self.model


class PoolSection(_Strict):
    """A pool of gateway replicas serving one token source (``[token_source.pool]``).

    Each replica is a whole gateway (own event loop, engine client, sessions, journal);
    sessions go to the replica with the fewest live sessions.
    """

    replicas: int = Field(2, ge=1, description="gateway replicas to run")
    placement: Literal["processes", "ray"] = Field(
        "processes",
        description="'processes': child processes on this machine; 'ray': Ray actors "
        "spread over the cluster's nodes",
    )
    journal_dir: str | None = Field(
        None, description="directory of the replicas' SQLite journals (replica-<i>.sqlite)"
    )
    engine_factory: str | None = Field(
        None,
        description="'module:callable' or 'file.py:callable' building each replica's "
        "sampling backend from its GatewayConfig (custom engines); None: the engine section",
    )
    start_timeout_s: float = Field(
        120.0, gt=0, description="how long a replica may take to load its model and listen"
    )
    restarts: int = Field(
        3,
        ge=0,
        description="times a replica that died is started again (0: never): a process on its "
        "own address (with journal_dir its journaled sessions come back with it, the others "
        "fail with the cause); a Ray actor by Ray, on a live node (its sessions fail with "
        "the cause: their agents hold the old address)",
    )
    ray_address: str | None = Field(
        None, description="Ray cluster to join (None: RAY_ADDRESS, the current one, else a "
        "local one)"
    )  # fmt: skip
    num_cpus_per_replica: float = Field(
        0.0, ge=0, description="CPUs Ray reserves for each replica actor"
    )
    ray_spread: bool = Field(
        True, description="spread the replica actors over the nodes (Ray's SPREAD strategy; "
        "false: Ray's default scheduler)"
    )  # fmt: skip
    ray_resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom resources each replica actor asks for: only nodes offering them "
        "take replicas (a label only worker nodes offer keeps them off the head; a node's "
        "own label pins them there)",
    )


def load_gateway_config(path: str | Path, **overrides: object) -> GatewayConfig:
    """Read a gateway TOML file (top-level keys or a ``[gateway]`` table) and validate it.

    :param overrides: keys that replace the file's values (None values are ignored).
    :raises ConfigError: unreadable file, bad TOML, unknown key or bad value.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"gateway config file {str(p)!r} does not exist", field=None) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}", field=None) from exc
    if isinstance(data.get("gateway"), dict):
        data = data["gateway"]
    data.update({k: v for k, v in overrides.items() if v is not None})
    return parse_gateway_config(data, source=str(p))


def parse_gateway_config(data: dict[str, Any], *, source: str = "gateway config") -> GatewayConfig:
    """Validate gateway config data, raising a :class:`ConfigError` that names the key."""
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                parts.append(f"unknown key {loc!r}")
            else:
                parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
        first = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise ConfigError(f"{source}: " + "; ".join(parts), field=first) from None
