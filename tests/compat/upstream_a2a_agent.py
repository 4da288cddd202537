"""An A2A agent written for agentcore-rl-toolkit 0.1.4, as its users write them: a
``RolloutAgentExecutor`` subclass with blocking hooks (runs in the 0.1.4 environment)."""

import math
import os
import time
from pathlib import Path

from agentcore_rl_toolkit.rollout_session.a2a_executor import RolloutAgentExecutor
from agentcore_rl_toolkit.rollout_session.wire import RolloutDumpResponse


class MathExecutor(RolloutAgentExecutor):
    def __init__(self):
        super().__init__()
        self.prepared = {}

    def run_setup(self, task_input):
        self.prepared[task_input.get("id")] = f"workspace for {task_input.get('a')}"

    def run_rollout(self, task_input):
        if task_input.get("sleep"):
            time.sleep(task_input["sleep"])
            marker = os.environ.get("MARKER_DIR")
            if marker:  # written only when the work ran to its end
                Path(marker, f"{task_input['id']}.done").write_text("ran to the end")
        total = task_input["a"] + task_input["b"]
        reward = math.nan if task_input.get("nan") else float(total == task_input["answer"])
        return RolloutDumpResponse(
            task_output={
                "sum": total,
                "types": {k: type(v).__name__ for k, v in task_input.items() if k != "_rollout"},
                "prepared": self.prepared.get(task_input.get("id")),
                "rewards": reward,
            },
            reward=reward,
            exception=None,
            metrics={"turns": 1.0},
        )
