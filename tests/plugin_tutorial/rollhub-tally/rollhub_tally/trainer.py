"""A trainer that trains nothing: it tallies rewards per prompt and writes tally.json."""

import json

from pydantic import Field
from rollhub.training import GroupConsumer, TrainerOptions


class TallyOptions(TrainerOptions):
    """``[trainer]`` options of the ``tally`` trainer."""

    filename: str = Field("tally.json", description="file written in the run directory")


class TallyTrainer(GroupConsumer):
    """Counts, per prompt, the samples that succeeded and their mean reward."""

    name = "tally"
    Options = TallyOptions
    options: TallyOptions

    async def start(self):
        self.groups = {}

    async def consume(self, group):
        rewards = [e.reward for e in group.episodes if e.ok and e.reward is not None]
        self.groups[group.group_id] = {
            "samples": len(group.episodes),
            "ok": len(rewards),
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        }
        return {"groups": len(self.groups)}

    async def close(self):
        # context.run_dir: the run directory rollhub created for this run
        path = self.context.run_dir / self.options.filename
        path.write_text(json.dumps(self.groups, indent=2, sort_keys=True))
        return {"tally": str(path)}
