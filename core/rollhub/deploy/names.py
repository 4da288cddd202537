"""Names a deployment is made of: the ECR image reference, the runtime name, the role ARN.

The patterns are the ones botocore's service models give (``RepositoryName`` of ``ecr``,
``AgentRuntimeName``, ``RoleArn`` and ``RuntimeContainerUri`` of
``bedrock-agentcore-control``), checked here so that a typo is a :class:`ConfigError`
naming the flag before anything is built or called.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from rollhub.errors import ConfigError

__all__ = [
    "ImageRef",
    "check_role_arn",
    "parse_image_tag",
    "role_account",
    "runtime_name_for",
]

log = logging.getLogger(__name__)

_REPO = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*\Z")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_ECR_HOST = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?\Z"
)
_ROLE_ARN = re.compile(r"^arn:aws(-[^:]+)?:iam::(?P<account>[0-9]{12})?:role/.+\Z")
_RUNTIME_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,47}\Z")


@dataclass(frozen=True)
class ImageRef:
    """An image in an ECR registry: ``ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG``."""

    account: str
    region: str
    repository: str
    tag: str

    @property
    def registry(self) -> str:
        """The registry host."""
        suffix = ".amazonaws.com.cn" if self.region.startswith("cn-") else ".amazonaws.com"
        return f"{self.account}.dkr.ecr.{self.region}{suffix}"

    @property
    def uri(self) -> str:
        """The full image URI the runtime pulls (``containerUri``)."""
        return f"{self.registry}/{self.repository}:{self.tag}"


def parse_image_tag(value: str, *, account: str | None, region: str | None) -> ImageRef:
    """The ECR image for ``--image-tag``.

    ``value`` is ``REPO[:TAG]`` (the registry is ``account`` in ``region``) or a full ECR URI
    ``ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO[:TAG]``, whose account and region win. The tag
    defaults to ``latest``. A digest (``@sha256:…``) is refused: a push needs a tag.
    """
    text = value.strip()
    if not text or "@" in text:
        raise ConfigError(
            f"--image-tag {value!r}: expected REPOSITORY[:TAG] or "
            f"ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY[:TAG] (no digest)"
        )
    host, _, rest = text.partition("/")
    match = _ECR_HOST.match(host) if rest else None
    if match:
        account, region, text = match["account"], match["region"], rest
    elif rest and ("." in host or ":" in host):
        raise ConfigError(
            f"--image-tag {value!r}: {host!r} is not an ECR registry; AgentCore Runtime pulls "
            f"from ECR, so give REPOSITORY[:TAG] or an ECR URI"
        )
    repository, _, tag = text.partition(":")
    tag = tag or "latest"
    if not _REPO.match(repository) or not 2 <= len(repository) <= 256:
        raise ConfigError(
            f"--image-tag {value!r}: repository {repository!r} must be 2-256 lowercase letters, "
            f"digits and . _ - / separators (ECR's rule)"
        )
    if not _TAG.match(tag):
        raise ConfigError(
            f"--image-tag {value!r}: tag {tag!r} must match [A-Za-z0-9_][A-Za-z0-9_.-]*"
        )
    if not account:
        raise ConfigError(
            f"--image-tag {value!r}: no AWS account for the registry; give a full ECR URI "
            f"or a --role-arn that names its account"
        )
    if not region:
        raise ConfigError(
            "no AWS region: pass --region, set AWS_REGION, or give a full ECR URI in --image-tag"
        )
    return ImageRef(account=account, region=region, repository=repository, tag=tag)


def check_role_arn(value: str) -> str:
    """``value`` if it is an IAM role ARN, else a :class:`ConfigError` naming ``--role-arn``."""
    if not _ROLE_ARN.match(value):
        raise ConfigError(
            f"--role-arn {value!r} is not an IAM role ARN; expected "
            f"arn:aws:iam::<12-digit account>:role/<name> (the runtime's execution role)"
        )
    return value


def role_account(role_arn: str) -> str | None:
    """The account named in a role ARN (None when the ARN leaves it out)."""
    match = _ROLE_ARN.match(role_arn)
    return match["account"] if match and match["account"] else None


def runtime_name_for(repository: str, explicit: str | None = None) -> str:
    """The runtime name: ``explicit`` checked, or one derived from the repository name.

    AgentCore runtime names are a letter followed by letters, digits and ``_`` (48 at most),
    so ``team/my-agent`` becomes ``my_agent``.
    """
    if explicit is not None:
        if not _RUNTIME_NAME.match(explicit):
            raise ConfigError(
                f"--runtime-name {explicit!r}: must be a letter followed by up to 47 letters, "
                f"digits or underscores (AgentCore's rule)"
            )
        return explicit
    base = re.sub(r"[^A-Za-z0-9_]", "_", repository.rsplit("/", 1)[-1])
    base = re.sub(r"_+", "_", base).strip("_")
    if not base or not base[0].isalpha():
        base = f"rt_{base}".rstrip("_")
    return base[:48]
