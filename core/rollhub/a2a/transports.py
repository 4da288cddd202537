"""Where an A2A session's agent runs: a container per session, or AgentCore's A2A route.

A transport starts the place a session's agent answers at (:meth:`start` returns the
JSON-RPC URL and the httpx client to reach it), and :meth:`stop` ends it, idempotently.

- :class:`ContainerTransport`: ``podman run`` (or ``docker run``) of the agent image per
  session, serving ``python -m rollhub.a2a APP`` (the image ``rollhub deploy init``
  builds, another command), up once ``/ping`` answers; stopped and removed at the end.
- :class:`AgentCoreTransport`: AgentCore Runtime's A2A route,
  ``POST /runtimes/{url-encoded ARN}/invocations/`` (SigV4-signed, the session id in the
  ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` header). The session ends with
  ``DeleteCapacityProviderSession`` when the runtime's capacity provider is given, else
  with ``StopRuntimeSession`` (botocore's ``bedrock-agentcore`` client).
- :class:`UrlTransport`: a server that is already running (shared, never stopped).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Generator
from typing import Protocol
from urllib.parse import quote

import httpx

from rollhub.a2a.wire import INSTANCE_ENV, INSTANCE_HEADER
from rollhub.errors import ConfigError, SessionError

__all__ = ["AgentCoreTransport", "ContainerTransport", "Transport", "UrlTransport"]

log = logging.getLogger(__name__)

ENDPOINT_ENV = "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"


class Transport:
    """Base: start → (url, http client); stop."""

    http: httpx.AsyncClient | None = None

    async def start(self) -> tuple[str, httpx.AsyncClient]:
        raise NotImplementedError

    async def stop(self) -> None:
        if self.http is not None:
            http, self.http = self.http, None
            await http.aclose()


class UrlTransport(Transport):
    """A running A2A server at ``url`` (nothing to start or stop but the client)."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def start(self) -> tuple[str, httpx.AsyncClient]:
        self.http = httpx.AsyncClient(timeout=60.0)
        return self.url, self.http


