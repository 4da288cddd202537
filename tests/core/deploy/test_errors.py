"""DeployError: picklable with its context; botocore errors mapped at the boundary."""

from __future__ import annotations

import pickle

import pytest
from rollhub.deploy.aws import AwsCalls
from rollhub.deploy.errors import DeployError
from rollhub.errors import RollhubError

from tests.core.deploy.stubbed_aws import REGION


def test_deploy_error_pickles_with_its_context() -> None:
    err = DeployError(
        "access denied", step="push", operation=None, permissions=("ecr:PutImage",), exit_code=1
    )
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is DeployError and isinstance(back, RollhubError)
    assert (str(back), back.step, back.permissions, back.exit_code, back.transient) == (
        "access denied", "push", ("ecr:PutImage",), 1, False,
    )  # fmt: skip


def test_missing_credentials_on_a_real_boto3_client(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """The real path: boto3 session and client made by AwsCalls, no credentials anywhere."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    lines: list[str] = []
    calls = AwsCalls(region=REGION, out=lines.append)
    with pytest.raises(DeployError, match="no AWS credentials found") as ei:
        calls.call("ecr", "DescribeRepositories", {"repositoryNames": ["ab"]})
    assert ei.value.operation == "DescribeRepositories"
    assert lines == ['  -> ecr DescribeRepositories {"repositoryNames": ["ab"]}']


def test_unknown_profile_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from rollhub.errors import ConfigError

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    calls = AwsCalls(region=REGION, profile="nope")
    with pytest.raises(ConfigError, match="--profile 'nope'"):
        calls.client("ecr")
