"""The ``gateway`` token source: capture sessions served by a rollhub gateway.

In process (the default), :meth:`GatewayTokenSource.start` builds the engine and the chat
model from the options and serves the gateway on the running event loop; agents reach it
at ``http://127.0.0.1:<port>/v1``. With ``url`` set, it talks to a gateway that runs
elsewhere (``rollhub gateway serve``) through its admin routes and ``admin_token``. With a
``pool`` table, it runs N gateway replicas (child processes, or Ray actors across a
cluster) and places each session on the least-loaded one (:mod:`rollhub_gateway.pool`).

Traces are complete as soon as the agent has its last reply: the gateway commits each turn
before it answers, so :meth:`fetch_traces` never races the final turn.

Example ``rollhub.toml``::

    [token_source]
    name = "gateway"
    model = "smollm2-135m-instruct"
    engine = { name = "transformers" }
    policy = { max_turns = 32 }
    # pool = { replicas = 4, placement = "processes", journal_dir = "journals" }
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field
from rollhub.errors import ConfigError, GatewayError, TokenRetrievalError, UsageError
from rollhub.registry import ComponentContext
from rollhub.tokens import CaptureSession, TokenSource, TokenSourceOptions
from rollhub.trace import TraceRecord

from rollhub_gateway.admin_call import admin_call
from rollhub_gateway.config import GatewayConfig, PoolSection, SessionPolicy
from rollhub_gateway.policies.serving import served_policies
from rollhub_gateway.sessions import retrieval_error

if TYPE_CHECKING:
    from rollhub_gateway.gateway import Gateway
    from rollhub_gateway.pool import GatewayPool

__all__ = ["GatewaySourceOptions", "GatewayTokenSource"]

log = logging.getLogger(__name__)


class GatewaySourceOptions(GatewayConfig, TokenSourceOptions):
    """The gateway config, plus where a remote gateway is (then nothing runs in process)."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        None, description="root URL of a running gateway (http://host:port); None: in process"
    )
    request_timeout_s: float = Field(
        60.0, gt=0, description="timeout of admin calls (remote gateway, pool replicas)"
    )
    pool: PoolSection | None = Field(
        None, description="run a pool of gateway replicas instead of one in-process gateway"
    )


