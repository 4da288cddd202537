"""Reading a rollout's stored result on the client's event loop, within a size limit."""

from __future__ import annotations

import asyncio
from typing import Any

from rollhub.stores.base import ResultStore
from rollhub.stores.file import FileResultStore

__all__ = ["ResultTooLarge", "read_stored"]

#: Stored results up to this size are read on the event loop; larger ones in a thread.
INLINE_READ_BYTES = 256 * 1024


class ResultTooLarge(Exception):
    """The stored result is over the client's ``max_result_bytes``."""


async def read_stored(
    store: ResultStore, key: str, *, max_bytes: int | None
) -> dict[str, Any] | None:
    """The document stored under ``key``; None while nothing is there.

    A local file's size is checked before it is parsed: parsing holds the interpreter lock
    however it is run, so a huge result would stall every other rollout of the client.

    :raises ResultTooLarge: a ``file://`` result is over ``max_bytes``.
    :raises StoreError: the store could not be read.
    """
    if isinstance(store, FileResultStore):
        try:
            size = store.path(key).stat().st_size
        except OSError:
            return None  # not written yet (or unreadable: get() below would say why)
        if max_bytes is not None and size > max_bytes:
            raise ResultTooLarge(
                f"the stored result {key} is {size} bytes, over max_result_bytes={max_bytes}; "
                f"return less from the agent or raise the client's max_result_bytes"
            )
        if size <= INLINE_READ_BYTES:
            # A small local file reads in microseconds; a thread hop costs more than the
            # read and contends for the GIL at hundreds of rollouts a second.
            return store.get(key)
    return await asyncio.to_thread(store.get, key)
