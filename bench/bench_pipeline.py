"""Pipeline throughput and overhead: the embedded default and a no-op agent.

    .venv/bin/python bench/bench_pipeline.py noop --prompts 100 --samples 4
    .venv/bin/python bench/bench_pipeline.py embedded --prompts 4 --samples 4

``noop``: a trivial agent on the local runtime, no token capture, the export trainer —
episodes/s and the hub process's own CPU time per episode (the pipeline's overhead: request
building, hooks, client, store reads, rewards, export rows).

``embedded``: ``examples/math/rollouts.toml`` as the README's main job runs it (local
workers, in-process gateway, SmolLM2-135M on the CPU) — episodes/s and sampled tokens/s.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _run(cfg, payloads, run_dir):
    from rollhub.hubs.async_hub import AsyncHub

    episodes = []
    async with AsyncHub(cfg, run_dir=run_dir) as hub:
        t0, c0 = time.perf_counter(), _cpu()
        async for group in hub.iter_groups(payloads):
            episodes.extend(group.episodes)
            await hub.trainer.consume(group)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
    return episodes, wall, cpu


def bench_noop(prompts: int, samples: int, workers: int, concurrency: int) -> dict:
    from rollhub.config import parse_config

    tmp = Path(tempfile.mkdtemp(prefix="rollhub-bench-"))
    cfg = parse_config(
        {
            "experiment": {"name": "bench", "n_samples": samples, "concurrency": concurrency,
                           "progress": False},
            "runtime": {"name": "local", "workers": workers,
                        "app": str(ROOT / "tests/core/pipeline/agents/echo_agent.py") + ":app"},
            "store": {"url": f"file://{tmp / 'store'}"},
        },
        env={},
    )
    payloads = [{"id": f"p{i:05d}"} for i in range(prompts)]
    episodes, wall, cpu = asyncio.run(_run(cfg, payloads, tmp / "run"))
    n = len(episodes)
    ok = sum(e.ok for e in episodes)
    return {"mode": "noop", "episodes": n, "ok": ok, "wall_s": round(wall, 2),
            "episodes_per_s": round(n / wall, 1),
            "hub_cpu_ms_per_episode": round(cpu / n * 1000, 2),
            "workers": workers, "concurrency": concurrency}


def bench_embedded(prompts: int, samples: int) -> dict:
    from rollhub.config import load_config

    cfg = load_config(ROOT / "examples/math/rollouts.toml")
    cfg.experiment.n_samples = samples
    from rollhub.dataset import load_jsonl_dataset

    payloads = load_jsonl_dataset(cfg.path(cfg.experiment.dataset), limit=prompts)
    tmp = Path(tempfile.mkdtemp(prefix="rollhub-bench-"))
    episodes, wall, _ = asyncio.run(_run(cfg, payloads, tmp / "run"))
    tokens = sum(e.num_sampled_tokens for e in episodes)
    return {"mode": "embedded", "episodes": len(episodes), "ok": sum(e.ok for e in episodes),
            "wall_s": round(wall, 1), "episodes_per_s": round(len(episodes) / wall, 3),
            "sampled_tokens": tokens, "tokens_per_s": round(tokens / wall, 1),
            "mean_turns": round(sum(e.num_turns for e in episodes) / max(1, len(episodes)), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["noop", "embedded"])
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    if args.mode == "noop":
        out = bench_noop(args.prompts, args.samples, args.workers, args.concurrency)
    else:
        out = bench_embedded(args.prompts, args.samples)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
