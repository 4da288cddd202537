"""Three checks of rollhub on one CUDA machine, then one Markdown table of pass/fail/skip.

    python3 bench/gpu/run.py                 # install (first time), then all three checks
    python3 bench/gpu/run.py --dry-run       # the install and check commands; runs nothing
    python3 bench/gpu/run.py --list | --only NAME | --skip NAME | --no-install | --json PATH

1. ``gateway-vs-vllm``: ids and logprobs the gateway records equal vLLM's own (greedy).
2. ``trl-grpo-vllm``: one TRL GRPO step through ``rollhub run``, TRL's vLLM server sampling
   behind the gateway (needs 2 GPUs: TRL's NCCL weight sync refuses one shared device).
3. ``verl-grpo-step``: one verl GRPO step through the rollhub agent loop.

The checks run in ``--budget-s`` seconds (600). Before them, the check environment
(``.venvs/gpu``, from ``bench/gpu/requirements-gpu.txt``) is installed or brought up to date:
that needs access to the package registry and takes several minutes more, outside the
budget. This script itself needs only the standard library. Exit code 0 unless a check
failed. See docs/gpu-checks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpucheck.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
