"""What the machine has (:class:`Probe`), and whether a check can run on it (:func:`skip_reason`).

The skip logic is pure: it takes probed facts, so tests feed it facts. :func:`probe` reads the
real machine: ``nvidia-smi`` for the GPUs, and the check environment's interpreter for the
installed versions of vLLM, TRL and verl (none when that environment does not exist yet).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CHECKS", "CheckSpec", "Probe", "probe", "skip_reason"]


@dataclass(frozen=True)
class CheckSpec:
    """A check's name, what it needs, and how long it is expected to take."""

    name: str
    summary: str
    estimate_s: float
    packages: tuple[str, ...]
    min_gpus: int = 1
    min_free_gib: float = 10.0


#: the checks, in the order they run; estimates are guesses until a GPU run measures them
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(
        "gateway-vs-vllm",
        "the gateway's recorded ids/logprobs equal vLLM's own, greedy",
        estimate_s=150,
        packages=("vllm",),
    ),
    CheckSpec(
        "trl-grpo-vllm",
        "one TRL GRPO step, TRL's vLLM server sampling behind the gateway",
        estimate_s=240,
        packages=("vllm", "trl"),
        min_gpus=2,
    ),
    CheckSpec(
        "verl-grpo-step",
        "one verl GRPO step through the rollhub agent loop",
        estimate_s=330,
        packages=("vllm", "verl"),
        min_free_gib=40.0,
    ),
)


@dataclass
class Probe:
    """Facts about the machine; a package's version is None when it is not installed."""

    cuda: bool = False
    gpu_name: str | None = None
    gpu_count: int = 0
    free_gib: float = 0.0
    packages: dict[str, str | None] = field(default_factory=dict)

    def version(self, name: str) -> str | None:
        return self.packages.get(name)


def skip_reason(
    spec: CheckSpec,
    facts: Probe,
    *,
    will_install: bool,
    remaining_s: float | None = None,
    one_gpu_trl: bool = False,
) -> str | None:
    """Why ``spec`` cannot run on a machine with ``facts`` (None: it can).

    :param will_install: the packages are installed before the checks run, so a missing
        one is no reason to skip.
    :param remaining_s: seconds left of the run's budget (None: not limited).
    :param one_gpu_trl: run ``trl-grpo-vllm`` on one GPU anyway.
    """
    if not facts.cuda:
        return "no CUDA device"
    if not will_install:
        for package in spec.packages:
            if facts.version(package) is None:
                label = {"vllm": "vLLM", "trl": "TRL"}.get(package, package)
                return f"{label} not installed"
    gpus_needed = 1 if (one_gpu_trl and spec.name == "trl-grpo-vllm") else spec.min_gpus
    if facts.gpu_count < gpus_needed:
        return (
            f"needs {gpus_needed} GPUs, {facts.gpu_count} found: TRL's server mode joins the "
            "trainer and vLLM in one NCCL group, which refuses two ranks on one device "
            "(--one-gpu-trl tries anyway)"
        )
    if facts.free_gib < spec.min_free_gib:
        return f"needs {spec.min_free_gib:.0f} GiB free GPU memory, {facts.free_gib:.1f} free"
    if remaining_s is not None and remaining_s < spec.estimate_s:
        return f"budget: {remaining_s:.0f} s left, the check takes about {spec.estimate_s:.0f} s"
    return None


_VERSIONS = """
import json, importlib.metadata as md
out = {}
for name in ("vllm", "trl", "verl", "torch", "transformers"):
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def package_versions(python: Path) -> dict[str, str | None]:
    """Versions of the check packages in ``python``'s environment (all None when it is absent)."""
    empty: dict[str, str | None] = dict.fromkeys(("vllm", "trl", "verl", "torch", "transformers"))
    if not python.exists():
        return empty
    try:
        done = subprocess.run(
            [str(python), "-c", _VERSIONS], capture_output=True, text=True, timeout=60
        )
        return {**empty, **json.loads(done.stdout)} if done.returncode == 0 else empty
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return empty


def parse_nvidia_smi(text: str) -> tuple[str | None, int, float]:
    """``(first GPU's name, GPU count, free GiB of the emptiest GPU)`` from
    ``nvidia-smi --query-gpu=name,memory.free --format=csv,noheader,nounits`` (MiB)."""
    names, free = [], []
    for line in text.strip().splitlines():
        name, _, mib = line.rpartition(",")
        try:
            free.append(float(mib) / 1024)
        except ValueError:
            continue
        names.append(name.strip())
    return (names[0] if names else None), len(names), max(free, default=0.0)


def probe(python: Path) -> Probe:
    """The real machine; ``python`` is the check environment's interpreter."""
    facts = Probe(packages=package_versions(python))
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return facts
    try:
        done = subprocess.run(
            [smi, "--query-gpu=name,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return facts
    if done.returncode == 0:
        facts.gpu_name, facts.gpu_count, facts.free_gib = parse_nvidia_smi(done.stdout)
        facts.cuda = facts.gpu_count > 0
    return facts
