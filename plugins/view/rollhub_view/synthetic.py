"""A synthetic training run directory of any size, for the benchmark and the tests.

Rows follow the export schema (``rollhub.export.episode_to_row``) plus ``step``,
``advantage`` and ``trained``, as a training run's ``episodes.jsonl``: two turns with a tool
result between them (mask 0), a few failures with tracebacks, an occasional forked branch.
Token ids are random; with ``model`` set they decode with that tokenizer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rollhub.runs.run_dir import RunDir

__all__ = ["episode_row", "metrics_row", "write_synthetic_run"]

CAUSES = ("RolloutTimeout", "ToolError", "RewardError")


def episode_row(step: int, group: int, sample: int, rng: random.Random, *,
                vocab: int = 49_000, prompt_len: int = 12, text: str | None = None) -> dict[str, Any]:
    """One synthetic episode row; ``text`` goes into the payload and the final message."""
    gid = f"g{step:04d}-{group:03d}"
    eid = f"{gid}-{sample}"
    failed = rng.random() < 0.03
    reward = None if failed else float(rng.random() < 0.4)
    out1, tool, out2 = rng.randint(6, 14), rng.randint(3, 6), rng.randint(3, 8)
    resp = [rng.randrange(vocab) for _ in range(out1 + tool + out2)]
    mask = [1] * out1 + [0] * tool + [1] * out2
    lps = [round(-rng.expovariate(4.0), 3) if m else 0.0 for m in mask]
    turns = [
        {"turn_index": 0, "start": 0, "end": out1, "finish_reason": "tool_calls",
         "weight_version": step, "drift": "append", "ill_formed": False, "masked_tokens": 0},
        {"turn_index": 1, "start": out1 + tool, "end": len(resp), "finish_reason": "stop",
         "weight_version": step, "drift": "append", "ill_formed": False, "masked_tokens": 0},
    ]
    trace = {"schema_version": 1, "session_id": eid, "branch_id": 0, "parent_branch_id": None,
             "fork_turn": None, "prompt_ids": [rng.randrange(vocab) for _ in range(prompt_len)],
             "response_ids": resp, "response_mask": mask, "response_logprobs": lps,
             "turns": turns, "finish_reason": "stop", "model_id": "synthetic",
             "metadata": json.dumps({"drift": {"append": 2, "fork": 0, "rerender": 0}})}
    traces = [] if failed else [trace]
    if not failed and rng.random() < 0.01:  # a forked branch off turn 1
        fork = {**trace, "branch_id": 1, "parent_branch_id": 0, "fork_turn": 1,
                "turns": [dict(turns[1], drift="fork")]}
        traces.append(fork)
    cause = rng.choice(CAUSES) if failed else None
    final = text or f"Answer: {rng.randint(0, 99999)}"
    return {
        "schema_version": 1, "exp_id": "synthetic", "episode_id": eid, "group_id": gid,
        "session_id": eid, "sample_index": sample,
        "status": "error" if failed else "ok", "trainable": not failed, "reward": reward,
        "reward_components": json.dumps({} if failed else {"result": reward}),
        "error_type": cause, "error_message": f"{cause} in sample {sample}" if failed else None,
        "weight_version": step, "submitted_at": 0.0, "finished_at": 1.0,
        "elapsed_s": round(rng.uniform(0.5, 20.0), 2), "num_turns": 0 if failed else 2,
        "num_sampled_tokens": 0 if failed else out1 + out2,
        "payload": json.dumps({"id": gid, "question": text or f"What is {group} * {step}?"}),
        "result": None if failed else json.dumps({"final_message": final}),
        "metrics": json.dumps({"traceback": f"Traceback (most recent call last):\n  ...\n{cause}"}
                              if failed else {}),
        "traces": traces, "step": step, "advantage": 0.0 if failed else round(rng.gauss(0, 1), 3),
        "trained": not failed,
    }


def metrics_row(step: int, episodes: int, rng: random.Random) -> dict[str, Any]:
    """One synthetic ``metrics.jsonl`` row."""
    t_sample, t_train = rng.uniform(5, 10), rng.uniform(2, 4)
    return {
        "step": step, "reward_mean": min(1.0, 0.3 + 0.01 * step + rng.uniform(-.05, .05)),
        "success_rate": min(1.0, 0.3 + 0.01 * step), "tool_call_rate": 0.8,
        "loss": rng.uniform(-0.1, 0.1), "staleness_max": 0, "staleness_mean": 0.0,
        "sampled_tokens": episodes * 16, "masked_tokens": episodes * 4,
        "time_sample_s": t_sample, "time_train_s": t_train, "time_step_s": t_sample + t_train,
        "trainer_idle_frac": t_sample / (t_sample + t_train), "sampler_idle_frac": 0.1,
        "elapsed_s": (step + 1) * (t_sample + t_train), "weight_version": step + 1,
        "episodes": episodes, "episodes_failed": int(episodes * 0.03),
    }


def write_synthetic_run(path: Path, *, steps: int, groups: int, group_size: int,
                        model: str | None = None, seed: int = 0) -> Path:
    """Write ``config.json``, ``metrics.jsonl`` and ``episodes.jsonl`` of a finished run."""
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    config = {"experiment": {"name": "synthetic", "n_samples": group_size},
              "trainer": {"name": "synthetic"},
              "training": {"steps": steps, "batch_groups": groups},
              "token_source": {"name": "gateway", **({"model": model} if model else {})}}
    run = RunDir(path)
    run.write_json(run.CONFIG, config)
    with run.episodes.open("w") as eps, run.metrics.open("w") as met:
        for step in range(steps):
            for g in range(groups):
                for s in range(group_size):
                    eps.write(json.dumps(episode_row(step, g, s, rng)) + "\n")
            met.write(json.dumps(metrics_row(step, groups * group_size, rng)) + "\n")
    return path
