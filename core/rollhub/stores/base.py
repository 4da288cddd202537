"""The result-store interface shared by every store (file://, s3://).

Keys are ``{exp_id}/{input_id}/{session_id}.json``; values are JSON documents. Methods are
synchronous (boto3 is); async code calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from rollhub.errors import StoreError

#: URL scheme -> "module:Class" of the stores the core ships.
BUILTIN_SCHEMES: dict[str, str] = {
    "file": "rollhub.stores.file:FileResultStore",
    "s3": "rollhub.stores.s3:S3ResultStore",
}

__all__ = ["BUILTIN_SCHEMES", "ResultStore", "decode_document", "encode_document"]


def encode_document(document: dict[str, Any]) -> bytes:
    """A document as stored: UTF-8 JSON, NaN and infinity refused (they are not JSON)."""
    return json.dumps(document, ensure_ascii=False, allow_nan=False).encode("utf-8")


def decode_document(data: bytes, *, url: str, key: str) -> dict[str, Any]:
    """Parse a stored JSON document; a corrupt one is a :class:`StoreError` naming the key."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise StoreError(f"{key!r} in {url} is not valid JSON: {exc}", url=url, key=key) from exc


class ResultStore(ABC):
    """put, get, exists, list by prefix, delete. ``name`` is the URL scheme served."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_url(cls, url: str, **options: object) -> ResultStore:
        """Open the store a URL names (``file:///dir``, ``s3://bucket/prefix``)."""

    @property
    @abstractmethod
    def url(self) -> str:
        """The URL this store was opened from."""

    def location(self, key: str) -> str:
        """A URL for one key (what the app reports back as ``result``)."""
        return f"{self.url.rstrip('/')}/{key}"

    @abstractmethod
    def put(self, key: str, document: dict[str, Any]) -> None:
        """Write a JSON document atomically."""

    @abstractmethod
    def get(self, key: str) -> dict[str, Any] | None:
        """Read a document, or None when the key does not exist."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether a key exists."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys starting with ``prefix``, sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove a key (no error when it does not exist)."""
