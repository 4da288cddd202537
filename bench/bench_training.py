"""The training loop's own cost, and what bounded staleness wins back.

    .venv/bin/python bench/bench_training.py --steps 40 --batch-groups 8 --samples 4
    .venv/bin/python bench/bench_training.py --steps 40 --batch-groups 8 --samples 4 --staleness 1
    .venv/bin/python bench/bench_training.py --steps 12 --sample-s 2 --train-s 2 --staleness 1

With ``--sample-s S --train-s T`` every rollout takes S seconds (the agent waits, as a
scripted engine would) and every training step T seconds: on-policy a step costs S + T;
with ``--staleness 1`` step s+1 samples while step s trains, so a step should cost about
max(S, T). The report gives the mean step (after the first) against max(S, T) and the sampler's and the
trainer's idle fractions, as a real run's metrics.jsonl has them.

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
import statistics
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


def _noop_plugin(train_s: float = 0.0) -> Any:
    """A plugin registering a trainer that answers each step after ``train_s`` seconds."""
    from rollhub import hookimpl
    from rollhub.training import StepResult, Trainer

    class NoopTrainer(Trainer):
        name = "noop"
        trains = True

        async def step(self, batch: Any) -> Any:
            if train_s:
                await asyncio.sleep(train_s)
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
                    "app": str(ROOT / "tests/core/training/agents/policy_agent.py") + ":app"},
        "store": {"url": f"file://{tmp / 'store'}"},
        "trainer": {"name": "noop"},
        "training": {"batch_groups": args.batch_groups, "steps": args.steps,
                     "checkpoint_every": 10},
    }
    payloads = [{"id": f"p{i}", "delay": args.sample_s}
                for i in range(args.steps * args.batch_groups)]
    async with make_hub(cfg, _noop_plugin(args.train_s), run_dir=tmp / "run") as hub:
        t0, c0 = time.perf_counter(), _cpu()
        summary = await TrainingLoop(hub, payloads, run_dir=tmp / "run", progress=False).run()
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
    episodes = summary["steps"] * args.batch_groups * args.samples
    rows = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    steady = rows[1:] or rows  # the first step has nothing to overlap with
    bound = max(args.sample_s, args.train_s)
    step_s = statistics.mean(r["time_step_s"] for r in steady)
    return {
        "sample_s": args.sample_s, "train_s": args.train_s,
        "mean_step_s": round(step_s, 3),
        "step_over_max_s_t": round(step_s / bound, 3) if bound else None,
        "sampler_idle_frac": round(statistics.mean(r["sampler_idle_frac"] for r in steady), 3),
        "trainer_idle_frac": round(statistics.mean(r["trainer_idle_frac"] for r in steady), 3),
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
    parser.add_argument("--sample-s", type=float, default=0.0, help="seconds per rollout")
    parser.add_argument("--train-s", type=float, default=0.0, help="seconds per training step")
    print(json.dumps(asyncio.run(_run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
