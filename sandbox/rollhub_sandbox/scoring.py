"""From a test run's outcome to a score (pure): pytest reports, summaries, and who is to blame.

The test process runs the agent's code, so everything it prints or returns is the agent's
to forge or break. The rules follow from that:

- pytest runs are scored from the JUnit XML report pytest writes at the end of the session
  (:func:`parse_junit_report`), and the report must agree with the exit status (exit 0
  without failures, exit 1 with some); a disagreement, a missing report or another exit
  status scores 0. Printed summaries are not trusted for pytest runs.
- a run the agent's code broke (it crashed or killed pytest, or exited early) scores 0:
  raising would turn the agent's failure into ``infra_error``, which is never trained, so
  an agent would learn to break the run rather than fail it.
- :class:`~rollhub.errors.RewardError` (the scorer failed, not the agent) is kept for
  what no agent can cause: a test command the shell cannot find (checked outside the test
  process by the caller) and restored tests that collect nothing.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Literal

from rollhub.errors import RewardError

from rollhub_sandbox.result import ExecResult

log = logging.getLogger(__name__)

__all__ = ["SHELL_FAILED", "TestCounts", "parse_junit_report", "parse_pytest_summary", "score_tests"]

#: exit codes of a command the shell could not run at all (not executable, not found)
SHELL_FAILED = (126, 127)
#: pytest's "no tests were collected"
_NO_TESTS = 5


@dataclass(frozen=True)
class TestCounts:
    """Outcome counts from a pytest summary line or report."""

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


def parse_junit_report(data: bytes) -> TestCounts | None:
    """Counts from a pytest ``--junitxml`` report; None when it is not one.

    >>> parse_junit_report(b'<testsuites><testsuite tests="4" failures="1" errors="0" '
    ...                    b'skipped="1"/></testsuites>')
    TestCounts(passed=2, failed=1, errors=0, skipped=1, xfailed=0, xpassed=0)
    """
    try:
        root = ET.fromstring(data)
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        if root.tag not in ("testsuite", "testsuites") or not suites:
            return None
        totals = [sum(int(s.get(key, "0")) for s in suites)
                  for key in ("tests", "failures", "errors", "skipped")]
    except (ET.ParseError, ValueError):
        return None
    tests, failed, errors, skipped = totals
    passed = tests - failed - errors - skipped
    if min(passed, failed, errors, skipped) < 0:
        return None
    return TestCounts(passed=passed, failed=failed, errors=errors, skipped=skipped)


def _agrees(exit_code: int, counts: TestCounts) -> bool:
    """Whether the exit status tells the same story as the counts (pytest's exit codes)."""
    if exit_code == 0:
        return counts.failed + counts.errors == 0
    if exit_code == 1:
        return counts.failed + counts.errors > 0
    return False


def score_tests(result: ExecResult, mode: Literal["fraction", "binary"] = "fraction", *,
                report: TestCounts | None = None, pytest: bool = False,
                command_found: bool = True) -> float:
    """Score one test run in [0, 1].

    :param report: counts from pytest's report file (see :func:`parse_junit_report`).
    :param pytest: the command runs pytest, so a report was expected: a run without one (the
        agent's code crashed or ended pytest) scores 0, whatever the exit status.
    :param command_found: False when the caller found that the shell cannot find the test
        command at all (checked outside the test process).

    - a timeout scores 0 (the agent's code hung the tests);
    - exit 126/127 is a :class:`RewardError` when the command is not found, else 0;
    - with a report: 0 unless the exit status agrees with it; ``binary`` 1 when every test
      that ran passed (and one did), ``fraction`` passed / (passed + failed + errors); a
      report of no tests collected (exit 5) is a :class:`RewardError` (the restored tests
      or the command are wrong, not the agent);
    - without one, for other runners: ``binary`` 1 for exit 0; ``fraction`` from the last
      pytest-style summary line if it agrees with the exit status, 1 for a clean exit
      without one, else 0.
    """
    if result.timed_out:
        return 0.0
    tail = f"{result.stdout}\n{result.stderr}".strip()[-300:]
    if result.exit_code in SHELL_FAILED and not command_found:
        raise RewardError(
            f"the test command could not be run (exit {result.exit_code}); check "
            f"plugins.sandbox.test_command. Output: {tail!r}",
            field="plugins.sandbox.test_command",
        )
    if report is not None:
        if result.exit_code == _NO_TESTS and report.ran + report.skipped == 0:
            raise RewardError(
                f"the restored tests collected nothing (exit 5); check plugins.sandbox."
                f"test_command, cwd and restore. Output: {tail!r}",
                field="plugins.sandbox.test_command",
            )
        if not _agrees(result.exit_code, report) or report.ran == 0:
            log.warning("test run scored 0: exit %s with report %s. Output: %r",
                        result.exit_code, report, tail)
            return 0.0
        if mode == "binary":
            return 1.0 if report.passed == report.ran else 0.0
        return report.passed / report.ran
    if pytest or result.exit_code in SHELL_FAILED:
        log.warning("test run scored 0: exit %s without a pytest report (the tested code "
                    "ended the run, or the command is broken). Output: %r",
                    result.exit_code, tail)
        return 0.0
    if mode == "binary":
        return 1.0 if result.exit_code == 0 else 0.0
    counts = parse_pytest_summary(result.stdout) or parse_pytest_summary(result.stderr)
    if counts is not None:
        # a summary where nothing ran (all skipped) is no evidence of passing
        agrees = _agrees(result.exit_code, counts) and counts.ran > 0
        return counts.passed / counts.ran if agrees else 0.0
    return 1.0 if result.exit_code == 0 else 0.0
