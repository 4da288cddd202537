"""rollhub-slime: slime trains on rollhub episodes.

- :mod:`rollhub_slime.rollout`: slime's ``--rollout-function-path`` and
  ``--custom-generate-function-path`` targets.
- :mod:`rollhub_slime.samples`: episodes → slime ``Sample``\\ s.
- :mod:`rollhub_slime.rewards`: GRPO reward post-processing that survives fan-out.
- :mod:`rollhub_slime.router`: the ``slime-router`` sampling backend.
- :mod:`rollhub_slime.launch`: the slime arguments for a ``rollhub.toml``.

Targets slime at commit ``624b824a898ab0ec1fcb4d373004c7f3852bf515``.
"""

__version__ = "0.1.0"

#: the slime commit whose contracts this package follows
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