class ContainerTransport(Transport):
    """One container of ``image`` per session, serving the agent over A2A.

    :param engine: the CLI (``podman`` or ``docker``).
    :param cli_env: variables added to the CLI's environment (``CONTAINERS_CONF``).
    :param network: ``host`` (the agent binds a free loopback port of this machine, and
        reaches the gateway at 127.0.0.1) or another ``--network`` value (the port is
        published on 127.0.0.1).
    :param command: None: serve ``app`` with ``python -m rollhub.a2a``; a list: that
        command (empty: the image's own), which must serve A2A on port 9000.
    """

    def __init__(
        self,
        *,
        name: str,
        image: str,
        app: str,
        app_dir: str = ".",
        engine: str = "podman",
        cli_env: dict[str, str] | None = None,
        network: str = "host",
        run_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        start_timeout_s: float = 120.0,
        command: list[str] | None = None,
    ) -> None:
        self.name = name
        self.command = command
        self.image, self.app, self.app_dir = image, app, app_dir
        self.engine = engine
        self.cli_env = {**os.environ, **(cli_env or {})}
        self.network = network
        self.run_args = list(run_args or [])
        self.env = dict(env or {})
        self.start_timeout_s = start_timeout_s
        self._started = False
        self._port = 0  # reserved on this machine (host network) until stop()

    async def _cli(self, *args: str, timeout: float = 120.0) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            self.engine, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=self.cli_env,
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            out, _ = await proc.communicate()
            return -9, out.decode(errors="replace")
        return proc.returncode or 0, out.decode(errors="replace")

    async def start(self) -> tuple[str, httpx.AsyncClient]:
        port = 9000
        publish: list[str] = []
        if self.network == "host" and self.command is None:
            port = self._port = _reserve_port()
        else:
            publish = ["-p", "127.0.0.1::9000"]
        command = self.command
        if command is None:
            host = "127.0.0.1" if self.network == "host" else "0.0.0.0"
            command = ["python", "-m", "rollhub.a2a", self.app, "--app-dir", self.app_dir,
                       "--host", host, "--port", str(port)]  # fmt: skip
        env = {**self.env, INSTANCE_ENV: self.name} if self.command is None else self.env
        env_args = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
        self._started = True  # a failed run may still have created the container
        code, out = await self._cli(
            "run", "-d", "--name", self.name, "--network", self.network, *publish, *env_args,
            *self.run_args, self.image, *command,
        )  # fmt: skip
        if code != 0:
            raise SessionError(
                f"{self.engine} run {self.image} failed ({code}): {out.strip()[-800:]}",
                phase="setup", transient=True, session_id=self.name,
            )  # fmt: skip
        host_port = port
        if publish:
            code, out = await self._cli("port", self.name, "9000/tcp")
            host_port = int(out.strip().splitlines()[0].rsplit(":", 1)[1])
        url = f"http://127.0.0.1:{host_port}"
        self.http = httpx.AsyncClient(timeout=60.0)
        await self._wait_ping(url)
        return url + "/", self.http

    async def _wait_ping(self, url: str) -> None:
        assert self.http is not None
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                answer = await self.http.get(f"{url}/ping", timeout=2.0)
                if answer.status_code == 200:
                    self._check_instance(url, answer.headers.get(INSTANCE_HEADER))
                    return
            except httpx.HTTPError:
                pass
            code, state = await self._cli("inspect", "--format", "{{.State.Status}}", self.name)
            if state.strip() not in ("running", "created", "configured") or (
                time.monotonic() > deadline
            ):
                _, logs = await self._cli("logs", self.name)
                raise SessionError(
                    f"container {self.name} ({state.strip() or code}) did not answer /ping "
                    f"within {self.start_timeout_s:g}s: {logs.strip()[-1500:]}",
                    phase="setup", transient=True, session_id=self.name,
                )  # fmt: skip
            await asyncio.sleep(0.2)

    def _check_instance(self, url: str, instance: str | None) -> None:
        """Check that the server answering at ``url`` is this session's container; one
        that does not say (an image built by an older rollhub) is taken at its word.

        :raises SessionError: another session's server answered (it had bound the port
            first): this session's messages would have gone to another agent.
        """
        if self.command is None and instance is not None and instance != self.name:
            raise SessionError(
                f"container {self.name}: {url} is served by {instance}, not by this "
                f"session's container (its port was taken first)",
                phase="setup", transient=True, session_id=self.name,
            )  # fmt: skip

    async def stop(self) -> None:
        try:
            await super().stop()
            if self._started:
                self._started = False
                await self._cli("stop", "-t", "2", self.name, timeout=60)
                code, out = await self._cli("rm", "-f", self.name, timeout=60)
                if code != 0 and "no such container" not in out.lower():
                    raise SessionError(
                        f"{self.engine} rm {self.name} failed ({code}): {out.strip()[-500:]}",
                        phase="shutdown",
                        session_id=self.name,
                    )
        finally:  # once the container is gone: it may still have been binding the port
            _RESERVED.discard(self._port)
            self._port = 0


#: ports handed to this process's containers until they stop: a port probed and released
#: can be the kernel's next pick, and two sessions starting at once must not share one
_RESERVED: set[int] = set()


def _reserve_port() -> int:
    """A free loopback port no live container of this process holds (event loop only)."""
    for _ in range(1000):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _RESERVED:
            _RESERVED.add(port)
            return port
    raise SessionError(
        f"no free loopback port outside the {len(_RESERVED)} reserved", phase="setup"
    )


class _Credentials(Protocol):
    """botocore's refreshable credentials, as far as signing reads them."""

    def get_frozen_credentials(self) -> object: ...


class _SessionControl(Protocol):
    """boto3's ``bedrock-agentcore`` client, as far as releasing a session calls it."""

    def delete_capacity_provider_session(self, **kwargs: object) -> object: ...

    def stop_runtime_session(self, **kwargs: object) -> object: ...


