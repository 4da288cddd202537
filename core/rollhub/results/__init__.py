"""Result documents: their schema, how a rollout's result becomes one and reaches the store.

:mod:`rollhub.results.document` builds and reads documents (no I/O, no server imports: the
client side reads results with it); :mod:`rollhub.results.write` is the one place a
document is written to a result store.
"""

from rollhub.results.document import (
    SCHEMA_VERSION,
    InvalidResultError,
    ResultView,
    build_result_document,
    read_result,
    read_status,
)
from rollhub.results.write import store_result

__all__ = [
    "SCHEMA_VERSION",
    "InvalidResultError",
    "ResultView",
    "build_result_document",
    "read_result",
    "read_status",
    "store_result",
]
