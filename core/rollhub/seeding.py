"""Seeded sampling: ``[experiment] seed`` fixes what the engine draws.

Every episode gets a seed of its own, derived from the experiment's seed, its prompt, its
sample index and how many times the hub ran that sample before (:class:`EpisodeSeeds`).
The seed travels as the capture session's default (:func:`session_sampling`), not as an
agent field, and the gateway derives each model call's seed from it (:func:`turn_seed`).
So the same seed and config sample the same tokens in every run (a run and its
learning-rate-0 control share their first step), while every sample, turn and repetition
draws its own numbers.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollhub.rollout import RolloutRequest

__all__ = ["EpisodeSeeds", "episode_seed", "session_sampling", "turn_seed"]

#: ``request.extras`` key of the episode's seed
SEED_KEY = "rollhub.sampling_seed"


def _mix(*parts: object) -> int:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=4).digest()
    # 31 bits: the narrowest seed type an engine takes is a signed 32-bit integer
    # (Tinker's sampler refuses anything larger)
    return int.from_bytes(digest, "big") >> 1


def episode_seed(seed: int, group_id: str, sample_index: int, round_: int = 0) -> int:
    """The sampling seed of sample ``sample_index`` of prompt ``group_id`` the
    ``round_``-th time a hub runs it, under experiment seed ``seed``."""
    return _mix("episode", seed, group_id, sample_index, round_)


def turn_seed(session_seed: int, turn_index: int) -> int:
    """The seed of one model call of a session whose policy carries ``session_seed``."""
    return _mix("turn", session_seed, turn_index)


class EpisodeSeeds:
    """Seeds of one hub's episodes: counts the rounds of every (prompt, sample) pair.

    :param seed: ``[experiment] seed``.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rounds: dict[tuple[str, int], int] = {}

    def assign(self, request: RolloutRequest, group_id: str, index: int) -> int:
        """Give ``request`` the next seed of its sample; return it."""
        key = (group_id, index)
        round_ = self._rounds[key] = self._rounds.get(key, -1) + 1
        seed = request.extras[SEED_KEY] = episode_seed(self.seed, group_id, index, round_)
        return seed


def session_sampling(
    request: RolloutRequest, first: RolloutRequest | None = None
) -> dict[str, Any]:
    """The capture session's sampling defaults: the rollout's, plus the episode's seed
    (a retry keeps the first attempt's). The seed is a session default, not an agent
    field: agents forward ``_rollout.sampling`` as request fields, and a request seed would
    repeat one draw on every turn."""
    sampling = dict(request.rollout.sampling)
    seed = (first or request).extras.get(SEED_KEY)
    if seed is not None:
        sampling.setdefault("seed", seed)
    return sampling
