"""agentcore-rl-toolkit's A2A rollout sessions, on rollhub's A2A client and transports.

- :class:`A2ARolloutSession`: the base (subclasses give ``_client()``, an a2a-sdk client,
  and ``shutdown()``), with upstream's ``setup`` / ``run`` / ``_cancel_if_unfinished``.
- :class:`AgentCoreA2ASession`: AgentCore's A2A route, released through the capacity
  provider (``DeleteCapacityProviderSession``).
- :class:`DockerA2ASession`: the agent image's own A2A server (port 9000) in a container.

Where they behave better than upstream's: a transient failure while polling (a broken
connection, 5xx, 429, AgentCore's -32053/-32054) is retried with backoff instead of
failing the rollout; numbers keep their type (the exact JSON travels beside the
protobuf ``Struct``); a reward that is not finite is refused; a teardown error is logged
and kept in ``session_state["shutdown_error"]``, never raised over the rollout's result.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from a2a.client import Client

from rollhub.a2a.client import A2ATaskClient, build_a2a_client
from rollhub.a2a.transports import AgentCoreTransport, ContainerTransport
from rollhub.compat.session_state import SessionState
from rollhub.compat.session_wire import RolloutDumpResponse
from rollhub.errors import SessionError

__all__ = [
    "A2ARolloutSession",
    "AgentCoreA2ASession",
    "DockerA2ASession",
    "RolloutA2AError",
    "build_a2a_client",
]

log = logging.getLogger(__name__)

#: the CLI DockerA2ASession runs containers with (upstream: docker)
ENGINE_ENV = "ROLLHUB_CONTAINER_ENGINE"


class RolloutA2AError(SessionError, RuntimeError):
    """An A2A failure the session cannot recover from."""


class A2ARolloutSession:
    """Base of the A2A sessions: one rollout as one A2A task.

    :param session_id: the AgentCore runtime session id, also the A2A context id.
    :param session_state: where progress is recorded (``await .set`` / ``.update``).
    """

    def __init__(self, session_id: str, session_state: SessionState) -> None:
        self.session_id = session_id
        self.session_state = session_state
        self._task_id: str | None = None
        self._finished = False
        self._driver: A2ATaskClient | None = None

    async def _client(self) -> Client:
        """The a2a-sdk client of this session (subclasses)."""
        raise NotImplementedError

    async def __aenter__(self) -> A2ARolloutSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def _task_client(self) -> A2ATaskClient:
        if self._driver is None:
            self._driver = A2ATaskClient(await self._client(), self.session_id)
            self._driver.task_id = self._task_id
        return self._driver

    async def setup(self, task: dict[str, Any]) -> None:
        """Start the task with the setup payload and wait until it is parked."""
        driver = await self._task_client()
        try:
            await driver.setup(task)
        except SessionError as exc:
            raise RolloutA2AError(str(exc), phase="setup", transient=exc.transient) from exc
        finally:
            self._task_id = driver.task_id
        await self.session_state.set("a2a_task_id", self._task_id)

    async def run(self, task: dict[str, Any]) -> RolloutDumpResponse:
        """Resume the task with the rollout payload and return its dump."""
        if self._task_id is None:
            raise RolloutA2AError("run called before setup", phase="run")
        driver = await self._task_client()
        try:
            dump = await driver.run(task)
        except SessionError as exc:
            raise RolloutA2AError(str(exc), phase="run", transient=exc.transient) from exc
        self._finished = True
        return RolloutDumpResponse.from_dump(dump)

    async def _cancel_if_unfinished(self) -> None:
        """Cancel a task torn down mid-flight (best effort); nothing on the happy path."""
        if self._task_id is None or self._finished:
            return
        await (await self._task_client()).cancel()

    async def shutdown(self) -> None:
        """Tear the session down (subclasses)."""
        raise NotImplementedError

    async def _record_shutdown_error(self, exc: BaseException) -> None:
        log.warning("session %s: teardown failed: %r", self.session_id, exc)
        try:
            await self.session_state.set("shutdown_error", f"{type(exc).__name__}: {exc}")
        except Exception:  # the state store is best effort here too
            log.debug("could not record the teardown error", exc_info=True)


class AgentCoreA2ASession(A2ARolloutSession):
    """One rollout on an AgentCore runtime speaking A2A, on a capacity provider's instance."""

    def __init__(
        self,
        session_id: str,
        session_state: SessionState,
        runtime_arn: str,
        capacity_provider_arn: str,
    ) -> None:
        super().__init__(session_id, session_state)
        self.runtime_arn = runtime_arn
        self.capacity_provider_arn = capacity_provider_arn
        self._transport = AgentCoreTransport(
            session_id=session_id,
            runtime_arn=runtime_arn,
            capacity_provider_arn=capacity_provider_arn,
        )
        self.region = self._transport.region
        self._a2a: Client | None = None

    async def _client(self) -> Client:
        if self._a2a is None:
            url, http = await self._transport.start()
            self._a2a = build_a2a_client(http, url)
        return self._a2a

    async def setup(self, task: dict[str, Any]) -> None:
        await self.session_state.update(
            {"capacity_provider_arn": self.capacity_provider_arn, "runtime_arn": self.runtime_arn}
        )
        await super().setup(task)

    async def shutdown(self) -> None:
        try:
            await self._cancel_if_unfinished()
            await self._transport.stop()
        except Exception as exc:
            await self._record_shutdown_error(exc)
        self._a2a = None


