"""Sandbox rewards: run the task's tests in the episode's sandbox and score the outcome.

Configured in ``rollhub.toml``::

    [plugins.sandbox]
    test_command = "python -m pytest -q tests"
    reward = "fraction"            # or "binary"
    timeout = 300
    provider = "local"             # where the agent's sandboxes live
    options = { root = "/tmp/rollhub-sandboxes" }

The agent returns its sandbox id in its result (``{"sandbox_id": sb.id, ...}``); this hook
attaches to that sandbox, runs ``test_command`` there and returns ``{"tests": score}``.
Without ``test_command`` the hook does nothing. A failed rollout (any status but ``ok``) is
left to the core's failure policy. A sandbox that cannot be reached is a
:class:`~rollhub.errors.RewardError`: the machinery failed, not the agent.

The mapping from a command's outcome to a score is pure (:func:`score_tests`,
:func:`parse_pytest_summary`) and tested on its own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rollhub import hookimpl
from rollhub.errors import ConfigError, RewardError

from rollhub_sandbox.errors import SandboxError
from rollhub_sandbox.result import ExecResult

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig
    from rollhub.episode import Episode
    from rollhub.hubs.view import HubView

    from rollhub_sandbox.client import AsyncSandboxClient

log = logging.getLogger(__name__)

__all__ = [
    "SandboxRewardSettings",
    "TestCounts",
    "expand_test_command",
    "parse_pytest_summary",
    "restore_plan",
    "rollhub_check_config",
    "rollhub_collect_rewards",
    "run_tests",
    "score_tests",
]


class SandboxRewardSettings(BaseModel):
    """``[plugins.sandbox]`` in rollhub.toml."""

    model_config = ConfigDict(extra="forbid")

    test_command: str | None = Field(
        None,
        description="shell command that runs the task's tests; '{python}' is replaced by the "
        "interpreter running rollhub (local provider), so pytest is found without relying on PATH",
    )
    reward: Literal["fraction", "binary"] = Field(
        "fraction", description="'fraction': passed / run (pytest summary); 'binary': exit 0 → 1"
    )
    name: str = Field("tests", description="reward component name")
    timeout: float = Field(600.0, gt=0, description="seconds the tests may run")
    cwd: str | None = Field(None, description="directory to run in (default: the workspace)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment")
    provider: str = Field("local", description="sandbox provider the agent used")
    options: dict[str, Any] = Field(default_factory=dict, description="that provider's options")
    sandbox_id_field: str = Field("sandbox_id", description="result key holding the sandbox id")
    on_missing: Literal["zero", "skip", "error"] = Field(
        "zero", description="an ok result without a sandbox id: score 0, no component, or error"
    )
    destroy: bool = Field(True, description="destroy the sandbox after scoring")
    restore: dict[str, str] = Field(
        default_factory=dict,
        description="remote dir -> local dir (relative to rollhub.toml, '{field}' filled from the "
        "payload) put back before the tests run, so editing the tests cannot earn reward",
    )


@dataclass(frozen=True)
class TestCounts:
    """Outcome counts from a pytest summary line."""

    __test__ = False  # not a pytest test class

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    xfailed: int = 0
    xpassed: int = 0

    @property
    def ran(self) -> int:
        """Tests that count towards the score: passed, failed and errored."""
        return self.passed + self.failed + self.errors


_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)")
_SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b.* in [\d.]+s")


def parse_pytest_summary(output: str) -> TestCounts | None:
    """Counts from the last pytest summary line in ``output`` (``N passed, M failed in …s``).

    >>> parse_pytest_summary("...\\n===== 3 passed, 1 failed, 2 errors in 0.12s =====\\n")
    TestCounts(passed=3, failed=1, errors=2, skipped=0, xfailed=0, xpassed=0)
    >>> parse_pytest_summary("no tests here") is None
    True
    """
    for line in reversed(output.splitlines()):
        if not _SUMMARY.search(line):
            continue
        counts: dict[str, int] = {}
        for num, word in _COUNT.findall(line):
            key = {"error": "errors", "warning": "warnings"}.get(word, word)
            counts[key] = counts.get(key, 0) + int(num)
        return TestCounts(**{k: v for k, v in counts.items() if k in TestCounts.__dataclass_fields__})
    return None


#: exit codes of a command the shell could not run at all (not executable, not found)
_SHELL_FAILED = (126, 127)
#: pytest exit codes that mean the suite did not run: internal error, usage error, no tests
_PYTEST_DID_NOT_RUN = (3, 4, 5)


def score_tests(result: ExecResult, mode: Literal["fraction", "binary"] = "fraction") -> float:
    """Score one test run in [0, 1].

    - a timeout scores 0 (the agent's code hung the tests);
    - ``binary``: 1 when the command exited 0, else 0;
    - ``fraction``: passed / (passed + failed + errors) from the pytest summary, or 1 for a
      clean exit without a summary.

    A test command that did not run the tests is not a score of 0, which would teach the
    policy that every answer is wrong: it raises :class:`RewardError` — the shell could
    not run the command (exit 126/127), pytest reported an internal or usage error or
    collected nothing, or (``fraction``) a failing exit came without a pytest summary.
    """
    if result.timed_out:
        return 0.0
    output = f"{result.stdout}\n{result.stderr}"
    tail = output.strip()[-300:]
    if result.exit_code in _SHELL_FAILED:
        raise RewardError(
            f"the test command could not be run (exit {result.exit_code}); check "
            f"plugins.sandbox.test_command. Output: {tail!r}",
            field="plugins.sandbox.test_command",
        )
    counts = parse_pytest_summary(result.stdout) or parse_pytest_summary(result.stderr)
    if counts is None and (result.exit_code in _PYTEST_DID_NOT_RUN or "no tests ran" in output):
        raise RewardError(
            f"the tests did not run (exit {result.exit_code}); check "
            f"plugins.sandbox.test_command and cwd. Output: {tail!r}",
            field="plugins.sandbox.test_command",
        )
    if mode == "binary":
        return 1.0 if result.exit_code == 0 else 0.0
    if counts is not None:
        # a summary where nothing ran (all skipped) is no evidence of passing
        return counts.passed / counts.ran if counts.ran > 0 else 0.0
    if result.exit_code == 0:
        return 1.0
    raise RewardError(
        f"the test command exited {result.exit_code} without a pytest summary, so the "
        f"fraction passed is unknown; use reward = 'binary' for other test runners. "
        f"Output: {tail!r}",
        field="plugins.sandbox.reward",
    )


def expand_test_command(command: str, provider: str) -> str:
    """Fill ``{python}`` with this interpreter (local provider only; it runs on this host)."""
    if "{python}" not in command:
        return command
    if provider != "local":
        raise ConfigError(
            "plugins.sandbox.test_command uses {python}, which only the local provider can "
            "fill; name the sandbox image's interpreter instead",
            field="plugins.sandbox.test_command",
        )
    return command.replace("{python}", shlex.quote(sys.executable))


def load_settings(plugin_settings: Mapping[str, Any]) -> SandboxRewardSettings:
    """Validate ``[plugins.sandbox]``; errors name the field and the fix."""
    try:
        return SandboxRewardSettings(**dict(plugin_settings))
    except ValidationError as exc:
        problems = "; ".join(
            f"plugins.sandbox.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid [plugins.sandbox] settings: {problems}",
                          field="plugins.sandbox") from exc


_CLIENTS: dict[str, AsyncSandboxClient] = {}


def _client_for(settings: SandboxRewardSettings) -> AsyncSandboxClient:
    from rollhub_sandbox.client import AsyncSandboxClient

    # The environment is part of the key: a provider may read defaults from it (the local
    # provider's ROLLHUB_SANDBOX_ROOT), and a process may change it between hubs.
    env = {k: v for k, v in os.environ.items() if k.startswith("ROLLHUB_SANDBOX")}
    key = json.dumps([settings.provider, settings.options, env], sort_keys=True, default=str)
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = AsyncSandboxClient(settings.provider, **settings.options)
    return client


def restore_plan(restore: Mapping[str, str], payload: Mapping[str, Any],
                 resolve: Callable[[str], str | os.PathLike[str]] = Path,
                 ) -> list[tuple[str, Path]]:
    """``(remote dir, local dir)`` pairs with ``{field}`` filled from the payload (pure).

    :raises RewardError: a placeholder names a field the payload lacks, or a value that is
        not a plain name (it could point anywhere).
    """
    plan: list[tuple[str, Path]] = []
    for remote, local in restore.items():
        # Only plain names fill placeholders: a value like "../x" could point anywhere.
        fields = {k: v for k, v in payload.items()
                  if isinstance(v, str | int) and _PLAIN.fullmatch(str(v))}
        try:
            filled = local.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise RewardError(
                f"plugins.sandbox.restore[{remote!r}] = {local!r}: cannot fill {exc} from the "
                f"payload; use fields the payload has, with plain names as values",
                field="plugins.sandbox.restore",
            ) from exc
        plan.append((remote, Path(resolve(filled))))
    return plan


async def run_tests(settings: SandboxRewardSettings, sandbox_id: str,
                    restore: Sequence[tuple[str, Path]] = ()) -> ExecResult:
    """Attach to ``sandbox_id``, put back ``restore`` dirs, run the test command, destroy.

    :raises RewardError: the sandbox could not be reached or the command not started.
    """
    assert settings.test_command is not None
    try:
        sandbox = await _client_for(settings).attach(sandbox_id)
        try:
            for remote, local in restore:
                if not local.is_dir():
                    raise RewardError(f"plugins.sandbox.restore: {str(local)!r} is not a directory",
                                      field="plugins.sandbox.restore")
                await sandbox.exec(f"rm -rf -- {shlex.quote(remote)}")
                await sandbox.upload(local, remote)
            command = expand_test_command(settings.test_command, settings.provider)
            return await sandbox.exec(command, cwd=settings.cwd, env=settings.env,
                                      timeout=settings.timeout)
        finally:
            if settings.destroy:
                await sandbox.destroy()
    except SandboxError as exc:
        raise RewardError(f"sandbox tests could not run in {sandbox_id!r}: {exc}",
                          sandbox_id=sandbox_id) from exc


async def _score(episode: Episode, settings: SandboxRewardSettings, sandbox_id: str,
                 restore: list[tuple[str, Path]]) -> dict[str, float]:
    result = await run_tests(settings, sandbox_id, restore)
    score = score_tests(result, settings.reward)
    counts = parse_pytest_summary(result.stdout)
    episode.metrics["sandbox_tests"] = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "duration": result.duration,
        "passed": counts.passed if counts else None,
        "failed": counts.failed if counts else None,
        "errors": counts.errors if counts else None,
    }
    log.debug("sandbox %s tests: exit %s, score %.3f", sandbox_id, result.exit_code, score)
    return {settings.name: score}


@hookimpl
def rollhub_check_config(config: RollhubConfig) -> None:
    """Validate ``[plugins.sandbox]`` before any rollout runs."""
    settings = load_settings(config.plugins.settings("sandbox"))
    if settings.test_command is not None:
        expand_test_command(settings.test_command, settings.provider)


@hookimpl
def rollhub_collect_rewards(episode: Episode, hub: HubView) -> Awaitable[dict[str, float]] | dict[str, float] | None:
    """Run ``[plugins.sandbox] test_command`` in the episode's sandbox; see the module doc."""
    settings = load_settings(hub.config.plugins.settings("sandbox"))
    if settings.test_command is None or not episode.ok or episode.result is None:
        return None
    sandbox_id = episode.result.get(settings.sandbox_id_field)
    if not isinstance(sandbox_id, str) or not sandbox_id:
        if settings.on_missing == "error":
            raise RewardError(
                f"the result of episode {episode.episode_id!r} has no "
                f"{settings.sandbox_id_field!r}; return the sandbox id from the agent",
                episode_id=episode.episode_id,
            )
        return {settings.name: 0.0} if settings.on_missing == "zero" else None
    plan = restore_plan(settings.restore, episode.payload, hub.config.path)
    return _score(episode, settings, sandbox_id, plan)
