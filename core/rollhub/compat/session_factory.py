"""agentcore-rl-toolkit's ``make_session``: a backend name and its settings → a session.

``cfg["backend"]`` is ``agentcore_a2a`` (``agentcore_runtime_arn``,
``capacity_provider_arn``), ``docker_a2a`` (``agent_image_uri``, ``docker_iam_role_arn``,
``docker_log_group``, ``docker_log_region``) or ``agentcore_s3``
(``agentcore_runtime_arn``, ``rollout_output_s3``, ``experiment_name``,
``max_pool_connections``). A missing setting is a :class:`~rollhub.errors.ConfigError`
naming it (upstream: a bare ``AssertionError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Required, TypedDict

from rollhub.errors import ConfigError

if TYPE_CHECKING:
    from rollhub.compat.session_bounds import RolloutSession
    from rollhub.compat.session_state import SessionState

__all__ = ["SessionBackendConfig", "make_session"]

BACKENDS = ("agentcore_a2a", "agentcore_s3", "docker_a2a")


class SessionBackendConfig(TypedDict, total=False):
    """The keys :func:`make_session` reads."""

    backend: Required[str]
    agentcore_runtime_arn: str | None
    capacity_provider_arn: str | None
    agent_image_uri: str | None
    docker_iam_role_arn: str | None
    docker_log_group: str | None
    docker_log_region: str | None
    rollout_output_s3: str | None
    experiment_name: str | None
    max_pool_connections: int | None


def _need(cfg: SessionBackendConfig, *keys: str) -> list[Any]:
    given = dict(cfg)  # read by name: the keys come from the caller
    values = [given.get(key) for key in keys]
    missing = [k for k, v in zip(keys, values, strict=True) if v is None]
    if missing:
        raise ConfigError(
            f"rollout session backend {cfg['backend']!r} needs {', '.join(missing)} "
            f"(rollout_session_backend.{missing[0]})",
            field=f"rollout_session_backend.{missing[0]}",
        )
    return values


def make_session(session_id: str, cfg: SessionBackendConfig, meta: SessionState) -> RolloutSession:
    """The rollout session ``cfg["backend"]`` names, for ``session_id``.

    :param meta: the session's state dict (``PersistentDict``).
    :raises ConfigError: an unknown backend or a missing setting.
    """
    kind = cfg["backend"]
    if kind == "agentcore_a2a":
        from rollhub.compat.a2a_sessions import AgentCoreA2ASession

        arn, provider = _need(cfg, "agentcore_runtime_arn", "capacity_provider_arn")
        return AgentCoreA2ASession(
            session_id, session_state=meta, runtime_arn=arn, capacity_provider_arn=provider
        )
    if kind == "docker_a2a":
        from rollhub.compat.a2a_sessions import DockerA2ASession

        image, role, group, region = _need(
            cfg, "agent_image_uri", "docker_iam_role_arn", "docker_log_group", "docker_log_region"
        )
        return DockerA2ASession(
            session_id, session_state=meta, agent_image_uri=image, iam_role_arn=role,
            log_group=group, log_region=region,
        )  # fmt: skip
    if kind == "agentcore_s3":
        from rollhub.compat.s3_session import AgentCoreS3Session, get_or_create_rollout_client

        arn, location, name = _need(
            cfg, "agentcore_runtime_arn", "rollout_output_s3", "experiment_name"
        )
        client = get_or_create_rollout_client(
            agentcore_runtime_arn=arn, rollout_output_s3=location, experiment_name=name,
            max_pool_connections=cfg.get("max_pool_connections") or 100,
        )  # fmt: skip
        return AgentCoreS3Session(session_id, session_state=meta, client=client)
    raise ConfigError(
        f"unknown rollout_session_backend.backend={kind!r}; expected one of {', '.join(BACKENDS)}",
        field="rollout_session_backend.backend",
    )