class GatewayTokenSource(TokenSource):
    """Token source backed by a rollhub gateway (in process or remote).

    :param gateway: an already built gateway to serve (tests, custom engines); its config
        replaces the options' network and policy settings.
    :param context: what the core tells components; with ``[[policies]]`` in its config
        the gateway serves each policy (:mod:`rollhub_gateway.policies.serving`).
    """

    name = "gateway"
    Options = GatewaySourceOptions
    options: GatewaySourceOptions

    def __init__(
        self,
        options: GatewaySourceOptions | None = None,
        *,
        gateway: Gateway | None = None,
        base_dir: str | Path | None = None,
        context: ComponentContext | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(options, **kwargs)
        if base_dir is None and context is not None:
            base_dir = context.base_dir
        config = context.config if context is not None else None
        if config is not None and config.policies:
            self.options = self.options.model_copy(
                update={"policies": served_policies(config, base_dir)}
            )
        if base_dir is not None:
            # relative paths in rollhub.toml are relative to the config file
            update: dict[str, Any] = {}
            pool = self.options.pool
            if pool is not None:
                update["pool"] = _pool_under(base_dir, pool)
            for key in ("journal_path", "chat_template"):
                value = getattr(self.options, key)
                is_text = key == "chat_template" and value is not None and "{" in value
                if value and not is_text and not Path(value).expanduser().is_absolute():
                    update[key] = str(Path(base_dir) / value)
            self.options = self.options.model_copy(update=update)
        self.gateway = gateway
        self._owns_gateway = gateway is None
        self.pool: GatewayPool | None = None
        if self.options.pool is not None:
            _check_pool_options(self.options, gateway)
        self._http: Any = None
        self._root: str | None = None
        self._model_id: str | None = None

    @property
    def url(self) -> str | None:
        """Root URL of the gateway once started (None with a pool: see :attr:`urls`)."""
        return self._root

    @property
    def urls(self) -> list[str]:
        """Root URLs of every gateway serving this source (one, or the pool's replicas)."""
        if self.pool is not None:
            return [r.url for r in self.pool.replicas if r.url is not None]
        return [self._root] if self._root is not None else []

    async def start(self) -> None:
        """Serve the gateway in process, connect to the remote one, or start the pool's
        replicas. Idempotent.

        :raises GatewayError: (pool) a replica did not start; none is left running.
        """
        if self._root is not None or self.pool is not None:
            return
        if self.options.pool is not None:
            await self._start_pool()
            return
        if self.options.url:
            import aiohttp

            if not self.options.admin_token:
                raise ConfigError(
                    "token_source.admin_token is required with token_source.url (the remote "
                    "gateway's admin token)",
                    field="token_source.admin_token",
                )
            self._http = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self.options.admin_token}"},
                timeout=aiohttp.ClientTimeout(total=self.options.request_timeout_s),
            )
            self._root = self.options.url.rstrip("/")
            return
        if self.gateway is None:
            from rollhub_gateway.http.serving import build_gateway

            config = GatewayConfig.model_validate(
                self.options.model_dump(exclude={"url", "request_timeout_s", "pool"})
            )
            self.gateway = build_gateway(config)
        self.gateway.set_weight_version(self.weight_version)
        self._root = await self.gateway.start()
        self._model_id = self.gateway.policies.default.model_id
        log.info("gateway token source serving at %s", self._root)

    async def _start_pool(self) -> None:
        from rollhub_gateway.pool import GatewayPool

        assert self.options.pool is not None
        config = GatewayConfig.model_validate(
            self.options.model_dump(exclude={"url", "request_timeout_s", "pool"})
        )
        pool = GatewayPool(
            config, self.options.pool, request_timeout_s=self.options.request_timeout_s
        )
        if self.weight_version is not None:
            pool.set_weight_version(self.weight_version)
        await pool.start()
        self.pool = pool

    def _require(self) -> str:
        if self._root is None and self.pool is None:
            raise UsageError("the gateway token source is not started; await source.start() first")
        return self._root or ""

    async def open_session(
        self, session_id: str, *, sampling: dict[str, Any] | None = None
    ) -> CaptureSession:
        """Open a session; ``sampling`` keys that are policy fields override the defaults.

        E.g. ``{"temperature": 0.7, "max_tokens": 512}`` sets that session's defaults;
        other keys are left to the agent's own requests.

        :raises ConfigError: ``sampling`` names an unknown policy field or a bad value.
        """
        root = self._require()
        if self.pool is not None:
            return await self._open_pooled(session_id, sampling)
        policy = {k: v for k, v in (sampling or {}).items() if k in SessionPolicy.model_fields}
        ignored = sorted(set(sampling or {}) - set(policy))
        if ignored:
            log.debug(
                "session %s: sampling keys %s are not policy fields; left to the agent",
                session_id,
                ignored,
            )
        models: dict[str, str] = {}
        if self.gateway is not None:
            session = self.gateway.open_session(session_id, policy=policy or None)
            key, model = session.key, self._model_id
            models = self.gateway.policies.models()
        else:
            data = await self._call(
                "POST", "/sessions", json={"session_id": session_id, "policy": policy or None}
            )
            key, model = data["api_key"], data["model"]
        return CaptureSession(
            session_id=session_id,
            base_url=f"{root}/v1",
            api_key=key,
            model_id=model,
            extra={"anthropic_base_url": root},
            models=models,
        )

    async def _open_pooled(
        self, session_id: str, sampling: dict[str, Any] | None
    ) -> CaptureSession:
        assert self.pool is not None
        policy = {k: v for k, v in (sampling or {}).items() if k in SessionPolicy.model_fields}
        data = await self.pool.open_session(session_id, policy or None)
        return CaptureSession(
            session_id=session_id,
            base_url=data["base_url"],
            api_key=data["api_key"],
            model_id=data["model"],
            extra={"anthropic_base_url": data["anthropic_base_url"]},
        )

    async def fetch_traces(self, session_id: str) -> list[TraceRecord]:
        """The session's records, complete for every call the agent got an answer to.

        :raises TokenRetrievalError: unknown session; :class:`~rollhub.errors.CaptureLost`
            when the engine failed under it, or (pool) its replica died.
        """
        self._require()
        if self.pool is not None:
            return [TraceRecord.model_validate(r) for r in await self.pool.traces(session_id)]
        if self.gateway is not None:
            try:
                return self.gateway.traces(session_id)
            except GatewayError as exc:
                raise retrieval_error(exc, session_id) from exc
        data = await self._call("GET", f"/sessions/{session_id}/traces")
        return [TraceRecord.model_validate(r) for r in data["traces"]]

    async def close_session(self, session_id: str, *, drop: bool = False) -> None:
        """Finish (or discard) a session; its key stops working. Unknown ids are ignored.

        :raises CaptureLost: the engine failed under the session, or (pool) its replica
            died; the session is closed or forgotten all the same.
        """
        self._require()
        if self.pool is not None:
            await self.pool.close_session(session_id, drop=drop)
            return
        if self.gateway is not None:
            if session_id not in self.gateway.sessions:
                return
            try:
                (self.gateway.drop_session if drop else self.gateway.finish_session)(session_id)
            except GatewayError as exc:
                raise retrieval_error(exc, session_id) from exc
            return
        method, path = (
            ("DELETE", f"/sessions/{session_id}")
            if drop
            else ("POST", f"/sessions/{session_id}/finish")
        )
        await self._call(method, path, missing_ok=True)

    def set_weight_version(self, version: int | None) -> None:
        """Stamp turns sampled from now on with ``version`` (in process: immediately)."""
        super().set_weight_version(version)
        if self.pool is not None:
            self.pool.set_weight_version(version)
        elif self.gateway is not None:
            self.gateway.set_weight_version(version)
        elif self.options.url:
            # sent before the next admin call (the next session opened for a rollout)
            self._pending_version = version

    async def publish_policy(self, policy: object, version: int) -> None:
        """Swap the in-process gateway's sampling backend to ``policy`` as ``version``.

        With a pool, every live replica gets it (pickled to processes, through Ray's object
        store to actors).

        :raises UsageError: the gateway runs elsewhere (a policy object cannot travel), or
            its backend cannot take a policy.
        """
        if self.pool is not None:
            await self.pool.publish_policy(policy, version)
            TokenSource.set_weight_version(self, version)
            return
        if self.gateway is None:
            raise UsageError(
                "token_source.url points at a remote gateway: a trainer's policy object can "
                "only reach an in-process gateway; drop token_source.url to serve it here"
            )
        self.gateway.publish_policy(policy, version)
        self.set_weight_version(version)

    async def close(self) -> None:
        """Stop the in-process gateway (and its engine), the pool's replicas, or the admin
        client. Idempotent."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            await pool.close()
        if self.gateway is not None and self._root is not None:
            if self._owns_gateway:
                await self.gateway.close()
            else:
                await self.gateway.stop()
        if self._http is not None:
            await self._http.close()
            self._http = None
        self._root = None

    async def _call(
        self, method: str, path: str, *, json: object = None, missing_ok: bool = False
    ) -> Any:
        import aiohttp

        root = self._require()
        pending = getattr(self, "_pending_version", _UNSET)
        try:
            if pending is not _UNSET:
                async with self._http.put(f"{root}/weight_version", json={"version": pending}) as r:
                    if r.status == 200:
                        del self._pending_version
            return await admin_call(
                self._http, root, method, path, who=f"gateway {root}", json=json,
                missing_ok=missing_ok,
            )  # fmt: skip
        except aiohttp.ClientError as exc:
            raise TokenRetrievalError(
                f"gateway {root} unreachable for {method} {path}: {exc}"
            ) from exc


_UNSET = object()


def _pool_under(base_dir: str | Path, pool: PoolSection) -> PoolSection:
    """The pool section with its relative paths made relative to ``base_dir``."""
    update: dict[str, Any] = {}
    if pool.journal_dir and not Path(pool.journal_dir).expanduser().is_absolute():
        update["journal_dir"] = str(Path(base_dir) / pool.journal_dir)
    target, sep, attr = (pool.engine_factory or "").partition(":")
    if target.endswith(".py") and not Path(target).expanduser().is_absolute():
        update["engine_factory"] = f"{Path(base_dir) / target}{sep}{attr}"
    return pool.model_copy(update=update)


def _check_pool_options(options: GatewaySourceOptions, gateway: Gateway | None) -> None:
    """Refuse settings a pool cannot honour, naming the field and the fix."""
    if gateway is not None:
        raise ConfigError(
            "a prebuilt gateway cannot be pooled: drop token_source.pool, or give the pool an "
            "engine_factory that builds each replica's backend",
            field="token_source.pool",
        )
    if options.url:
        raise ConfigError(
            "token_source.url (a remote gateway) and token_source.pool (replicas run here) "
            "exclude each other; drop one of them",
            field="token_source.url",
        )
    if options.journal_path:
        raise ConfigError(
            "token_source.journal_path names one journal file, but each pool replica journals "
            "its own sessions: set token_source.pool.journal_dir instead",
            field="token_source.journal_path",
        )
    if options.port:
        raise ConfigError(
            f"token_source.port = {options.port}: pool replicas each pick a free port; drop "
            f"token_source.port",
            field="token_source.port",
        )
    ref = options.pool.engine_factory if options.pool is not None else None
    if ref is not None and not ref.partition(":")[2]:
        raise ConfigError(
            f"token_source.pool.engine_factory = {ref!r} must be 'module:callable' or "
            f"'path/to/file.py:callable'",
            field="token_source.pool.engine_factory",
        )
