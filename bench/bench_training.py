"""The training loop's own cost: a no-op trainer over a no-op agent.

    .venv/bin/python bench/bench_training.py --steps 40 --batch-groups 8 --samples 4
    .venv/bin/python bench/bench_training.py --steps 40 --batch-groups 8 --samples 4 --staleness 1

Local workers run a trivial agent, no token capture; the trainer answers each step at once.
What is left is the loop: schedule, advantages, metrics (``metrics.jsonl``), the
training-step hook, checkpoints every 10 steps, and the wait between steps that on-policy
training imposes (the next step's groups start only after the previous step published).
Reports steps/s, episodes/s and the hub process's CPU per episode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _noop_plugin() -> Any:
    """A plugin registering a trainer that answers each step at once."""
    from rollhub import hookimpl
    from rollhub.trainer import StepResult, Trainer

    class NoopTrainer(Trainer):
        name = "noop"
        trains = True

        async def step(self, batch: Any) -> Any:
            return StepResult(batch.weight_version + 1, {"loss": 0.0})

    class Plugin:
        @hookimpl
        def rollhub_register_components(self, registry: Any) -> None:
            registry.add_trainer(NoopTrainer)

    return Plugin()


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from rollhub.testing import make_hub
    from rollhub.training.loop import TrainingLoop

    tmp = Path(tempfile.mkdtemp(prefix="rollhub-bench-train-"))
    cfg = {
        "experiment": {"name": "bench-train", "n_samples": args.samples, "concurrency": 64,
                       "progress": False, "max_staleness": args.staleness},
        "runtime": {"name": "local", "workers": args.workers,
                    "app": str(ROOT / "tests/core/pipeline/agents/echo_agent.py") + ":app"},
        "store": {"url": f"file://{tmp / 'store'}"},
        "trainer": {"name": "noop"},
        "training": {"batch_groups": args.batch_groups, "steps": args.steps,
                     "checkpoint_every": 10},
    }
    payloads = [{"id": f"p{i}"} for i in range(args.steps * args.batch_groups)]
    async with make_hub(cfg, _noop_plugin(), run_dir=tmp / "run") as hub:
        t0, c0 = time.perf_counter(), _cpu()
        summary = await TrainingLoop(hub, payloads, run_dir=tmp / "run", progress=False).run()
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
    episodes = summary["steps"] * args.batch_groups * args.samples
    return {
        "steps": summary["steps"], "episodes": episodes, "staleness": args.staleness,
        "wall_s": round(wall, 2), "steps_per_s": round(summary["steps"] / wall, 2),
        "episodes_per_s": round(episodes / wall, 1),
        "hub_cpu_ms_per_episode": round(cpu / episodes * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-groups", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--staleness", type=int, default=0)
    print(json.dumps(asyncio.run(_run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
