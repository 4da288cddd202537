"""Where a step of the main job's wall time goes.

    .venv/bin/python bench/bench_train_step.py --steps 4

Runs ``examples/math/train.toml`` (the calculator agent, the in-process gateway and engine,
the ``torch`` trainer) for a few steps and splits each step into: the engine's forward
passes (prefills and decoding steps, from the engine's own clock), the trainer's compute,
the copy of the new weights for the engine, and the rest (agents, HTTP, the gateway's
rendering and parsing, the hub, the loop, and the engine's idle gaps between turns).
Prints one JSON row per step and the totals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from rollhub import hookimpl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Breakdown:
    """A plugin that reads the engine's clock at every step."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._busy = 0.0

    def engine_busy(self, hub: Any) -> float:
        return float(hub.token_source.gateway.backend.engine.stats["busy_s"])

    @hookimpl
    def rollhub_training_step(self, step: int, metrics: dict[str, Any], hub: Any) -> None:
        busy = self.engine_busy(hub)
        engine, self._busy = busy - self._busy, busy
        wall = metrics["time_step_s"]
        compute, publish = metrics.get("time_compute_s", 0.0), metrics.get("time_publish_s", 0.0)
        rest = max(0.0, wall - engine - compute - publish)
        self.rows.append({
            "step": step + 1, "wall_s": round(wall, 2), "engine_s": round(engine, 2),
            "trainer_s": round(compute, 2), "publish_s": round(publish, 3),
            "rest_s": round(rest, 2), "rest_frac": round(rest / wall, 3),
            "sampled_tokens": metrics["sampled_tokens"], "success": metrics["success_rate"],
        })
        print(json.dumps(self.rows[-1]), flush=True)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from rollhub.config import load_config
    from rollhub.dataset import load_jsonl_dataset
    from rollhub.hubs.async_hub import AsyncHub
    from rollhub.plugins import build_host
    from rollhub.training.loop import TrainingLoop

    tmp = Path(tempfile.mkdtemp(prefix="rollhub-bench-step-"))
    cfg = load_config(ROOT / "examples/math/train.toml", env={})
    cfg.store.url = f"file://{tmp / 'store'}"
    cfg.training.steps = args.steps
    cfg.training.checkpoint_every = 0
    cfg.experiment.progress = False
    payloads = load_jsonl_dataset(cfg.path(cfg.experiment.dataset))
    breakdown = _Breakdown()
    host = build_host(modules=cfg.plugins.modules, search_dir=cfg.base_dir)
    host.pm.register(breakdown, name="bench-breakdown")
    hub = AsyncHub(cfg, host=host, run_dir=tmp / "run")
    async with hub:
        await hub.token_source.gateway.backend.start()
        breakdown._busy = breakdown.engine_busy(hub)
        await TrainingLoop(hub, payloads, run_dir=tmp / "run", progress=False).run()
    rows = breakdown.rows[1:] or breakdown.rows  # the first step warms caches up
    total = {k: round(sum(r[k] for r in rows), 2)
             for k in ("wall_s", "engine_s", "trainer_s", "publish_s", "rest_s")}
    total["rest_frac"] = round(total["rest_s"] / total["wall_s"], 3)
    return {"steps_counted": len(rows), **total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    print(json.dumps(asyncio.run(_run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
