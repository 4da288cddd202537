"""One rollhub hub per slime process, started on first use and kept on its own loop thread.

slime calls the rollout function synchronously from its rollout manager and the custom
generate function from its own asyncio loop. Both reach the same core
:class:`~rollhub.hubs.sync_hub.Hub`, hosted by :func:`rollhub.hubs.hosted.process_hub` (closed when
the process exits): the rollout function blocks on it, the generate function awaits it
through the hub's async handle, so the hub's runtime, gateway and client are never shared
between event loops.

The ``rollhub.toml`` path comes from ``args.rollhub_config`` (slime sets attributes from
``--custom-config-path``; :mod:`rollhub_slime.launch` writes that file) or from the
``ROLLHUB_SLIME_CONFIG`` environment variable. Before the hub starts, slime's own arguments
fill what only slime knows: the router address and routing policy of a ``slime-router``
engine, and the gateway's ``model`` (slime's ``--hf-checkpoint``) when the file names none.
"""

from __future__ import annotations

import logging
import os
from argparse import Namespace
from collections.abc import Coroutine
from typing import Any, TypeVar

from rollhub.config import RollhubConfig, load_config
from rollhub.errors import ConfigError
from rollhub.hubs import hosted as hosted_hub
from rollhub.hubs.async_hub import AsyncHub
from rollhub.hubs.sync_hub import Hub
from rollhub.plugins import PluginHost

from rollhub_slime.settings import SlimeOptions, slime_settings

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "CONFIG_ARG",
    "CONFIG_ENV",
    "HUB_KEY",
    "SlimeHub",
    "apply_slime_args",
    "close_process_hub",
    "config_for_slime",
    "process_hub",
]

#: environment variable naming the rollhub.toml
CONFIG_ENV = "ROLLHUB_SLIME_CONFIG"
#: slime argument (set through --custom-config-path) naming the rollhub.toml
CONFIG_ARG = "rollhub_config"
ROUTER_ENGINE = "slime-router"
#: the hosting key of slime's hub: one per process, whatever later calls' arguments
HUB_KEY = "rollhub_slime"


class SlimeHub(Hub):
    """The core's :class:`~rollhub.hubs.sync_hub.Hub` with the names slime's rollout functions use."""

    @property
    def hub(self) -> AsyncHub:
        """The :class:`AsyncHub` (on the hub's loop thread; see :meth:`run_async`)."""
        return self.async_hub

    @property
    def options(self) -> SlimeOptions:
        """The ``[plugins.slime]`` settings of the started hub's config."""
        config = self.async_hub.config
        if config.trainer.name != "slime":
            raise ConfigError(
                f"trainer.name is {config.trainer.name!r}; set [trainer] name = "
                f'"slime" in rollhub.toml to run under slime',
                field="trainer.name",
            )
        return slime_settings(config)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the hub's loop and wait (from synchronous code)."""
        return self.loop_thread.run(coro)

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await a coroutine on the hub's loop from another event loop."""
        return await self.loop_thread.run_async(coro)


def config_for_slime(args: Namespace, env: dict[str, str] | None = None) -> RollhubConfig:
    """Load the rollhub.toml named by slime's arguments or the environment, adapted to slime.

    :raises ConfigError: no path is given, the file is invalid or does not select the
        ``slime`` trainer.
    """
    environ = os.environ if env is None else env
    path = getattr(args, CONFIG_ARG, None) or environ.get(CONFIG_ENV)
    if not path:
        raise ConfigError(
            f"no rollhub.toml for slime: set {CONFIG_ENV}=/path/to/rollhub.toml or "
            f"'{CONFIG_ARG}: /path/to/rollhub.toml' in slime's --custom-config-path file",
            field=CONFIG_ARG,
        )
    config = load_config(path, env=environ)
    apply_slime_args(config, args)
    return config


def apply_slime_args(config: RollhubConfig, args: Namespace | None) -> None:
    """Fill what only slime knows into ``config`` (in place).

    :raises ConfigError: the config does not select the ``slime`` trainer.
    """
    if config.trainer.name != "slime":
        raise ConfigError(
            f"trainer.name is {config.trainer.name!r}; a rollhub.toml used from slime must set "
            f'[trainer] name = "slime"',
            field="trainer.name",
        )
    source = config.token_source
    if source.name != "gateway":
        return
    extra = source.model_extra if source.model_extra is not None else {}
    checkpoint = getattr(args, "hf_checkpoint", None)
    if "model" not in extra and checkpoint:
        extra["model"] = checkpoint
    engine = extra.get("engine")
    if not isinstance(engine, dict) or engine.get("name") != ROUTER_ENGINE:
        return
    options = engine.setdefault("options", {})
    ip, port = getattr(args, "sglang_router_ip", None), getattr(args, "sglang_router_port", None)
    if not options.get("base_url") and ip and port:
        options["base_url"] = f"http://{ip}:{port}"
    policy = getattr(args, "router_policy", None)
    if policy is not None:
        options.setdefault("router_policy", policy)


def process_hub(args: Namespace, *, host: PluginHost | None = None) -> SlimeHub:
    """This process's hub, built from slime's arguments and started on first use
    (:func:`rollhub.hubs.hosted.process_hub`: closed when the process exits).

    :param host: a plugin host (tests); default: installed plugins.
    """
    return hosted_hub.process_hub(HUB_KEY, lambda: SlimeHub(config_for_slime(args), host=host))


def close_process_hub() -> None:
    """Stop this process's hub, if one was started (idempotent)."""
    hosted_hub.close_hub(HUB_KEY)
