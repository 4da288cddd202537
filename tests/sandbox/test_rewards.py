"""Sandbox rewards: the pure outcome → score mapping, and the hook's edge cases."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rollhub.config import RollhubConfig
from rollhub.episode import Episode
from rollhub.errors import ConfigError, RewardError
from rollhub_sandbox import AsyncSandboxClient
from rollhub_sandbox.result import ExecResult
from rollhub_sandbox.rewards import (
    TestCounts,
    load_settings,
    parse_pytest_summary,
    restore_plan,
    rollhub_collect_rewards,
    score_tests,
)


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        ("===== 3 passed in 0.12s =====", TestCounts(passed=3)),
        ("3 passed, 1 failed in 1.00s", TestCounts(passed=3, failed=1)),
        ("== 1 failed, 2 passed, 1 skipped, 2 errors, 3 warnings in 0.5s ==",
         TestCounts(passed=2, failed=1, errors=2, skipped=1)),
        ("1 error in 0.01s", TestCounts(errors=1)),
        ("2 passed, 1 xfailed, 1 xpassed, 4 deselected in 0.2s",
         TestCounts(passed=2, xfailed=1, xpassed=1)),
        ("line\n=== 9 passed in 1s ===\nother\n=== 1 failed, 1 passed in 2.5s ===\n",
         TestCounts(passed=1, failed=1)),
        ("no tests ran in 0.01s", None),
        ("I passed 3 exams", None),
        ("", None),
    ],
)
def test_parse_pytest_summary(output: str, counts: TestCounts | None) -> None:
    assert parse_pytest_summary(output) == counts


def _res(code: int, stdout: str = "", timed_out: bool = False) -> ExecResult:
    return ExecResult(exit_code=code, stdout=stdout, timed_out=timed_out)


@pytest.mark.parametrize(
    ("result", "fraction", "binary"),
    [
        (_res(0, "5 passed in 0.1s"), 1.0, 1.0),
        (_res(1, "3 passed, 2 failed in 0.1s"), 0.6, 0.0),
        (_res(1, "1 passed, 1 failed, 2 errors in 0.1s"), 0.25, 0.0),
        (_res(0, "2 passed, 3 skipped in 0.1s"), 1.0, 1.0),
        (_res(0, "ok"), 1.0, 1.0),  # not pytest: exit status decides
        (_res(1, "ok"), 0.0, 0.0),
        (_res(1, "3 passed, 2 failed in 0.1s\n5 passed in 0.1s"), 0.0, 0.0),  # disagrees
        (_res(2, "1 error in 0.1s"), 0.0, 0.0),  # collection broke: the agent's code is broken
        (_res(0, "3 skipped in 0.1s"), 0.0, 1.0),  # nothing ran: no evidence of passing
        (_res(-9, "4 passed in 0.1s", timed_out=True), 0.0, 0.0),
    ],
)
def test_score_tests(result: ExecResult, fraction: float, binary: float) -> None:
    assert score_tests(result, "fraction") == pytest.approx(fraction)
    assert score_tests(result, "binary") == binary


def test_only_a_broken_configuration_is_a_reward_error() -> None:
    # RewardError ends the episode infra_error (never trained): only for what no agent can
    # cause. A command the shell cannot find (checked outside the test process) is one...
    for code in (126, 127):
        with pytest.raises(RewardError, match="could not be run"):
            score_tests(_res(code), "binary", command_found=False)
        assert score_tests(_res(code), "binary") == 0.0  # found: the agent's code exited so
    # ... restored tests that collect nothing are another.
    with pytest.raises(RewardError, match="collected nothing"):
        score_tests(_res(5), "fraction", report=TestCounts(), pytest=True)


@pytest.mark.parametrize(
    ("result", "report", "fraction", "binary"),
    [
        (_res(1), TestCounts(passed=3, failed=2), 0.6, 0.0),
        (_res(0), TestCounts(passed=5, skipped=1), 1.0, 1.0),
        (_res(0), TestCounts(passed=3, failed=2), 0.0, 0.0),  # exit and report disagree
        (_res(1), TestCounts(passed=5), 0.0, 0.0),
        (_res(0), TestCounts(skipped=2), 0.0, 0.0),  # nothing ran
        (_res(2), TestCounts(errors=1), 0.0, 0.0),  # interrupted (collection error)
        (_res(0, "5 passed in 0.1s"), None, 0.0, 0.0),  # pytest wrote no report: it was cut short
        (_res(4, "ERROR: file or directory not found"), None, 0.0, 0.0),
    ],
)
def test_pytest_runs_are_scored_from_the_report(result, report, fraction, binary) -> None:
    assert score_tests(result, "fraction", report=report, pytest=True) == pytest.approx(fraction)
    assert score_tests(result, "binary", report=report, pytest=True) == binary


def test_parse_junit_report() -> None:
    from rollhub_sandbox.rewards import parse_junit_report

    xml = (b'<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="1" '
           b'failures="2" skipped="1" tests="7"/></testsuites>')
    assert parse_junit_report(xml) == TestCounts(passed=3, failed=2, errors=1, skipped=1)
    for bad in (b"", b"<html/>", b'<testsuite tests="x"/>', b'<testsuite tests="1" failures="3"/>'):
        assert parse_junit_report(bad) is None


async def test_a_missing_test_command_is_a_reward_error(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    sb = await AsyncSandboxClient("local", root=root).create(ttl=60)
    hub = _hub(test_command="no-such-runner-xyz -q", options={"root": root})
    with pytest.raises(RewardError, match="could not be run"):
        await rollhub_collect_rewards(episode=_episode({"sandbox_id": sb.id}), hub=hub)


def test_python_placeholder_is_filled_for_the_local_provider_only() -> None:
    import sys

    from rollhub_sandbox.rewards import expand_test_command

    assert expand_test_command("{python} -m pytest -q", "local").startswith(sys.executable)
    assert expand_test_command("pytest -q", "docker") == "pytest -q"
    with pytest.raises(ConfigError, match="only the local provider"):
        expand_test_command("{python} -m pytest", "agentcore")


def test_settings_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"plugins\.sandbox\.reward"):
        load_settings({"reward": "sometimes"})
    with pytest.raises(ConfigError, match=r"plugins\.sandbox\.tset_command") as err:
        load_settings({"tset_command": "pytest"})
    assert "did you mean 'test_command'?" in str(err.value)  # as the core's sections say
    assert err.value.field == "plugins.sandbox.tset_command"
    assert load_settings({}).test_command is None


def test_restore_plan_fills_plain_payload_fields(tmp_path: Path) -> None:
    plan = restore_plan({"tests": "repos/{repo}/tests"}, {"repo": "stats", "n": 3},
                        lambda p: tmp_path / p)
    assert plan == [("tests", tmp_path / "repos/stats/tests")]
    with pytest.raises(RewardError, match="repo"):
        restore_plan({"tests": "repos/{repo}/tests"}, {"repo": "../../etc"})
    with pytest.raises(RewardError, match="missing"):
        restore_plan({"tests": "{missing}"}, {"repo": "x"})


def _hub(**settings: Any) -> SimpleNamespace:
    return SimpleNamespace(config=RollhubConfig(plugins={"sandbox": settings}))


def _episode(result: dict[str, Any] | None, status: str = "ok") -> Episode:
    return Episode(episode_id="e", group_id="g", session_id="s", sample_index=0,
                   status=status, payload={"id": "p"}, result=result)  # type: ignore[arg-type]


def test_hook_declines_without_a_test_command_or_a_good_episode() -> None:
    assert rollhub_collect_rewards(episode=_episode({"sandbox_id": "x"}), hub=_hub()) is None
    hub = _hub(test_command="true")
    assert rollhub_collect_rewards(episode=_episode(None, "agent_error"), hub=hub) is None
    assert rollhub_collect_rewards(episode=_episode({"a": 1}, "timeout"), hub=hub) is None


def test_missing_sandbox_id_policy() -> None:
    ep = _episode({"answer": 1})
    assert rollhub_collect_rewards(episode=ep, hub=_hub(test_command="true")) == {"tests": 0.0}
    assert rollhub_collect_rewards(episode=ep, hub=_hub(test_command="true",
                                                        on_missing="skip")) is None
    with pytest.raises(RewardError, match="sandbox_id"):
        rollhub_collect_rewards(episode=ep, hub=_hub(test_command="true", on_missing="error"))


async def test_hook_runs_tests_in_the_sandbox(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    sb = await AsyncSandboxClient("local", root=root).create(ttl=60)
    await sb.write_file("check.sh", "test -f marker && echo '1 passed in 0.01s' || "
                                    "{ echo '1 failed in 0.01s'; exit 1; }")
    hub = _hub(test_command="sh check.sh", options={"root": root}, name="unit", destroy=False)
    ep = _episode({"sandbox_id": sb.id})
    assert await rollhub_collect_rewards(episode=ep, hub=hub) == {"unit": 0.0}
    await sb.write_file("marker", b"")
    assert await rollhub_collect_rewards(episode=ep, hub=hub) == {"unit": 1.0}
    assert ep.metrics["sandbox_tests"]["passed"] == 1
    await sb.destroy()
    with pytest.raises(RewardError, match=sb.id):  # the sandbox is gone: machinery failed
        await rollhub_collect_rewards(episode=ep, hub=hub)


async def test_timeout_scores_zero(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    sb = await AsyncSandboxClient("local", root=root).create(ttl=60)
    hub = _hub(test_command="echo '1 passed in 0.1s'; sleep 30", timeout=0.5,
               options={"root": root, "kill_grace": 0.2})
    assert await rollhub_collect_rewards(episode=_episode({"sandbox_id": sb.id}), hub=hub) == \
        {"tests": 0.0}


async def test_hook_through_the_plugin_manager_beside_the_core_default(tmp_path: Path) -> None:
    from rollhub.plugin_host.hook_calls import call_all
    from rollhub.plugins import build_host
    from rollhub_sandbox import plugin

    host = build_host(entry_points=False, plugins=[plugin])
    root = str(tmp_path / "root")
    sb = await AsyncSandboxClient("local", root=root).create(ttl=60)
    hub = _hub(test_command="echo '2 passed, 2 failed in 0.1s'; exit 1", options={"root": root})
    ep = _episode({"sandbox_id": sb.id, "rewards": 0.5})
    parts = await call_all(host.hook.rollhub_collect_rewards, episode=ep, hub=hub)
    assert {"tests": 0.5} in parts and {"result": 0.5} in parts


async def test_reward_client_follows_a_changed_sandbox_root(tmp_path, monkeypatch) -> None:
    # One process, two roots one after the other (two hubs, a notebook): each sandbox must
    # be found under the root it was created in.
    from rollhub_sandbox import AsyncSandboxClient
    from rollhub_sandbox.rewards import rollhub_collect_rewards

    hub = SimpleNamespace(config=RollhubConfig.model_validate(
        {"plugins": {"sandbox": {"test_command": "true", "reward": "binary"}}}
    ))
    for name in ("a", "b"):
        monkeypatch.setenv("ROLLHUB_SANDBOX_ROOT", str(tmp_path / name))
        sb = await AsyncSandboxClient("local").create(None, ttl=60)
        episode = Episode(episode_id="e", group_id="g", session_id="e", sample_index=0,
                          status="ok", result={"sandbox_id": sb.id})
        assert await rollhub_collect_rewards(episode, hub) == {"tests": 1.0}
