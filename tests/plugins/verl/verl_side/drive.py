"""Drive the rollhub agent loop through verl's own worker code paths (v1 and v0).

- :func:`make_loop` builds the loop exactly as ``AgentLoopWorker._run_agent_loop`` does:
  ``hydra.utils.instantiate`` of the registry entry loaded from the agent-loop YAML, with
  the worker's tokenizer, processor, dataset class and wrapped configs.
- :func:`run_v1` runs one prompt through ``AgentLoopWorkerTQ._run_prompt`` (n sessions,
  then the TransferQueue post-processing); the TransferQueue client calls are captured.
- :func:`run_v0` runs a batch through ``AgentLoopWorker.generate_sequences`` into a
  ``DataProto``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def sampling_params(config: Any) -> dict[str, Any]:
    """The per-call parameters verl's workers build from the rollout config."""
    rollout = config.actor_rollout_ref.rollout
    return {
        "temperature": rollout.temperature,
        "top_p": rollout.top_p,
        "top_k": rollout.top_k,
        "repetition_penalty": 1.0,
        "logprobs": rollout.calculate_log_probs,
    }


def dataset_rows(config: Any, tokenizer: Any, parquet: Path) -> list[dict[str, Any]]:
    """Rows as verl's ``RLHFDataset.__getitem__`` yields them."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    ds = RLHFDataset(data_files=[str(parquet)], tokenizer=tokenizer, config=config.data)
    return [ds[i] for i in range(len(ds))]


def make_loop(worker: Any, config: Any) -> Any:
    """The loop object as ``AgentLoopWorker._run_agent_loop`` instantiates it, from the
    entry of ``config``'s ``agent_loop_config_path`` (read as the worker reads it)."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap

    entries = OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    entry = next(e for e in entries if e.name == "rollhub")
    return hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(config=config),
        server_manager=worker.llm_client,
        tokenizer=worker.tokenizer,
        processor=worker.processor,
        hf_model_type=worker.hf_model_type,
        dataset_cls=worker.dataset_cls,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(worker.tools),
    )


@dataclass
class Captured:
    """What the v1 worker put into TransferQueue."""

    keys: list[str] = field(default_factory=list)
    fields: list[Any] = field(default_factory=list)
    tags: list[dict[str, Any]] = field(default_factory=list)
    status: list[dict[str, Any]] = field(default_factory=list)


def tq_worker(monkeypatch: Any, config: Any, client: Any) -> tuple[Any, Captured]:
    """verl's v1 ``AgentLoopWorkerTQ`` (its class body, without the Ray actor wrapper)."""
    import verl.trainer.ppo.v1.agent_loop_tq as tqmod

    captured = Captured()

    async def kv_put(key: str, partition_id: str, tag: dict[str, Any]) -> None:
        captured.status.append({"key": key, **tag})

    async def kv_batch_put(keys: list[str], fields: Any, tags: list[Any], partition_id: str):
        captured.keys += keys
        captured.fields.append(fields)
        captured.tags += tags

    monkeypatch.setattr(tqmod.tq, "init", lambda *a, **k: None)
    monkeypatch.setattr(tqmod.tq, "async_kv_put", kv_put)
    monkeypatch.setattr(tqmod.tq, "async_kv_batch_put", kv_batch_put)
    cls = tqmod.AgentLoopWorkerTQ.__ray_metadata__.modified_class
    return cls(config, client, None, None), captured


async def run_v1(worker: Any, row: dict[str, Any], *, uid: str, step: int) -> None:
    """One prompt through ``AgentLoopWorkerTQ._run_prompt`` (rollout.n sessions)."""
    from verl.experimental.agent_loop.agent_loop import get_trajectory_info

    prompt = dict(row, uid=uid, global_steps=step, agent_name="rollhub")
    trajectory = (await get_trajectory_info(step, [row["index"]], False))[0]
    await worker._run_prompt(prompt, sampling_params(worker.config), trajectory)


async def run_v0(worker: Any, rows: list[dict[str, Any]], *, n: int, step: int) -> Any:
    """A batch through ``AgentLoopWorker.generate_sequences`` → ``DataProto``."""
    (batch,) = v0_chunks(rows, n=n, step=step, workers=1)
    return await worker.generate_sequences(batch)


def v0_chunks(rows: list[dict[str, Any]], *, n: int, step: int, workers: int) -> list[Any]:
    """A batch as ``AgentLoopManager.generate_sequences`` hands it to ``workers`` workers:
    numbered, then cut into contiguous chunks (a prompt's copies may be split)."""
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    batch = DataProto.from_single_dict(collate_fn(rows))
    batch.non_tensor_batch["uid"] = np.array([f"u{i}" for i in range(len(rows))], dtype=object)
    batch = batch.repeat(repeat_times=n, interleave=True)
    # AgentLoopManager.generate_sequences numbers the samples before chunking them
    batch.non_tensor_batch["priority"] = np.arange(len(batch), dtype=np.int64)
    batch.meta_info["global_steps"] = step
    return list(batch.chunk(workers))
