"""Where the ``torch`` trainer's time goes, on a real step of the main job.

    .venv/bin/python bench/bench_trainer_step.py RUN_DIR --step 1 --repeat 4 [--ahead] [--profile]

Replays step ``--step`` of a main-job run directory (its ``episodes.jsonl`` keeps every
episode's token ids, mask, sampler logprobs and advantage) through the trainer the run's
config names, with the learning rate set to 0 so every repeat trains the same weights, and
reports:

- the step's wall time (each repeat, and the median);
- the floating-point work of its linear layers, counted from the model's shapes and the
  batch's tokens as the trainer lays them out (the shared prompt start once, each prompt's
  rest, the responses in padded parts): the forward through every layer, the backward
  and the recomputed forward of the trained ones, the output projection of each sampled
  token and its gradient; and the rate that makes (GFLOP/s);
- how much of that work is the frozen layers' forward of the response tokens, which the
  sampler computed too, for the same tokens and the same weights, while it sampled them;
- with ``--ahead``, the same step with every response's frozen layers forwarded ahead
  (:mod:`rollhub_torch.frozen_ahead`, as when every episode ends while the step still
  samples), its repeats interleaved with the whole forward's, and how long the forward
  ahead took on its one thread;
- with ``--profile``, torch's operator table of one more step.

The attention's own products (a few percent of a step at the main job's lengths) are not
counted, so the rate is a slight underestimate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _layer_params(config: Any) -> int:
    """The weights of one decoder layer's linear maps (attention and MLP)."""
    hidden, inter = int(config.hidden_size), int(config.intermediate_size)
    head_dim = int(getattr(config, "head_dim", None) or hidden // config.num_attention_heads)
    q = int(config.num_attention_heads) * head_dim
    kv = int(config.num_key_value_heads) * head_dim
    return hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inter


def step_flops(trainer: Any, groups: list[Any]) -> dict[str, float]:
    """The step's linear-layer work in GFLOP, by part (see the module docstring)."""
    from rollhub_torch.sequences import response_parts, shared_prefix

    config = trainer.model.config
    layers, trained = int(config.num_hidden_layers), int(trainer.options.train_layers or 0)
    trained = trained or layers
    per_layer = 2 * _layer_params(config)  # forward FLOPs of one layer, per token
    head = 2 * int(config.vocab_size) * int(config.hidden_size)
    shared = len(shared_prefix([g.prompt_ids for g in groups]))
    prompt_tokens = shared + sum(len(g.prompt_ids) - shared for g in groups)
    padded = sampled = 0
    for group in groups:
        for part in response_parts(group.responses, trainer.options.max_rows):
            padded += len(part) * max(len(r.token_ids) for r in part)
            sampled += sum(r.trained_tokens for r in part)
    recompute = 1 if trainer.options.recompute else 0
    work = {
        "prompt_forward": prompt_tokens * layers * per_layer,
        "prompt_backward": prompt_tokens * trained * 2 * per_layer,
        "response_forward_frozen": padded * (layers - trained) * per_layer,
        "response_forward_trained": padded * trained * per_layer * (1 + recompute),
        "response_backward": padded * trained * 2 * per_layer,
        "output_projection": sampled * 2 * head,  # the logits, and their gradient's product
    }
    gflop = {k: v / 1e9 for k, v in work.items()}
    gflop["total"] = sum(gflop.values())
    gflop.update(prompt_tokens=prompt_tokens, padded_response_tokens=padded, sampled_tokens=sampled)
    return gflop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a main-job run directory")
    parser.add_argument("--step", type=int, default=1, help="which step to replay (from 1)")
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--profile", action="store_true", help="torch's operator table too")
    parser.add_argument("--ahead", action="store_true",
                        help="also time the step with the frozen layers forwarded ahead")
    args = parser.parse_args()

    from rollhub.config import load_config
    from rollhub.export import episode_from_row, read_rows
    from rollhub.registry import ComponentContext
    from rollhub_torch.sequences import prompt_groups
    from rollhub_torch.trainer import TorchTrainer, TorchTrainerOptions

    config = load_config(args.run_dir / "rollhub.toml")
    rows = [r for r in read_rows(args.run_dir / "episodes.jsonl")
            if r["step"] == args.step - 1 and r.get("trainable")]  # fmt: skip
    if not rows:
        raise SystemExit(f"{args.run_dir}: no trainable episode at step {args.step}")
    pairs = [(episode_from_row(r), float(r["advantage"] or 0.0)) for r in rows]
    options = {**config.trainer.options, "learning_rate": 0.0}
    # the run's config as context: the model and the temperature are read as the run read them
    context = ComponentContext(base_dir=args.run_dir, config=config)
    trainer = TorchTrainer(TorchTrainerOptions(**options), context=context)
    asyncio.run(trainer.start())
    ahead, trainer._ahead = trainer._ahead, None  # the whole forward unless timed with it
    if args.ahead and ahead is None:
        raise SystemExit("--ahead: this trainer's model does not split (forward_ahead off?)")
    groups, stats = prompt_groups(pairs)
    work = step_flops(trainer, groups)

    def step() -> float:
        started = time.perf_counter()
        trainer._train_and_free(args.step - 1, groups, stats.trained_tokens)
        return time.perf_counter() - started

    def step_ahead() -> tuple[float, float]:
        trainer._ahead = ahead
        for g in groups:
            ahead.submit(args.step - 1, g.prompt_ids, g.responses)
        started = time.perf_counter()
        ahead.settle()
        forwarded = time.perf_counter() - started
        try:
            return step(), forwarded
        finally:
            trainer._ahead = None

    step()  # warm-up, not counted
    seconds, with_ahead = [], []
    for _ in range(args.repeat):
        seconds.append(step())
        if args.ahead:
            with_ahead.append(step_ahead())
    median = statistics.median(seconds)
    report = {
        "step": args.step, "episodes": len(rows), "groups": len(groups),
        "seconds": [round(s, 2) for s in seconds], "median_s": round(median, 2),
        "gflop": {k: round(v, 1) for k, v in work.items()},
        "gflop_per_s": round(work["total"] / median, 1),
        "frozen_response_forward_share": round(work["response_forward_frozen"] / work["total"], 3),
    }  # fmt: skip
    if with_ahead:
        report["ahead"] = {
            "seconds": [round(s, 2) for s, _ in with_ahead],
            "median_s": round(statistics.median(s for s, _ in with_ahead), 2),
            "forwarded_ahead_s": [round(f, 2) for _, f in with_ahead],
        }
    print(json.dumps(report, indent=1))
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
