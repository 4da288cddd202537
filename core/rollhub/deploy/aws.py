"""Every AWS request of a deployment goes through one :class:`AwsCalls`.

It prints each request (service, operation, parameters) before sending it, so a real run
and a ``--dry-run`` show the same plan. In a dry run nothing is sent: the parameters are
checked against botocore's service model (the same validation a real call gets) and a
planned answer stands in for the response. boto3 is imported only when a real call is
made, so ``rollhub deploy … --dry-run`` works without AWS credentials or network.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rollhub.deploy.errors import aws_error
from rollhub.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from boto3.session import Session
    from botocore.client import BaseClient

__all__ = ["AwsCalls", "error_code"]

log = logging.getLogger(__name__)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (empty for other exceptions)."""
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


class AwsCalls:
    """Sends (or, in a dry run, only shows) the AWS requests of one deployment.

    :param region: the region every client uses.
    :param profile: an AWS profile name (default: the usual credential chain).
    :param clients: ready boto3 clients by service name (custom sessions, tests).
    :param dry_run: print and validate requests, send nothing.
    :param out: where the plan is printed (default ``print``).
    """

    def __init__(
        self,
        *,
        region: str,
        profile: str | None = None,
        clients: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        out: Callable[[str], None] = print,
    ) -> None:
        self.region = region
        self.profile = profile
        self.dry_run = dry_run
        self.out = out
        self._clients: dict[str, Any] = dict(clients or {})
        self._session: Session | None = None

    def client(self, service: str) -> BaseClient:
        """The boto3 client of ``service`` (created on first use)."""
        if service not in self._clients:
            self._clients[service] = self._session_().client(service, region_name=self.region)
        return self._clients[service]

    def _session_(self) -> Session:
        if self._session is None:
            try:
                import boto3
            except ImportError as exc:
                raise UsageError(
                    "rollhub deploy needs boto3 for AWS calls: pip install 'rollhub[agentcore]'"
                ) from exc
            try:
                self._session = boto3.session.Session(
                    profile_name=self.profile, region_name=self.region
                )
            except Exception as exc:  # botocore's ProfileNotFound and friends
                raise ConfigError(f"--profile {self.profile!r}: {exc}") from exc
        return self._session

    def call(
        self,
        service: str,
        operation: str,
        params: dict[str, Any],
        *,
        planned: dict[str, Any] | None = None,
        ok_codes: frozenset[str] = frozenset(),
        resource: str = "",
        show: bool = True,
    ) -> Any:
        """Send ``operation`` (its service-model name, e.g. ``"CreateRepository"``).

        :param planned: what a dry run returns in place of the response.
        :param ok_codes: error codes that are an answer, not a failure: the call returns None.
        :param resource: what the call is about, for error messages.
        :param show: print the request (polling calls print once, not per poll).
        :raises DeployError: any other service error, mapped by :func:`aws_error`.
        """
        if show:
            self.out(f"  -> {service} {operation} {json.dumps(params, sort_keys=True)}")
        if self.dry_run:
            self._validate(service, operation, params)
            return planned
        from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

        client = self.client(service)
        method = getattr(client, _snake(operation))
        try:
            return method(**params)
        except ParamValidationError as exc:
            raise _invalid(service, operation, str(exc)) from exc
        except ClientError as exc:
            if error_code(exc) in ok_codes:
                return None
            raise aws_error(exc, service, operation, resource=resource) from exc
        except BotoCoreError as exc:
            raise aws_error(exc, service, operation, resource=resource) from exc

    def _validate(self, service: str, operation: str, params: dict[str, Any]) -> None:
        """Check ``params`` against botocore's model, as a real call would (skip without it)."""
        try:
            import botocore.session
            from botocore.validate import ParamValidator
        except ImportError:  # pragma: no cover - botocore comes with the agentcore extra
            log.debug("botocore not installed: dry-run requests are not validated")
            return
        model = botocore.session.get_session().get_service_model(service)
        shape = model.operation_model(operation).input_shape
        report = ParamValidator().validate(params, shape)
        if report.has_errors():
            raise _invalid(service, operation, report.generate_report())


def _invalid(service: str, operation: str, report: str) -> ConfigError:
    """A request botocore's model refuses: the values came from the flags, so it is bad input."""
    flat = " ".join(report.split())
    return ConfigError(
        f"{service} {operation} request is invalid (check the flags that set these values): {flat}",
        operation=operation,
    )


def _snake(operation: str) -> str:
    """``CreateAgentRuntime`` -> ``create_agent_runtime`` (botocore's method names)."""
    from botocore import xform_name

    return xform_name(operation)
