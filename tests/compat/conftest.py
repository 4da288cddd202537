"""Fixtures for the agentcore-rl-toolkit cross tests: SeaweedFS as S3, the local data plane.

boto3 clients built anywhere in the process (upstream's client and app, rollhub's S3 store
and ``agentcore`` runtime) reach the loopback services through the standard
``AWS_ENDPOINT_URL_*`` variables, as a user would point them at a test account.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from rollhub.compat.agentcore_local import ENDPOINT_ENV, LocalAgentCore
from rollhub.testing.seaweedfs import seaweedfs_server
from rollhub.testing.servers import serve_app

from tests.compat.loopback_aws import BUCKET, REGION, Plane


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seaweedfs_server(tmp_path_factory.mktemp("s3")) as endpoint:
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        s3.create_bucket(Bucket=BUCKET)
        yield endpoint


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, s3_endpoint: str) -> str:
    """Credentials, region and the S3 endpoint for every boto3 client in this test."""
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    return s3_endpoint


@pytest.fixture
def plane(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Plane]:
    app = LocalAgentCore()
    with serve_app(app) as url:
        monkeypatch.setenv(ENDPOINT_ENV, url)
        yield Plane(url=url, app=app)


@pytest.fixture
def s3(aws_env: str):
    return boto3.client("s3", region_name=REGION)


@pytest.fixture
def tmp_store(tmp_path: Path) -> Path:
    return tmp_path / "results"
