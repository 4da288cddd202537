"""The ECR side of a deployment: the repository exists, and the registry login.

The login uses ``GetAuthorizationToken``: its token is base64 of ``AWS:<password>``, valid
for 12 hours, for the registry at ``proxyEndpoint``. The password never reaches the console.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass

from rollhub.deploy.aws import AwsCalls
from rollhub.deploy.errors import DeployError
from rollhub.deploy.names import ImageRef

__all__ = ["RegistryLogin", "ensure_repository", "registry_login"]

log = logging.getLogger(__name__)

SERVICE = "ecr"


@dataclass(frozen=True)
class RegistryLogin:
    """Credentials for ``<tool> login``: ``username``, ``password`` (secret) and ``registry``."""

    username: str
    password: str
    registry: str

    def __repr__(self) -> str:  # the password stays out of logs and tracebacks
        return f"RegistryLogin(username={self.username!r}, registry={self.registry!r})"


def ensure_repository(calls: AwsCalls, image: ImageRef) -> str:
    """Create the image's repository unless it exists; return its URI.

    ``DescribeRepositories`` answers ``RepositoryNotFoundException`` for a missing one; a
    ``RepositoryAlreadyExistsException`` from ``CreateRepository`` (someone else created it
    in between) is fine too.
    """
    found = calls.call(
        SERVICE,
        "DescribeRepositories",
        {"registryId": image.account, "repositoryNames": [image.repository]},
        planned=None,
        ok_codes=frozenset({"RepositoryNotFoundException"}),
        resource=image.repository,
    )
    default_uri = f"{image.registry}/{image.repository}"
    if found and found.get("repositories"):
        uri = str(found["repositories"][0].get("repositoryUri") or default_uri)
        calls.out(f"     repository {image.repository} exists: {uri}")
        return uri
    if calls.dry_run:
        calls.out(f"     (dry run: CreateRepository is sent only if {image.repository} is missing)")
    created = calls.call(
        SERVICE,
        "CreateRepository",
        {
            "registryId": image.account,
            "repositoryName": image.repository,
            "imageScanningConfiguration": {"scanOnPush": True},
        },
        planned={"repository": {"repositoryUri": default_uri}},
        ok_codes=frozenset({"RepositoryAlreadyExistsException"}),
        resource=image.repository,
    )
    if created is None:
        calls.out(f"     repository {image.repository} was created meanwhile")
        return default_uri
    return str(created.get("repository", {}).get("repositoryUri") or default_uri)


def registry_login(calls: AwsCalls, image: ImageRef) -> RegistryLogin:
    """Registry credentials for the image's account, from ``GetAuthorizationToken``."""
    planned_token = base64.b64encode(b"AWS:<token from GetAuthorizationToken>").decode()
    answer = calls.call(
        SERVICE,
        "GetAuthorizationToken",
        {"registryIds": [image.account]},
        planned={
            "authorizationData": [
                {"authorizationToken": planned_token, "proxyEndpoint": f"https://{image.registry}"}
            ]
        },
        resource=image.account,
    )
    data = (answer or {}).get("authorizationData") or []
    if not data:
        raise DeployError(
            "ecr GetAuthorizationToken returned no authorization data",
            step="GetAuthorizationToken",
            operation="GetAuthorizationToken",
        )
    try:
        decoded = base64.b64decode(data[0]["authorizationToken"], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, KeyError) as exc:
        raise DeployError(
            "ecr GetAuthorizationToken returned a token that is not base64 of user:password",
            step="GetAuthorizationToken",
            operation="GetAuthorizationToken",
        ) from exc
    username, sep, password = decoded.partition(":")
    if not sep or not password:
        raise DeployError(
            "ecr GetAuthorizationToken returned a token without a password",
            step="GetAuthorizationToken",
            operation="GetAuthorizationToken",
        )
    registry = str(data[0].get("proxyEndpoint") or f"https://{image.registry}")
    return RegistryLogin(username=username, password=password, registry=registry)
