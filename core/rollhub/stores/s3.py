"""``s3://bucket/prefix``: results in S3 or any S3-compatible service (SeaweedFS, MinIO).

boto3 is imported when the first request is made, never at import, so ``rollhub`` stays
light for users of the file store. The endpoint comes from the ``endpoint_url`` option, else
``ROLLHUB_S3_ENDPOINT_URL``, else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, else AWS.
Every botocore failure becomes a :class:`~rollhub.errors.StoreError` (``raise … from``).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any, ClassVar

from rollhub.errors import StoreError
from rollhub.stores import check_key, check_prefix
from rollhub.stores.base import ResultStore, decode_document, encode_document

if TYPE_CHECKING:
    from botocore.client import BaseClient

__all__ = ["ENDPOINT_ENV_VARS", "S3ResultStore"]

log = logging.getLogger(__name__)

#: Environment variables read for the endpoint, first set wins.
ENDPOINT_ENV_VARS: tuple[str, ...] = (
    "ROLLHUB_S3_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
)

_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}


class S3ResultStore(ResultStore):
    """Results as JSON objects under ``s3://bucket/prefix``.

    :param bucket: the bucket name.
    :param prefix: key prefix inside the bucket (no leading or trailing ``/`` needed).
    :param endpoint_url: S3-compatible endpoint; default from the environment (see module).
    :param region_name: AWS region; default from the usual boto3 sources.
    :param client: a ready boto3 S3 client (tests, custom sessions); built lazily otherwise.
    :param create_bucket: create the bucket on first use when it does not exist.
    :param max_pool_connections: HTTP connections kept open (many agents write at once).
    :param max_attempts: botocore retry attempts (``adaptive`` mode: backs off on throttling).
    :param connect_timeout_s: seconds to wait for a connection (botocore's default is 60).
    :param read_timeout_s: seconds to wait for an answer (botocore's default is 60).
    :param client_options: extra keyword arguments for ``boto3.client`` (credentials…).

    Example::

        store = S3ResultStore.from_url("s3://results/exp-1", endpoint_url="http://127.0.0.1:8333")
        store.put("exp-1/q1/s1.json", {"rewards": 1.0})
    """

    name: ClassVar[str] = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        client: BaseClient | None = None,
        create_bucket: bool = False,
        max_pool_connections: int = 64,
        max_attempts: int = 5,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 15.0,
        **client_options: object,
    ) -> None:
        if not bucket or "/" in bucket:
            raise StoreError(f"S3 bucket name {bucket!r} is invalid", bucket=bucket)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self.endpoint_url = endpoint_url or _endpoint_from_env()
        self.region_name = region_name
        self.create_bucket = create_bucket
        self.max_pool_connections = max_pool_connections
        self.max_attempts = max_attempts
        # botocore waits 60 s for each by default; a stalled server would hold a rollout's
        # result (and its slot) for minutes before the failure is reported.
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.client_options = client_options
        self._client = client
        self._lock = threading.Lock()
        self._bucket_checked = not create_bucket

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3ResultStore:
        """Open ``s3://bucket`` or ``s3://bucket/prefix``."""
        if not url.startswith("s3://"):
            raise StoreError(f"{url!r} is not an s3:// URL", url=url)
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise StoreError(f"store URL {url!r} names no bucket; use s3://bucket/prefix", url=url)
        return cls(bucket, prefix, **options)

    @property
    def url(self) -> str:
        """``s3://bucket/prefix`` (no trailing slash)."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def client(self) -> BaseClient:
        """The boto3 S3 client, built on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
        if not self._bucket_checked:
            with self._lock:
                if not self._bucket_checked:
                    self._ensure_bucket(self._client)
                    self._bucket_checked = True
        return self._client

    def _make_client(self) -> BaseClient:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise StoreError(
                "the s3:// store needs boto3: pip install 'rollhub[s3]'", url=self.url
            ) from exc
        config = Config(
            retries={"mode": "adaptive", "max_attempts": self.max_attempts},
            max_pool_connections=self.max_pool_connections,
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
        )
        log.debug("S3 client for %s (endpoint %s)", self.url, self.endpoint_url or "AWS")
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region_name,
            config=config,
            **self.client_options,
        )

    def _ensure_bucket(self, client: BaseClient) -> None:
        try:
            client.head_bucket(Bucket=self.bucket)
            return
        except _boto_errors() as exc:
            if _error_code(exc) not in _NOT_FOUND | {"NoSuchBucket"}:
                raise self._error("check bucket", "", exc) from exc
        try:
            client.create_bucket(Bucket=self.bucket)
        except _boto_errors() as exc:
            if _error_code(exc) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                raise self._error("create bucket", "", exc) from exc

    def object_key(self, key: str) -> str:
        """The full S3 object key of a store key (prefix included)."""
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, document: dict[str, Any]) -> None:
        """Write ``document`` at ``key``, then confirm it with a HEAD request."""
        obj = self.object_key(key)
        try:
            body = encode_document(document)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"document for {key!r} is not JSON: {exc}", key=key) from exc
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=obj, Body=body, ContentType="application/json"
            )
            head = self.client.head_object(Bucket=self.bucket, Key=obj)
        except _boto_errors() as exc:
            raise self._error("put", key, exc) from exc
        size = head.get("ContentLength")
        if size is not None and size != len(body):
            raise StoreError(
                f"S3 put of {key!r} to {self.url} stored {size} bytes, expected {len(body)}",
                url=self.url,
                key=key,
            )

    def get(self, key: str) -> dict[str, Any] | None:
        """The document at ``key``, or None when there is none."""
        obj = self.object_key(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=obj)
            data = response["Body"].read()
        except _boto_errors() as exc:
            if _error_code(exc) in _NOT_FOUND:
                return None
            raise self._error("get", key, exc) from exc
        return decode_document(data, url=self.url, key=key)

    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key``."""
        obj = self.object_key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=obj)
        except _boto_errors() as exc:
            if _error_code(exc) in _NOT_FOUND:
                return False
            raise self._error("head", key, exc) from exc
        return True

    def list(self, prefix: str = "") -> list[str]:
        """Keys that start with ``prefix``, sorted."""
        check_prefix(prefix)
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(item["Key"][strip:] for item in page.get("Contents", ()))
        except _boto_errors() as exc:
            raise self._error("list", prefix, exc) from exc
        return sorted(keys)

    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""
        obj = self.object_key(key)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=obj)
        except _boto_errors() as exc:
            if _error_code(exc) in _NOT_FOUND:
                return
            raise self._error("delete", key, exc) from exc

    def _error(self, op: str, key: str, exc: BaseException) -> StoreError:
        code = _error_code(exc)
        what = f"{key!r} " if key else ""
        hint = ""
        if type(exc).__name__ == "NoCredentialsError":
            hint = "; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or pass client options"
        elif type(exc).__name__ in {"EndpointConnectionError", "ConnectTimeoutError"}:
            hint = f"; is the endpoint {self.endpoint_url or 'AWS'} reachable?"
        return StoreError(
            f"S3 {op} {what}in {self.url} failed: {type(exc).__name__}: {exc}{hint}",
            url=self.url,
            key=key,
            code=code,
        )

    def __repr__(self) -> str:
        return f"S3ResultStore({self.url!r}, endpoint_url={self.endpoint_url!r})"


def _boto_errors() -> tuple[type[BaseException], ...]:
    """botocore's two error roots (service errors and client-side errors)."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # boto3 missing: the client build already raised StoreError
        return ()
    return (ClientError, BotoCoreError)


def _endpoint_from_env() -> str | None:
    for var in ENDPOINT_ENV_VARS:
        value = os.environ.get(var)
        if value:
            return value
    return None


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (None for other errors)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        code = error.get("Code")
        if code is not None:
            return str(code)
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if status is not None:
            return str(status)
    return None
