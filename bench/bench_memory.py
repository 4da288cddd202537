"""Where the main job's memory goes.

    .venv/bin/python bench/bench_memory.py --steps 3

Runs ``examples/math/train.toml`` (the calculator agent, the in-process gateway and
engine, the ``torch`` trainer, a checkpoint after the last step) in this process for a few
steps, sampling its resident memory every 20 ms, and reports:

- the resident set after the imports, after the models loaded, and its peak while
  sampling, while training and overall (``VmHWM``);
- the tensors behind it: the engine's weights (what it does not share with the trainer),
  the trainer's model, its gradients and Adam's state, the engine's key/value states
  (slots and prefix cache), and what remains (activations, the allocator's free lists,
  the interpreter and libraries).

The agents run in their own worker processes, not counted here; ``/usr/bin/time -v`` on
``rollhub run`` reports the same process's peak (its largest process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from rollhub import hookimpl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MB = 1024 * 1024


def status(field: str) -> float:
    """A ``/proc/self/status`` memory field in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sampler:
    """Resident memory every 20 ms, the peak kept per phase."""

    def __init__(self) -> None:
        self.phase = "start"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            rss = status("VmRSS")
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), rss)


def nbytes(tensors: Any) -> float:
    """MB of distinct storages among ``tensors``."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values()) / MB


class Breakdown:
    """Component sizes at the end of every step."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.rows: list[dict[str, Any]] = []

    @hookimpl
    def rollhub_training_step(self, step: int, metrics: dict[str, Any], hub: Any) -> None:
        backend = hub.token_source.gateway.backend
        engine, trainer = backend.engine, hub.trainer
        ours = {p.untyped_storage().data_ptr() for p in trainer.model.parameters()}
        engine_only = [p for p in engine.model.parameters()
                       if p.untyped_storage().data_ptr() not in ours]
        cache = engine.prefix_cache
        spans = [s for s, _ in cache._refs.values()] if cache is not None else []
        state = [v for s in trainer.optimizer.state.values() for v in s.values()
                 if hasattr(v, "untyped_storage")]
        row = {
            "step": step + 1,
            "rss_mb": round(status("VmRSS")),
            "engine_own_weights_mb": round(nbytes(engine_only)),
            "trainer_model_mb": round(nbytes(trainer.model.parameters())),
            "gradients_mb": round(
                nbytes(p.grad for p in trainer.trained.values() if p.grad is not None)
            ),
            "adam_state_mb": round(nbytes(state)),
            "kv_slots_mb": round(engine.slots.nbytes / MB),
            "prefix_cache_mb": round(sum(s.nbytes for s in spans) / MB),
        }
        self.rows.append(row)
        print(json.dumps(row), flush=True)


async def _run(args: argparse.Namespace, sampler: Sampler) -> dict[str, Any]:
    from rollhub.config import load_config
    from rollhub.dataset import load_jsonl_dataset
    from rollhub.hubs.async_hub import AsyncHub
    from rollhub.plugins import build_host
    from rollhub.training.loop import TrainingLoop

    tmp = Path(tempfile.mkdtemp(prefix="rollhub-bench-memory-"))
    cfg = load_config(ROOT / "examples/math/train.toml", env={})
    cfg.store.url = f"file://{tmp / 'store'}"
    cfg.training.steps = args.steps
    cfg.training.checkpoint_every = args.steps
    if args.max_rows:
        cfg.trainer.max_rows = args.max_rows
    cfg.experiment.progress = False
    cfg.eval.dataset = None  # the memory of training and sampling; eval samples like a step
    payloads = load_jsonl_dataset(cfg.path(cfg.experiment.dataset))
    breakdown = Breakdown(sampler)
    host = build_host(modules=cfg.plugins.modules, search_dir=cfg.base_dir)
    host.pm.register(breakdown, name="bench-memory")
    hub = AsyncHub(cfg, host=host, run_dir=tmp / "run")
    marks: dict[str, float] = {"imports_mb": round(status("VmRSS"))}
    async with hub:
        await hub.token_source.gateway.backend.start()
        loop = TrainingLoop(hub, payloads, run_dir=tmp / "run", progress=False)
        sampler.phase = "sampling"
        _watch_trainer(breakdown, sampler)
        marks["engine_loaded_mb"] = round(status("VmRSS"))
        await loop.run()
    result = {**marks, "peak_mb_by_phase": {k: round(v) for k, v in sampler.peaks.items()},
              "peak_mb": round(status("VmHWM")), "steps": breakdown.rows}
    return result


def _watch_trainer(breakdown: Breakdown, sampler: Sampler) -> None:
    """Mark the training phase: wrap the trainer's ``step`` once it is built."""
    from rollhub_torch.trainer import TorchTrainer

    step = TorchTrainer.step

    async def stepped(self: Any, batch: Any) -> Any:
        sampler.phase = "training"
        try:
            return await step(self, batch)
        finally:
            sampler.phase = "sampling"

    TorchTrainer.step = stepped  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--max-rows", type=int, help="trainer.max_rows (default: the config's)")
    args = parser.parse_args()
    with Sampler() as sampler:
        print(json.dumps(asyncio.run(_run(args, sampler)), indent=1))


if __name__ == "__main__":
    main()
