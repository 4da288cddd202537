"""The compat plugin: results of unmodified agentcore-rl-toolkit agents, chosen in config.

::

    [store]
    url = "agentcore-rl+s3://my-bucket"

opens ``s3://my-bucket`` read through :class:`~rollhub.compat.upstream_layout.UpstreamLayoutStore`
(upstream failures become ``agent_error``), and every rollout's ``_rollout`` gains
``s3_bucket``, the field upstream's app requires. Rollouts still name ``s3://my-bucket`` as
their ``result_store``, so rollhub agents under the same runtime store results as usual.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from rollhub.compat.upstream_layout import UpstreamLayoutStore
from rollhub.errors import ConfigError
from rollhub.plugin_host.markers import hookimpl

if TYPE_CHECKING:
    from rollhub.hubs.view import HubView
    from rollhub.registry import ComponentRegistry
    from rollhub.rollout import RolloutRequest

__all__ = ["SCHEME", "UpstreamS3Store", "rollhub_prepare_rollout", "rollhub_register_components"]

log = logging.getLogger(__name__)

#: The store URL scheme of S3 results written in upstream's layout.
SCHEME = "agentcore-rl+s3"


class UpstreamS3Store(UpstreamLayoutStore):
    """``agentcore-rl+s3://bucket[/prefix]``: an S3 store read in upstream's layout."""

    name = SCHEME

    @classmethod
    def from_url(cls, url: str, **options: Any) -> UpstreamS3Store:
        """Open the ``s3://`` store the URL names after its ``agentcore-rl+`` prefix."""
        from rollhub.stores.s3 import S3ResultStore

        scheme, _, rest = url.partition("://")
        if scheme.lower() != SCHEME or not rest:
            raise ConfigError(
                f"store URL {url!r} is not {SCHEME}://bucket[/prefix]", field="store.url"
            )
        if "/" in rest.strip("/"):
            # upstream's app writes at the bucket's root; a prefix would hide its results
            raise ConfigError(
                f"store URL {url!r}: upstream agents write {{exp_id}}/... at the bucket's root; "
                f"use {SCHEME}://bucket without a prefix",
                field="store.url",
            )
        return cls(S3ResultStore.from_url(f"s3://{rest.strip('/')}", **options))

    @property
    def bucket(self) -> str:
        """The bucket upstream's app writes to (``_rollout.s3_bucket``)."""
        return str(cast(Any, self.inner).bucket)


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the ``agentcore-rl+s3`` store."""
    registry.add_store(UpstreamS3Store)


@hookimpl
def rollhub_prepare_rollout(request: RolloutRequest, hub: HubView) -> None:
    """Give rollouts of an ``agentcore-rl+s3`` hub what upstream agents read: ``s3_bucket``
    (upstream's app requires it) and the sampling entries flat in ``_rollout``."""
    store = getattr(hub, "store", None)
    if not isinstance(store, UpstreamS3Store):
        return
    rollout = request.rollout
    extra = rollout.model_extra
    if extra is None:
        return
    extra.setdefault("s3_bucket", store.bucket)
    for key, value in rollout.sampling.items():
        if key not in type(rollout).model_fields:
            extra.setdefault(key, value)
