"""Image references, runtime names and role ARNs: checked before anything runs."""

from __future__ import annotations

import pytest
from rollhub.deploy.names import (
    check_role_arn,
    parse_image_tag,
    role_account,
    runtime_name_for,
)
from rollhub.errors import ConfigError

from tests.core.deploy.stubbed_aws import ACCOUNT, REGION, ROLE


def test_short_tag_uses_the_role_account_and_region() -> None:
    ref = parse_image_tag("team/my-agent:v1", account=ACCOUNT, region=REGION)
    assert ref.uri == f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/team/my-agent:v1"
    assert parse_image_tag("my-agent", account=ACCOUNT, region=REGION).tag == "latest"


def test_full_ecr_uri_wins_and_china_regions_use_their_domain() -> None:
    ref = parse_image_tag(
        "210987654321.dkr.ecr.eu-west-1.amazonaws.com/agent:2", account=ACCOUNT, region=None
    )
    assert (ref.account, ref.region, ref.repository, ref.tag) == (
        "210987654321", "eu-west-1", "agent", "2",
    )  # fmt: skip
    cn = parse_image_tag("agent:1", account=ACCOUNT, region="cn-north-1")
    assert cn.registry.endswith(".amazonaws.com.cn")


@pytest.mark.parametrize(
    ("value", "account", "region", "match"),
    [
        ("My-Agent:v1", ACCOUNT, REGION, "lowercase"),
        ("agent:bad tag", ACCOUNT, REGION, "tag"),
        ("agent@sha256:abc", ACCOUNT, REGION, "no digest"),
        ("docker.io/library/agent:1", ACCOUNT, REGION, "not an ECR registry"),
        ("agent:1", None, REGION, "no AWS account"),
        ("agent:1", ACCOUNT, None, "no AWS region"),
    ],
)
def test_bad_image_tags_name_the_flag(value, account, region, match) -> None:
    with pytest.raises(ConfigError, match=match) as ei:
        parse_image_tag(value, account=account, region=region)
    assert "--image-tag" in str(ei.value) or "region" in str(ei.value)


def test_role_arn() -> None:
    assert check_role_arn(ROLE) == ROLE and role_account(ROLE) == ACCOUNT
    assert role_account("arn:aws:iam:::role/x") is None
    with pytest.raises(ConfigError, match="--role-arn"):
        check_role_arn("arn:aws:iam::123:user/bob")


def test_runtime_names() -> None:
    assert runtime_name_for("team/my-agent.v2") == "my_agent_v2"
    assert runtime_name_for("9lives") == "rt_9lives"
    assert len(runtime_name_for("a" * 80)) == 48
    assert runtime_name_for("x", "Explicit_1") == "Explicit_1"
    with pytest.raises(ConfigError, match="--runtime-name"):
        runtime_name_for("x", "has-dash")
