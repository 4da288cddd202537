"""The results table, figure formatting and the exit code."""

from __future__ import annotations

import pytest
from gpucheck.report import Result, exit_code, format_figure, render_table, summary_line


def test_table_has_one_row_per_result_with_status_figures_and_detail():
    results = [
        Result("gateway-vs-vllm", "pass", 83.4,
               {"prompts": 4, "tokens": 180, "id_mismatches": 0, "max_abs_dlogprob": 0.0},
               "ids equal"),
        Result("trl-grpo-vllm", "skip", 0.0, {}, "needs 2 GPUs, 1 found"),
        Result("verl-grpo-step", "fail", 301.0, {"step_s": 41.92, "pg_loss": None},
               "exit 1: a|b\nc"),
    ]  # fmt: skip
    lines = render_table(results).splitlines()
    assert lines[0] == "| check | status | seconds | figures | detail |"
    assert len(lines) == 2 + 3
    assert lines[2] == (
        "| gateway-vs-vllm | PASS | 83 | prompts=4; tokens=180; id_mismatches=0; "
        "max_abs_dlogprob=0 | ids equal |"
    )
    assert lines[3] == "| trl-grpo-vllm | SKIP | — | — | needs 2 GPUs, 1 found |"
    # a pipe in the detail must not open a new column, a newline not a new row
    assert lines[4] == "| verl-grpo-step | FAIL | 301 | step_s=41.92; pg_loss=— | exit 1: a\\|b c |"


def test_figures_are_formatted_for_reading():
    assert format_figure(3.0e-6) == "3.00e-06"
    assert format_figure(0.123456) == "0.1235"
    assert format_figure(1234.5678) == "1235"
    assert format_figure(0.0) == "0"
    assert format_figure(float("nan")) == "nan"
    assert format_figure(None) == "—"
    assert format_figure(True) == "yes"
    assert format_figure(7) == "7"


def test_exit_code_is_1_only_when_something_failed():
    ok, skip, bad = Result("a", "pass"), Result("b", "skip"), Result("c", "fail")
    assert exit_code([ok, skip]) == 0
    assert exit_code([skip, skip]) == 0
    assert exit_code([ok, bad, skip]) == 1


def test_summary_warns_when_everything_was_skipped():
    assert (
        summary_line([Result("a", "pass"), Result("b", "skip")]) == "1 passed, 0 failed, 1 skipped"
    )
    assert "WARNING: every check was skipped" in summary_line([Result("a", "skip")])
    assert "WARNING" not in summary_line([Result("a", "fail")])


def test_a_status_outside_pass_fail_skip_is_refused():
    with pytest.raises(ValueError, match="status"):
        Result("a", "passed")