class DockerA2ASession(A2ARolloutSession):
    """One rollout in a container of ``agent_image_uri``, whose own command serves A2A on
    port 9000. The CLI is ``docker`` (or ``$ROLLHUB_CONTAINER_ENGINE``, e.g. podman).

    ``iam_role_arn`` (when not empty) is assumed through STS and its credentials passed to
    the container, as upstream does. Logs go to CloudWatch (``awslogs``) under Docker; the
    ``awslogs`` driver does not exist in podman, whose logs stay with the engine.
    """

    def __init__(
        self,
        session_id: str,
        session_state: SessionState,
        *,
        agent_image_uri: str,
        iam_role_arn: str,
        log_group: str,
        log_region: str,
    ) -> None:
        super().__init__(session_id, session_state)
        self.agent_image_uri = agent_image_uri
        self.iam_role_arn = iam_role_arn
        self.log_group, self.log_region = log_group, log_region
        self.endpoint: str | None = None
        self._a2a: Client | None = None
        self._transport: ContainerTransport | None = None

    def _engine(self) -> str:
        return os.environ.get(ENGINE_ENV, "docker")

    def _run_args(self) -> list[str]:
        if os.path.basename(self._engine()) != "docker" or not self.log_group:
            return []
        return [
            "--log-driver", "awslogs", "--log-opt", f"awslogs-region={self.log_region}",
            "--log-opt", f"awslogs-group={self.log_group}",
            "--log-opt", "awslogs-create-group=true", "--log-opt", f"awslogs-stream={self.session_id}",
        ]  # fmt: skip

    def _role_env(self) -> dict[str, str]:
        if not self.iam_role_arn:
            return {}
        import boto3

        creds = boto3.client("sts").assume_role(
            RoleArn=self.iam_role_arn, RoleSessionName=self.session_id[:64]
        )["Credentials"]
        return {
            "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
            "AWS_SESSION_TOKEN": creds["SessionToken"],
        }

    async def _client(self) -> Client:
        if self._a2a is None:
            raise RolloutA2AError("client requested before the container started", phase="setup")
        return self._a2a

    async def setup(self, task: dict[str, Any]) -> None:
        await self.session_state.update(
            {"agent_image_uri": self.agent_image_uri, "iam_role_arn": self.iam_role_arn}
        )
        self._transport = ContainerTransport(
            name=self.session_id, image=self.agent_image_uri, app="", engine=self._engine(),
            network="bridge" if os.path.basename(self._engine()) == "docker" else "slirp4netns",
            run_args=self._run_args(), env=self._role_env(), command=[],
        )  # fmt: skip
        url, http = await self._transport.start()
        self.endpoint = url.rstrip("/")
        await self.session_state.set("endpoint", self.endpoint)
        self._a2a = build_a2a_client(http, url)
        await super().setup(task)

    async def shutdown(self) -> None:
        try:
            if self._a2a is not None:
                await self._cancel_if_unfinished()
            if self._transport is not None:
                await self._transport.stop()
        except Exception as exc:
            await self._record_shutdown_error(exc)
        self._a2a, self.endpoint = None, None
