"""Typed errors of rollhub.

The tree::

    RollhubError
    ├── ConfigError (+ValueError)            bad rollhub.toml, env override or component options
    ├── PluginError
    │   ├── PluginLoadError                  an installed plugin failed to import
    │   └── UnknownComponentError (+LookupError)  config names a component nobody registered
    ├── RolloutFailed                        the machinery around one rollout failed
    │   ├── SubmissionError                  the runtime refused or could not take the rollout
    │   ├── TokenRetrievalError              traces could not be read from the token source
    │   │   └── CaptureLost                  the capture session went with the infrastructure
    │   ├── RewardError                      a reward could not be computed (infra_error)
    │   │   └── AgentRewardError             the agent's result holds a bad reward (agent_error)
    │   ├── RolloutTimeout (+TimeoutError)   no result within the deadline
    │   └── SessionError                     a rollout session's setup, run or teardown failed
    ├── ClusterLost                          the runtime's cluster is gone (its head died)
    ├── StoreError                           a result store could not read or write
    ├── ExportError                          episodes could not be written to an export file
    ├── GatewayError                         the token-capture gateway failed
    └── UsageError (+RuntimeError)           the API was used the wrong way

An agent's own failure is *data* (an error result, an episode with status ``agent_error``),
never one of these exceptions. Every error keeps its context in keyword-only attributes and
stays picklable, because Ray and worker processes send them across process boundaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "AgentRewardError",
    "CaptureLost",
    "ClusterLost",
    "ConfigError",
    "ExportError",
    "GatewayError",
    "PluginError",
    "PluginLoadError",
    "RewardError",
    "RollhubError",
    "RolloutFailed",
    "RolloutTimeout",
    "SessionError",
    "StoreError",
    "SubmissionError",
    "TokenRetrievalError",
    "UnknownComponentError",
    "UsageError",
]


class RollhubError(Exception):
    """Base class of every error rollhub raises on purpose."""

    def __init__(self, message: str = "", **context: object) -> None:
        super().__init__(message)
        self.message = message
        #: the keyword context, also set as attributes (each subclass says which it takes)
        self.context: dict[str, Any] = context
        for key, value in context.items():
            setattr(self, key, value)

    def __reduce__(
        self,
    ) -> tuple[Callable[..., RollhubError], tuple[type[RollhubError], str, dict[str, object]]]:
        return (_rebuild, (type(self), self.message, self.context))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[RollhubError], message: str, context: dict[str, object]) -> RollhubError:
    return cls(message, **context)


class ConfigError(RollhubError, ValueError):
    """The configuration is invalid; the message names the field, the value and the fix."""

    #: the dotted config field at fault, when one is (set from the ``field=`` context)
    field: str | None


class PluginError(RollhubError):
    """A plugin could not be loaded or a component could not be found."""


class PluginLoadError(PluginError):
    """An installed plugin failed to import. Context: ``plugin``, ``distribution``, ``error``."""

    plugin: str
    distribution: str | None
    error: str


class UnknownComponentError(PluginError, LookupError):
    """Config picks a component nobody registered. Context: ``kind``, ``name``, ``installed``."""


class RolloutFailed(RollhubError):
    """The machinery around one rollout failed (not the agent itself)."""


class SubmissionError(RolloutFailed):
    """The runtime refused the rollout. ``transient`` says whether a retry may succeed."""

    transient: bool

    def __init__(self, message: str = "", *, transient: bool = False, **context: object) -> None:
        super().__init__(message, transient=transient, **context)


class TokenRetrievalError(RolloutFailed):
    """The token source could not return the session's traces."""


class CaptureLost(TokenRetrievalError):
    """A rollout's token-capture session was lost to an infrastructure fault: the gateway
    replica holding it died, came back without it, or cannot be reached. The hub runs the
    rollout again on a new session (``[experiment] session_attempts``) and, when none is
    left, ends it ``infra_error``. Context: ``session_id`` and whatever the source adds."""


class RewardError(RolloutFailed):
    """A reward could not be computed: a reward hook failed (a judge that timed out, a
    sandbox that is gone, a bug) or returned something that is not a finite number. The
    agent did its part, so its episode ends ``infra_error``: never trained, never given an
    imputed reward."""


class AgentRewardError(RewardError):
    """The agent's own result holds a reward that is not one (``rewards`` empty, not a
    number, not finite): the agent's failure, so its episode ends ``agent_error`` and
    ``[rewards] on_failure`` applies to it."""


class RolloutTimeout(RolloutFailed, TimeoutError):
    """No terminal result arrived before the deadline."""


class SessionError(RolloutFailed):
    """A rollout session failed outside the agent: its ``phase`` (``setup``, ``run`` or
    ``shutdown``) and whether a new session may succeed (``transient``: the container did
    not start, the transport broke)."""

    phase: str
    transient: bool

    def __init__(
        self, message: str = "", *, phase: str = "run", transient: bool = False, **context: object
    ) -> None:
        super().__init__(message, phase=phase, transient=transient, **context)


class ClusterLost(RollhubError):
    """The runtime's cluster is gone (the Ray head stopped answering): nothing more can
    run, so the run stops instead of ending every rollout failed. A training run continues
    from its last checkpoint with ``rollhub run --resume RUN_DIR`` once a cluster is up.
    Context: ``address``."""


class StoreError(RollhubError):
    """A result store failed to read or write (I/O, permissions, the S3 service)."""


class ExportError(RollhubError):
    """Episodes could not be written to an export file (full disk…). Context: ``path``."""


class GatewayError(RollhubError):
    """The token-capture gateway failed (engine error, bad session, protocol error)."""


class UsageError(RollhubError, RuntimeError):
    """The API was used the wrong way, e.g. a sync method called inside a running loop."""


for _cls in [v for v in list(globals().values()) if isinstance(v, type)]:
    if issubclass(_cls, RollhubError):
        _cls.__module__ = "rollhub"
