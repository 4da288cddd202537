"""Errors of ``rollhub deploy`` and the mapping of AWS and container-tool failures onto them.

``DeployError`` is a :class:`rollhub.errors.RollhubError` (the CLI exits 1 with one line).
Bad input is a :class:`rollhub.errors.ConfigError` and a missing tool or file a
:class:`rollhub.errors.UsageError` (both exit 2). botocore's ``ClientError`` is mapped at
the boundary by :func:`aws_error`; an access-denied answer names the IAM action the caller
lacks, because that is the one fix the user needs.
"""

from __future__ import annotations

import logging

from rollhub.errors import RollhubError

__all__ = ["IAM_ACTIONS", "DeployError", "aws_error"]

log = logging.getLogger(__name__)

#: (service, operation) -> the IAM actions the caller needs for it.
IAM_ACTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("ecr", "DescribeRepositories"): ("ecr:DescribeRepositories",),
    ("ecr", "CreateRepository"): ("ecr:CreateRepository",),
    ("ecr", "GetAuthorizationToken"): ("ecr:GetAuthorizationToken",),
    ("bedrock-agentcore-control", "ListAgentRuntimes"): ("bedrock-agentcore:ListAgentRuntimes",),
    ("bedrock-agentcore-control", "GetAgentRuntime"): ("bedrock-agentcore:GetAgentRuntime",),
    ("bedrock-agentcore-control", "CreateAgentRuntime"): (
        "bedrock-agentcore:CreateAgentRuntime",
        "bedrock-agentcore:CreateWorkloadIdentity",
        "iam:PassRole",
    ),
    ("bedrock-agentcore-control", "UpdateAgentRuntime"): (
        "bedrock-agentcore:UpdateAgentRuntime",
        "iam:PassRole",
    ),
    ("sts", "GetCallerIdentity"): (),
}

#: what a container push needs on the repository.
ECR_PUSH_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:PutImage",
)

_DENIED = frozenset({"AccessDeniedException", "AccessDenied", "UnauthorizedOperation"})
_TRANSIENT = frozenset(
    {"ThrottlingException", "InternalServerException", "ServerException", "ServiceUnavailable"}
)


class DeployError(RollhubError):
    """A deployment step failed: an AWS call, the container tool, or the runtime's status.

    Context: ``step`` (what was being done), and where known ``operation`` (the AWS
    operation), ``code`` (the AWS error code), ``permissions`` (IAM actions the caller
    lacks), ``transient`` (whether a retry may succeed).
    """

    def __init__(
        self,
        message: str = "",
        *,
        step: str = "",
        operation: str | None = None,
        code: str | None = None,
        permissions: tuple[str, ...] = (),
        transient: bool = False,
        **context: object,
    ) -> None:
        super().__init__(
            message,
            step=step,
            operation=operation,
            code=code,
            permissions=tuple(permissions),
            transient=transient,
            **context,
        )


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) or type(exc).__name__


def _error_message(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Message", "")) or str(exc)


def aws_error(
    exc: BaseException, service: str, operation: str, *, resource: str = ""
) -> DeployError:
    """The :class:`DeployError` for a failed AWS call (use with ``raise … from exc``).

    :param exc: the botocore exception (``ClientError``, ``BotoCoreError`` or ``NoCredentialsError``).
    :param service: the botocore service name, e.g. ``"ecr"``.
    :param operation: the operation name as in the service model, e.g. ``"CreateRepository"``.
    :param resource: what the call was about (a repository, a role ARN), for the message.
    """
    code = _error_code(exc)
    where = f"{service} {operation}" + (f" ({resource})" if resource else "")
    if code in _DENIED:
        actions = IAM_ACTIONS.get((service, operation), ())
        need = ", ".join(actions) if actions else f"{service}:{operation}"
        hint = ""
        if "iam:PassRole" in actions:
            hint = " (iam:PassRole on the runtime role given with --role-arn)"
        return DeployError(
            f"access denied on {where}: the AWS identity running rollhub deploy needs "
            f"{need}{hint}; AWS said: {_error_message(exc)}",
            step=operation,
            operation=operation,
            code=code,
            permissions=actions or (f"{service}:{operation}",),
        )
    if type(exc).__name__ in {"NoCredentialsError", "PartialCredentialsError"}:
        return DeployError(
            f"{where}: no AWS credentials found; configure them (aws configure, AWS_PROFILE "
            f"or --profile) or use --dry-run to see the plan without AWS",
            step=operation,
            operation=operation,
            code=code,
        )
    return DeployError(
        f"{where} failed: {code}: {_error_message(exc)}",
        step=operation,
        operation=operation,
        code=code,
        transient=code in _TRANSIENT,
    )
