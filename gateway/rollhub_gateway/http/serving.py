"""Ways to serve a gateway: on a running loop, in a background thread, or standalone.

- In process: ``url = await gateway.start()`` serves on the caller's event loop, or mount
  ``gateway.app()`` into an existing aiohttp application (``parent.add_subapp("/gw", app)``).
- Threaded, for synchronous trainers: ``with ThreadedGateway(gateway) as gw: gw.url``
  runs its own event loop in a daemon thread.
- Standalone: ``rollhub gateway serve`` (:mod:`rollhub_gateway.cli`) calls
  :func:`serve_forever`.

:func:`build_gateway` builds the engine (through the component registry) and the chat
model from a :class:`~rollhub_gateway.config.GatewayConfig`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from rollhub.errors import ConfigError, UsageError
from rollhub.lifetimes.loop_thread import LoopThread
from rollhub.registry import ComponentRegistry
from rollhub.sampling import SamplingBackend
from rollhub.trace import TraceRecord

from rollhub_gateway.config import GatewayConfig, ServedPolicy, SessionPolicy
from rollhub_gateway.engines import register_backends
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.policies.routes import PolicyRoute
from rollhub_gateway.sessions import Session
from rollhub_gateway.turns import ChatModel

__all__ = [
    "ThreadedGateway",
    "build_backend",
    "build_chat_model_for",
    "build_gateway",
    "serve_forever",
    "settle_heap",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


def build_backend(
    config: GatewayConfig,
    registry: ComponentRegistry | None = None,
    *,
    policy: ServedPolicy | None = None,
) -> SamplingBackend:
    """The configured sampling backend, found by name in the component registry.

    A backend whose options have a ``model`` field gets the gateway's ``model`` unless
    ``engine.options`` sets its own.

    :param policy: build the engine of this served policy (its ``weights`` loaded over the
        model).
    :raises UnknownComponentError: no backend of that name (lists the installed ones).
    :raises ConfigError: bad ``engine.options``; a policy's ``weights`` for an engine that
        cannot load them.
    """
    from rollhub.registry import build_options

    if registry is None:
        registry = _registry()
    cls = registry.get("sampling_backend", config.engine.name, field="engine.name")
    options = dict(config.engine.options)
    fields = getattr(getattr(cls, "Options", None), "model_fields", {})
    if "model" in fields and "model" not in options:
        options["model"] = config.model
    if policy is not None and policy.weights:
        if "weights" not in fields:
            raise ConfigError(
                f"policy {policy.name!r} has weights, but engine {config.engine.name!r} "
                "cannot load a weights file; serve it from an engine that can "
                '("transformers") or drop its weights',
                field="policies.weights",
            )
        options["weights"] = policy.weights
    _, opts = build_options(
        registry, "sampling_backend", config.engine.name, options, section="engine.options"
    )
    return cls(opts)


def build_chat_model_for(config: GatewayConfig) -> ChatModel:
    """The chat model (tokenizer, template family, parser, journal) of ``config``."""
    from rollhub_gateway.chat_model import build_chat_model

    template = config.chat_template
    if template is not None and "{" not in template:
        path = Path(template).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"chat_template={template!r} is neither Jinja text nor an existing file",
                field="chat_template",
            )
        template = path.read_text(encoding="utf-8")
    model = build_chat_model(
        config.model, chat_template=template, family=config.family, journal=config.journal_path
    )
    model.model_id = config.served_model_id
    return model


def build_gateway(
    config: GatewayConfig,
    *,
    backend: SamplingBackend | None = None,
    chat_model: ChatModel | None = None,
) -> Gateway:
    """A gateway for ``config``; ``backend``/``chat_model`` replace the configured ones.

    With ``config.policies`` every policy gets an engine of its own (``backend`` then
    serves the first one).
    """
    chat_model = chat_model or build_chat_model_for(config)
    if not config.policies:
        return Gateway(backend or build_backend(config), chat_model, config)
    routes = []
    for i, policy in enumerate(config.policies):
        engine = backend if i == 0 and backend is not None else build_backend(config, policy=policy)
        routes.append(PolicyRoute(policy.name, policy.served_id, engine, policy.trainable, 0))
    return Gateway(routes[0].backend, chat_model, config, routes=routes)


def _registry() -> ComponentRegistry:
    from rollhub.plugins import build_host

    try:
        return build_host().registry
    except Exception as exc:  # a broken third-party plugin must not stop the gateway's own
        log.warning("plugin discovery failed (%s); using the gateway's own backends only", exc)
        reg = ComponentRegistry()
        register_backends(reg)
        return reg


class ThreadedGateway:
    """Serve a gateway from a background thread with its own event loop (sync callers).

    Example::

        with ThreadedGateway(gateway) as gw:
            client = openai.OpenAI(base_url=gw.base_url, api_key=gw.open_session("s1").key)

    Session methods (:meth:`open_session`, :meth:`finish_session`…) run on the gateway's
    loop, so they are safe to call from any thread.
    """

    def __init__(self, gateway: Gateway, host: str | None = None, port: int | None = None) -> None:
        self.gateway = gateway
        self.host = host
        self.port = port
        self.url: str | None = None
        self._loop = LoopThread("rollhub-gateway")

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``."""
        return f"{self.url}/v1"

    def start(self) -> str:
        """Start the thread and serve; returns the root URL."""
        if self._loop.running:
            return self.url or ""
        self._loop.start()
        try:
            self.url = self.call(self.gateway.start(self.host, self.port))
        except BaseException:
            self.stop()
            raise
        return self.url

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the gateway's loop and wait for its result."""
        if not self._loop.running:
            coro.close()
            raise UsageError("ThreadedGateway is not started; use it as a context manager")
        # Not LoopThread.run, which refuses callers on an event loop: a caller on a loop of
        # its own may wait on the gateway's.
        return asyncio.run_coroutine_threadsafe(coro, self._loop.loop).result(timeout)

    def run_sync(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the gateway's loop (session bookkeeping is single-threaded)."""

        async def _call() -> T:
            return fn()

        return self.call(_call())

    def open_session(
        self,
        session_id: str | None = None,
        *,
        policy: SessionPolicy | dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """Open a session (see :meth:`Gateway.open_session`)."""
        return self.run_sync(
            lambda: self.gateway.open_session(session_id, policy=policy, metadata=metadata)
        )

    def traces(self, session_id: str) -> list[TraceRecord]:
        """The open session's records."""
        return self.run_sync(lambda: self.gateway.traces(session_id))

    def finish_session(self, session_id: str) -> list[TraceRecord]:
        """Close a session and return its records."""
        return self.run_sync(lambda: self.gateway.finish_session(session_id))

    def drop_session(self, session_id: str) -> None:
        """Close a session and discard its records."""
        self.run_sync(lambda: self.gateway.drop_session(session_id))

    def stop(self) -> None:
        """Stop serving and end the thread (idempotent).

        The server's stop answers or cancels the calls in flight; then the loop stops with
        whatever is still pending on it.
        """
        if not self._loop.running:
            return
        try:
            if self.url is not None:
                self.call(self.gateway.stop(), 30)
        finally:
            self._loop.stop(join_timeout=30)
            self.url = None

    def __enter__(self) -> ThreadedGateway:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def settle_heap() -> None:
    """Exempt everything loaded so far (tokenizer, template, libraries: ~240k objects) from
    the cyclic garbage collector's passes.

    A full pass walks every tracked object: with the start-up heap in it, one took ~50 ms
    on the 2-core machine, a stall of every session, and sessions that accumulate turns
    keep triggering them. Call it once the model is loaded, in a process that serves the
    gateway (``serve_forever`` does); objects created later are collected as usual.
    """
    gc.collect()
    gc.freeze()


async def serve_forever(
    config: GatewayConfig, *, on_ready: Callable[[Gateway, str], None] | None = None
) -> None:
    """Build and serve a gateway until cancelled (the standalone server)."""
    if config.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "gateway listens on %s: anyone who can reach it and holds a session key can sample",
            config.host,
        )
    gateway = build_gateway(config)
    await gateway.start()
    settle_heap()
    try:
        if on_ready is not None:
            on_ready(gateway, gateway.url or "")
        await asyncio.Event().wait()
    finally:
        await gateway.close()