class _SigV4(httpx.Auth):
    """Signs each request with the process's AWS credentials (SigV4, ``bedrock-agentcore``)."""

    def __init__(self, credentials: _Credentials, region: str) -> None:
        self._credentials = credentials
        self._region = region

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        signed = AWSRequest(
            method=request.method, url=str(request.url), data=request.content,
            headers={k: v for k, v in request.headers.items() if k.lower() != "connection"},
        )  # fmt: skip
        SigV4Auth(self._credentials.get_frozen_credentials(), "bedrock-agentcore",
                  self._region).add_auth(signed)  # fmt: skip
        request.headers.update(dict(signed.headers))
        yield request


class AgentCoreTransport(Transport):
    """AgentCore Runtime's A2A route for one session.

    :param runtime_arn: the runtime (its protocol configured as A2A).
    :param capacity_provider_arn: the capacity provider whose instances back the
        runtime's sessions; the session is released with ``DeleteCapacityProviderSession``.
    :param endpoint_url: the data plane (default: ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE`` or
        the region's public endpoint).
    """

    def __init__(
        self,
        *,
        session_id: str,
        runtime_arn: str,
        capacity_provider_arn: str | None = None,
        endpoint_url: str | None = None,
    ) -> None:
        parts = runtime_arn.split(":")
        if len(parts) < 6 or not parts[3]:
            raise ConfigError(f"runtime_arn={runtime_arn!r} is not an AgentCore runtime ARN",
                              field="runtime.runtime_arn")  # fmt: skip
        self.region = parts[3]
        if capacity_provider_arn is not None and capacity_provider_arn.split(":")[3] != self.region:
            raise ConfigError(
                f"capacity_provider_arn={capacity_provider_arn!r} is not in the runtime's "
                f"region {self.region}", field="runtime.capacity_provider_arn",
            )  # fmt: skip
        self.session_id = session_id
        self.runtime_arn = runtime_arn
        self.capacity_provider_arn = capacity_provider_arn
        self.endpoint = (
            endpoint_url
            or os.environ.get(ENDPOINT_ENV)
            or f"https://bedrock-agentcore.{self.region}.amazonaws.com"
        ).rstrip("/")
        self._used = False

    def _boto(self) -> _SessionControl:
        import boto3

        return boto3.client("bedrock-agentcore", region_name=self.region,
                            endpoint_url=self.endpoint)  # fmt: skip

    async def start(self) -> tuple[str, httpx.AsyncClient]:
        import boto3

        credentials = boto3.Session(region_name=self.region).get_credentials()
        if credentials is None:
            raise SessionError("no AWS credentials to sign AgentCore requests with",
                               phase="setup", session_id=self.session_id)  # fmt: skip
        self.http = httpx.AsyncClient(timeout=120.0, auth=_SigV4(credentials, self.region))
        self._used = True
        return (
            f"{self.endpoint}/runtimes/{quote(self.runtime_arn, safe='')}/invocations/",
            self.http,
        )

    async def stop(self) -> None:
        await super().stop()
        if not self._used:
            return
        self._used = False
        await asyncio.to_thread(self._release)

    def _release(self) -> None:
        from botocore.exceptions import ClientError

        client = self._boto()
        try:
            if self.capacity_provider_arn is not None:
                client.delete_capacity_provider_session(
                    capacityProviderId=self.capacity_provider_arn.rsplit("/", 1)[-1],
                    sessionId=self.session_id,
                )
            else:
                client.stop_runtime_session(
                    agentRuntimeArn=self.runtime_arn, runtimeSessionId=self.session_id
                )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return  # already gone: the goal of the call
            raise SessionError(
                f"releasing AgentCore session {self.session_id} failed: {exc}",
                phase="shutdown", session_id=self.session_id,
            ) from exc  # fmt: skip
