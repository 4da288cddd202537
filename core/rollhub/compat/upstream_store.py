"""Upstream's rollout config and S3 writes through the app's own boto3 client.

:class:`RolloutConfig` is agentcore-rl-toolkit's (``exp_id``, ``input_id``, ``s3_bucket``;
``from_dict`` raises :class:`ValueError` naming a missing field). :class:`ClientS3Store` is
a rollhub :class:`~rollhub.stores.base.ResultStore` that reads and writes with whatever
boto3 S3 client its owner holds *at call time*, so ``app.s3_client = mock`` (as upstream
users do in tests) is the client the next result is written with.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from rollhub.errors import UsageError
from rollhub.stores.base import ResultStore, decode_document

__all__ = ["UPSTREAM_REQUIRED", "ClientS3Store", "RolloutConfig"]

log = logging.getLogger(__name__)

#: ``_rollout`` fields that turn on the S3 save; all three are then required.
UPSTREAM_REQUIRED = ("exp_id", "input_id", "s3_bucket")


@dataclass
class RolloutConfig:
    """Where one rollout's result goes: ``s3://{s3_bucket}/{exp_id}/{input_id}/...``."""

    exp_id: str
    input_id: str
    s3_bucket: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutConfig:
        """The config from a ``_rollout`` dict.

        :raises ValueError: ``Missing required rollout config field: 'input_id'`` (etc.).
        """
        try:
            return cls(
                exp_id=data["exp_id"], input_id=data["input_id"], s3_bucket=data["s3_bucket"]
            )
        except KeyError as exc:
            raise ValueError(f"Missing required rollout config field: {exc}") from exc


def _missing(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound")


class ClientS3Store(ResultStore):
    """One bucket, through the boto3 client ``client()`` returns at each call.

    Documents are written as upstream's app writes them (indented JSON,
    ``application/json``).
    """

    name = "agentcore-rl+s3"

    def __init__(self, client: Callable[[], Any], bucket: str) -> None:
        self._client = client
        self.bucket = bucket

    @classmethod
    def from_url(cls, url: str, **options: object) -> ClientS3Store:
        """Not opened from URLs: the app builds it around its own client."""
        raise UsageError(f"{url}: ClientS3Store is built by AgentCoreRLApp, not from a URL")

    @property
    def url(self) -> str:
        """``s3://{bucket}``: where upstream's client looks."""
        return f"s3://{self.bucket}"

    def put(self, key: str, document: dict[str, Any]) -> None:
        """Write one document (``PutObject``)."""
        self._client().put_object(
            Bucket=self.bucket,
            Key=key,
            Body=json.dumps(document, indent=2),
            ContentType="application/json",
        )

    def get(self, key: str) -> dict[str, Any] | None:
        """Read one document; None when absent."""
        try:
            body = self._client().get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _missing(exc):
                return None
            raise
        return decode_document(body, url=self.url, key=key)

    def exists(self, key: str) -> bool:
        """``HeadObject``; other errors than 404 are raised."""
        try:
            self._client().head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _missing(exc):
                return False
            raise
        return True

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, sorted."""
        pages = (
            self._client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.bucket, Prefix=prefix)
        )
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def delete(self, key: str) -> None:
        """Remove one key."""
        self._client().delete_object(Bucket=self.bucket, Key=key)
