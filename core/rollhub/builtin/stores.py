"""Registers the core's built-in result stores: ``file`` and ``s3`` (by URL scheme).

Only the classes are imported; the S3 store imports boto3 when it makes its first request.
"""

from __future__ import annotations

from rollhub.plugin_host.markers import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Add :class:`~rollhub.stores.file.FileResultStore` and :class:`~rollhub.stores.s3.S3ResultStore`."""
    from rollhub.stores.file import FileResultStore
    from rollhub.stores.s3 import S3ResultStore

    registry.add_store(FileResultStore)
    registry.add_store(S3ResultStore)
