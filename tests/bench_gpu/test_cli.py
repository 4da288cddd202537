"""``bench/gpu/run.py``'s arguments, plan, budget and main, with the machine faked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gpucheck import checks, cli
from gpucheck.machine import Probe
from gpucheck.report import Result

from tests.bench_gpu import BENCH_GPU

NAMES = ["gateway-vs-vllm", "trl-grpo-vllm", "verl-grpo-step"]
H200 = Probe(cuda=True, gpu_name="NVIDIA H200", gpu_count=1, free_gib=139.0,
             packages={"vllm": "0.24.0", "trl": "1.16.0", "verl": "0.9.1"})  # fmt: skip


@pytest.fixture
def no_processes(monkeypatch):
    """Starting any process (a server, pip, a check) fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)


def test_unknown_check_name_is_an_error_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--only", "vllm"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown check 'vllm'" in err and "gateway-vs-vllm, trl-grpo-vllm, verl-grpo-step" in err
    with pytest.raises(SystemExit):
        cli.main(["--skip", "verl"])


def test_only_and_skip_select_in_the_fixed_order():
    assert cli.select([], []) == NAMES
    assert cli.select(["verl-grpo-step", "gateway-vs-vllm"], []) == [
        "gateway-vs-vllm",
        "verl-grpo-step",
    ]
    assert cli.select([], ["trl-grpo-vllm"]) == ["gateway-vs-vllm", "verl-grpo-step"]
    assert cli.select(["trl-grpo-vllm"], ["trl-grpo-vllm"]) == []


def test_nothing_selected_exits_2(no_processes, capsys):
    assert cli.main(["--only", "trl-grpo-vllm", "--skip", "trl-grpo-vllm"]) == 2


def test_list_prints_every_check_with_its_estimate(no_processes, capsys):
    assert cli.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == NAMES
    assert all("~" in line and " s " in line for line in lines)


def test_dry_run_prints_install_and_check_commands_and_starts_nothing(
    no_processes, capsys, tmp_path
):
    assert cli.main(["--dry-run", "--only", "verl-grpo-step", "--venv-dir", str(tmp_path / "v"),
                     "--work-dir", str(tmp_path / "w")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"-m venv {tmp_path / 'v'}" in out
    assert f"install -r {BENCH_GPU / 'requirements-gpu.txt'}" in out
    assert "rollhub_verl.launch" in out and "prepare_data.py --synthetic 256" in out
    assert "vllm.entrypoints" not in out and "vllm-serve" not in out  # only the one check
    assert not (tmp_path / "w").exists() and not (tmp_path / "v").exists()


def test_dry_run_without_install_comments_the_install_out(no_processes, capsys, tmp_path):
    cli.main(["--dry-run", "--no-install", "--skip", "verl-grpo-step",
              "--work-dir", str(tmp_path / "w")])  # fmt: skip
    out = capsys.readouterr().out
    install = [line for line in out.splitlines() if "pip" in line]
    assert install and all(line.startswith("# ") for line in install)
    assert "vllm.entrypoints.openai.api_server" in out and "vllm-serve" in out


def test_without_cuda_everything_skips_nothing_is_installed_and_it_warns(
    no_processes, monkeypatch, capsys, tmp_path
):
    monkeypatch.setattr(cli, "probe", lambda python: Probe())
    report = tmp_path / "out" / "results.json"
    code = cli.main(["--work-dir", str(tmp_path / "w"), "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("| SKIP | — | — | no CUDA device |") == 3
    assert "WARNING: every check was skipped" in out
    saved = json.loads(report.read_text())
    assert [r["check"] for r in saved["results"]] == NAMES
    assert {r["status"] for r in saved["results"]} == {"skip"}


def test_no_install_with_vllm_missing_skips_with_that_reason(
    no_processes, monkeypatch, capsys, tmp_path
):
    facts = Probe(cuda=True, gpu_name="NVIDIA H200", gpu_count=1, free_gib=139.0,
                  packages={"vllm": None, "trl": "1.16.0", "verl": None})  # fmt: skip
    monkeypatch.setattr(cli, "probe", lambda python: facts)
    assert cli.main(["--no-install", "--only", "gateway-vs-vllm", "--work-dir", str(tmp_path)]) == 0
    assert "| gateway-vs-vllm | SKIP | — | — | vLLM not installed |" in capsys.readouterr().out


def test_a_failed_install_fails_every_selected_check(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "probe", lambda python: H200)
    monkeypatch.setattr(cli, "_install", lambda ctx: "install failed: pip install -r x")
    code = cli.main(["--skip", "trl-grpo-vllm", "--work-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and out.count("| FAIL |") == 2 and "install failed" in out


def test_checks_past_the_budget_are_skipped_and_each_gets_the_deadline(tmp_path):
    now = [1000.0]
    seen = []

    def runner(name, ctx, deadline):
        seen.append((name, deadline))
        now[0] += 400  # the first check takes 400 s of the 600
        return Result(name, "pass", 400)

    ctx = checks.Context(venv=tmp_path, work=tmp_path, gpu_count=2)
    results = cli.run_checks(NAMES, H200.__class__(**{**H200.__dict__, "gpu_count": 2}), ctx,
                             budget_s=600, will_install=False, clock=lambda: now[0],
                             runner=runner)  # fmt: skip
    assert seen == [("gateway-vs-vllm", 1600.0)]
    assert [r.status for r in results] == ["pass", "skip", "skip"]
    assert results[1].detail.startswith("budget: 200 s left")
    assert results[2].detail.startswith("budget: 200 s left")


def test_one_gpu_skips_trl_but_runs_the_others_within_the_budget(tmp_path):
    ran = []

    def runner(name, ctx, deadline):
        ran.append(name)
        return Result(name, "fail" if name == "verl-grpo-step" else "pass")

    ctx = checks.Context(venv=tmp_path, work=tmp_path)
    results = cli.run_checks(NAMES, H200, ctx, budget_s=600, will_install=False, runner=runner)
    assert ran == ["gateway-vs-vllm", "verl-grpo-step"]
    assert [r.status for r in results] == ["pass", "skip", "fail"]


def test_run_py_runs_with_the_standard_library_only(tmp_path):
    # -S -I: no site-packages, no user paths; the script must still list its checks
    done = subprocess.run([sys.executable, "-S", "-I", str(BENCH_GPU / "run.py"), "--list"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == NAMES
