"""A judge: a frozen policy that scores or ranks the episodes of a group (``[judge]``).

See :mod:`rollhub.judge.plugin` for what it does per group, :mod:`rollhub.judge.config`
for its settings and :mod:`rollhub.judge.prompt` for what it is asked and how its answer is
read.
"""

from rollhub.judge.config import JudgeConfig

__all__ = ["JudgeConfig"]
