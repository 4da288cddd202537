"""Stand-ins for slime's side of the slime backend tests: where the stand-in ``slime``
package and the test agent live, slime's parsed arguments (:func:`make_args`), its
data-source contract (:class:`ListDataSource`: ``get_samples(k)`` → groups of
``n_samples_per_prompt`` copies with ``group_index``/``index`` counters) and the facts
recorded from slime's source (:data:`RECORD`).
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).parent
STUB = HERE / "slime_stub"
MODEL = "smollm2-135m-instruct"
TEMPLATE = HERE.parents[2] / "examples" / "math" / "chatml_tools.jinja"
AGENT = HERE / "agents" / "tool_agent.py"
#: facts read from slime's source at the targeted commit (see test_contract.py)
RECORD: dict[str, Any] = json.loads((HERE / "slime_624b824.json").read_text())


def make_args(**overrides: Any) -> SimpleNamespace:
    """slime's parsed arguments, as far as rollhub-slime reads them (slime's defaults)."""
    values: dict[str, Any] = {
        "rollout_batch_size": 2,
        "n_samples_per_prompt": 2,
        "over_sampling_batch_size": None,  # slime's parser then sets rollout_batch_size
        "dynamic_sampling_filter_path": None,
        "partial_rollout": False,
        "mask_offpolicy_in_partial_rollout": False,
        "rollout_sample_filter_path": None,
        "rollout_all_samples_process_path": None,
        "sglang_router_ip": None,
        "sglang_router_port": None,
        "router_policy": None,
        "hf_checkpoint": None,
        "advantage_estimator": "grpo",
        "rewards_normalization": True,
        "grpo_std_normalization": True,
        "reward_key": None,
        "eval_datasets": [],
        "n_samples_per_eval_prompt": 1,
        "input_key": "input",
        "label_key": None,
        "metadata_key": "metadata",
    }
    values.update(overrides)
    return SimpleNamespace(**values)


class ListDataSource:
    """slime's data-source contract over a list of prompt samples."""

    def __init__(self, prompts: list[Any], n_samples_per_prompt: int) -> None:
        self.prompts = prompts
        self.n = n_samples_per_prompt
        self.offset = self.group_index = self.index = 0
        self.added: list[list[Any]] = []

    def get_samples(self, num_samples: int) -> list[list[Any]]:
        groups = []
        for _ in range(num_samples):
            prompt = self.prompts[self.offset % len(self.prompts)]
            self.offset += 1
            group = []
            for _ in range(self.n):
                s = copy.deepcopy(prompt)
                s.group_index, s.index = self.group_index, self.index
                self.index += 1
                group.append(s)
            self.group_index += 1
            groups.append(group)
        return groups

    def add_samples(self, samples: list[list[Any]]) -> None:
        self.added.extend(samples)


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion on a fresh loop (tests of async helpers)."""
    return asyncio.run(coro)
