"""The ECR repository and registry login, against botocore's ecr model (Stubber)."""

from __future__ import annotations

import base64

import pytest
from rollhub.deploy.ecr import ensure_repository, registry_login
from rollhub.deploy.errors import DeployError
from rollhub.deploy.names import ImageRef

from tests.core.deploy.stubbed_aws import ACCOUNT, REGION, REGISTRY, WHEN, StubbedAws

IMAGE = ImageRef(account=ACCOUNT, region=REGION, repository="team/agent", tag="v1")
REPO_URI = f"{REGISTRY}/team/agent"
DESCRIBE = {"registryId": ACCOUNT, "repositoryNames": ["team/agent"]}
CREATE = {
    "registryId": ACCOUNT,
    "repositoryName": "team/agent",
    "imageScanningConfiguration": {"scanOnPush": True},
}


def _repository() -> dict:
    return {
        "repositoryArn": f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/team/agent",
        "registryId": ACCOUNT,
        "repositoryName": "team/agent",
        "repositoryUri": REPO_URI,
        "createdAt": WHEN,
    }


def test_existing_repository_is_not_created(aws: StubbedAws) -> None:
    aws.ecr_stub.add_response("describe_repositories", {"repositories": [_repository()]}, DESCRIBE)
    assert ensure_repository(aws.calls(), IMAGE) == REPO_URI
    aws.assert_done()
    assert "exists" in aws.text and "CreateRepository" not in aws.text


def test_missing_repository_is_created(aws: StubbedAws) -> None:
    aws.ecr_stub.add_client_error(
        "describe_repositories",
        "RepositoryNotFoundException",
        "not found",
        400,
        expected_params=DESCRIBE,
    )
    aws.ecr_stub.add_response("create_repository", {"repository": _repository()}, CREATE)
    assert ensure_repository(aws.calls(), IMAGE) == REPO_URI
    aws.assert_done()
    assert "ecr CreateRepository" in aws.text


def test_repository_created_meanwhile_is_fine(aws: StubbedAws) -> None:
    aws.ecr_stub.add_client_error(
        "describe_repositories", "RepositoryNotFoundException", http_status_code=400
    )
    aws.ecr_stub.add_client_error(
        "create_repository", "RepositoryAlreadyExistsException", http_status_code=400
    )
    assert ensure_repository(aws.calls(), IMAGE) == REPO_URI
    aws.assert_done()


def test_access_denied_names_the_missing_permission(aws: StubbedAws) -> None:
    aws.ecr_stub.add_client_error(
        "describe_repositories", "RepositoryNotFoundException", http_status_code=400
    )
    aws.ecr_stub.add_client_error(
        "create_repository",
        "AccessDeniedException",
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: ecr:CreateRepository",
        400,
    )
    with pytest.raises(DeployError) as ei:
        ensure_repository(aws.calls(), IMAGE)
    err = ei.value
    assert err.permissions == ("ecr:CreateRepository",) and err.code == "AccessDeniedException"
    assert "needs ecr:CreateRepository" in str(err) and "team/agent" in str(err)


def test_other_service_errors_keep_their_code(aws: StubbedAws) -> None:
    aws.ecr_stub.add_client_error("describe_repositories", "ServerException", "boom", 500)
    with pytest.raises(DeployError, match="ServerException: boom") as ei:
        ensure_repository(aws.calls(), IMAGE)
    assert ei.value.transient and ei.value.permissions == ()


def test_login_decodes_the_authorization_token(aws: StubbedAws) -> None:
    token = base64.b64encode(b"AWS:s3cr3t-password").decode()
    aws.ecr_stub.add_response(
        "get_authorization_token",
        {
            "authorizationData": [
                {
                    "authorizationToken": token,
                    "proxyEndpoint": f"https://{REGISTRY}",
                    "expiresAt": WHEN,
                }
            ]
        },
        {"registryIds": [ACCOUNT]},
    )
    login = registry_login(aws.calls(), IMAGE)
    assert (login.username, login.password, login.registry) == (
        "AWS", "s3cr3t-password", f"https://{REGISTRY}",
    )  # fmt: skip
    assert "s3cr3t" not in repr(login) and "s3cr3t" not in aws.text


@pytest.mark.parametrize("token", ["%%%not-base64", base64.b64encode(b"no-colon").decode()])
def test_malformed_tokens_are_deploy_errors(aws: StubbedAws, token: str) -> None:
    aws.ecr_stub.add_response(
        "get_authorization_token",
        {"authorizationData": [{"authorizationToken": token, "proxyEndpoint": "https://x"}]},
    )
    with pytest.raises(DeployError, match="GetAuthorizationToken"):
        registry_login(aws.calls(), IMAGE)


def test_login_access_denied(aws: StubbedAws) -> None:
    aws.ecr_stub.add_client_error("get_authorization_token", "AccessDeniedException", "no", 400)
    with pytest.raises(DeployError, match="needs ecr:GetAuthorizationToken"):
        registry_login(aws.calls(), IMAGE)
