"""Skip logic from probed facts, and reading the machine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gpucheck import machine
from gpucheck.machine import CHECKS, Probe, parse_nvidia_smi, skip_reason

SPEC = {s.name: s for s in CHECKS}
ALL = {"vllm": "0.24.0", "trl": "1.16.0", "verl": "0.9.1"}


def h200(**kw) -> Probe:
    facts = dict(cuda=True, gpu_name="NVIDIA H200", gpu_count=1, free_gib=139.0, packages=ALL)
    return Probe(**{**facts, **kw})


def test_without_cuda_every_check_skips():
    for spec in CHECKS:
        assert skip_reason(spec, Probe(), will_install=True) == "no CUDA device"
        assert skip_reason(spec, Probe(packages=ALL), will_install=False) == "no CUDA device"


def test_missing_packages_skip_only_when_nothing_will_be_installed():
    facts = h200(packages={"vllm": None, "trl": "1.16.0", "verl": "0.9.1"})
    assert skip_reason(SPEC["gateway-vs-vllm"], facts, will_install=False) == "vLLM not installed"
    assert skip_reason(SPEC["verl-grpo-step"], facts, will_install=False) == "vLLM not installed"
    assert skip_reason(SPEC["gateway-vs-vllm"], facts, will_install=True) is None
    no_verl = h200(packages={**ALL, "verl": None})
    assert skip_reason(SPEC["verl-grpo-step"], no_verl, will_install=False) == "verl not installed"
    assert skip_reason(SPEC["gateway-vs-vllm"], no_verl, will_install=False) is None


def test_one_gpu_runs_the_gateway_and_verl_checks_but_not_trl_server_mode():
    facts = h200()
    assert skip_reason(SPEC["gateway-vs-vllm"], facts, will_install=False) is None
    assert skip_reason(SPEC["verl-grpo-step"], facts, will_install=False) is None
    reason = skip_reason(SPEC["trl-grpo-vllm"], facts, will_install=False)
    assert reason is not None and reason.startswith("needs 2 GPUs, 1 found") and "NCCL" in reason
    assert skip_reason(SPEC["trl-grpo-vllm"], facts, will_install=False, one_gpu_trl=True) is None
    assert skip_reason(SPEC["trl-grpo-vllm"], h200(gpu_count=2), will_install=False) is None


def test_too_little_free_memory_skips():
    reason = skip_reason(SPEC["verl-grpo-step"], h200(free_gib=12.5), will_install=False)
    assert reason == "needs 40 GiB free GPU memory, 12.5 free"
    assert skip_reason(SPEC["gateway-vs-vllm"], h200(free_gib=12.5), will_install=False) is None


def test_a_check_longer_than_the_remaining_budget_skips():
    spec = SPEC["gateway-vs-vllm"]
    reason = skip_reason(spec, h200(), will_install=False, remaining_s=spec.estimate_s - 1)
    assert reason is not None and reason.startswith("budget:")
    assert skip_reason(spec, h200(), will_install=False, remaining_s=spec.estimate_s) is None


def test_nvidia_smi_output_is_read_for_name_count_and_the_freest_gpu():
    out = "NVIDIA H200, 140000\nNVIDIA H200, 2048\n"
    name, count, free = parse_nvidia_smi(out)
    assert (name, count) == ("NVIDIA H200", 2) and free == pytest.approx(140000 / 1024)
    assert parse_nvidia_smi("") == (None, 0, 0.0)
    assert parse_nvidia_smi("No devices were found\n") == (None, 0, 0.0)


def test_probe_without_nvidia_smi_has_no_cuda(monkeypatch, tmp_path):
    monkeypatch.setattr(machine.shutil, "which", lambda name: None)
    facts = machine.probe(tmp_path / "missing" / "bin" / "python")
    assert facts.cuda is False and facts.gpu_count == 0
    assert facts.packages["vllm"] is None and facts.packages["verl"] is None


def test_package_versions_are_read_from_the_given_interpreter():
    versions = machine.package_versions(Path(sys.executable))
    from importlib.metadata import version

    assert versions["trl"] == version("trl")  # the test environment has TRL, not vLLM
    assert set(versions) >= {"vllm", "trl", "verl"}
