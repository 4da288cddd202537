"""The episode pipeline: prompts in, training-ready episode groups out.

For each prompt × n samples (a GRPO group) the hub runs, per sample::

    prepare   rollhub_prepare_rollout   open a capture session, fill _rollout
    submit    rollhub_submit_rollout    runtime.submit (fire-and-forget)
    await     the rollout client        callback or store poll → terminal outcome
    retrieve  rollhub_retrieve_tokens   the session's TraceRecords
    reward    rollhub_collect_rewards   named components merged → episode.reward
    done      rollhub_episode_done

and yields each :class:`~rollhub.episode.EpisodeGroup` as soon as all its samples are
terminal, so a trainer can start on the first full groups while others still run. Every
submitted sample ends in exactly one episode; failures are marked, never turned into a
silent zero reward (see ``[rewards] on_failure``).

:class:`AsyncHub` is the truth; :class:`~rollhub.hubs.sync_hub.Hub` is its synchronous twin for
trainers that do not run an event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from pluggy import HookRelay

from rollhub.client import AsyncRolloutClient
from rollhub.config import RollhubConfig
from rollhub.dataset import group_id_of
from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import RollhubError, UsageError
from rollhub.hubs.attempts import end_attempt, next_attempt, take_outcome, time_left
from rollhub.hubs.capture_sessions import (
    close_capture,
    note_sampled_policies,
    open_capture,
    replace_capture,
    retrieve_tokens,
)
from rollhub.hubs.parts import HubParts, start_parts
from rollhub.hubs.staleness import StalenessGate
from rollhub.plugin_host.hook_calls import call_all, call_first, call_observers
from rollhub.plugin_host.settings import check_config
from rollhub.plugins import PluginHost, build_host
from rollhub.policies import effective_staleness
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.runtime import Runtime
from rollhub.scoring.episode_rewards import collect_episode_rewards
from rollhub.scoring.group_rewards import collect_group_rewards
from rollhub.scoring.rewards import apply_failure_policy
from rollhub.seeding import EpisodeSeeds
from rollhub.sessions.episodes import SessionEpisodes
from rollhub.stores.base import ResultStore
from rollhub.submission.future import RolloutOutcome
from rollhub.tokens import TokenSource
from rollhub.training.step import Policy
from rollhub.training.trainer import Trainer

log = logging.getLogger(__name__)

#: ``request.extras`` key set once the prepare hooks ran (a retried submit skips them)
_PREPARED = "rollhub.prepared"

__all__ = ["AsyncHub", "group_id_of"]


class AsyncHub:
    """Runs rollouts through the configured components and the plugin hooks.

    :param config: the validated ``rollhub.toml``.
    :param host: a plugin host (default: built-ins, installed plugins and
        ``config.plugins.modules``).
    :param run_dir: where the trainer writes its outputs.
    """

    def __init__(
        self,
        config: RollhubConfig,
        *,
        host: PluginHost | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.config = config
        self.host = host or build_host(modules=config.plugins.modules, search_dir=config.base_dir)
        self.run_dir = run_dir
        self.exp_id = config.experiment.resolved_exp_id
        self._parts: HubParts | None = None
        self._gate = StalenessGate(effective_staleness(config))
        self._slots = asyncio.Semaphore(config.experiment.concurrency)
        self._started = False
        self._seeds = EpisodeSeeds(config.experiment.seed)
        self.stats: dict[str, Any] = {}

    # Components ----------------------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        """Where rollouts run (``[runtime]``)."""
        return self._require_parts().runtime

    @property
    def store(self) -> ResultStore:
        """Where agents write their results (``[store]``)."""
        return self._require_parts().store

    @property
    def token_source(self) -> TokenSource:
        """Where each rollout's sampled tokens are captured (``[token_source]``)."""
        return self._require_parts().token_source

    @property
    def trainer(self) -> Trainer:
        """What finished groups go to (``[trainer]``)."""
        return self._require_parts().trainer

    @property
    def client(self) -> AsyncRolloutClient:
        """Submits rollouts to the runtime and waits for their results."""
        return self._require_parts().client

    def _require_parts(self) -> HubParts:
        if self._parts is None:
            raise UsageError(
                "the hub's components exist once it has started: use "
                "'async with AsyncHub(cfg) as hub' or await hub.start()"
            )
        return self._parts

    # Lifecycle -----------------------------------------------------------------------------

    @property
    def hook(self) -> HookRelay:
        """The pluggy hook relay."""
        return self.host.hook

    @property
    def weight_version(self) -> int | None:
        """The policy version new rollouts are served by (set by the trainer)."""
        return self._gate.current

    def set_weight_version(self, version: int) -> None:
        """Record a new policy version; it is stamped on new episodes and gateway turns."""
        self._gate.set_current(version)
        if self._parts is not None:
            self._parts.token_source.set_weight_version(version)

    async def publish_policy(self, policy: Policy, version: int) -> None:
        """Hand a new policy to the sampling side and make ``version`` current.

        ``policy`` (e.g. a Tinker sampling client) goes to the token source, which swaps
        its sampling backend to it between turns: turns already sampling finish on the old
        policy and keep its version. None changes only the version (weights that were
        synced into the engine out of band).
        """
        if self._parts is not None and policy is not None:
            await self._parts.token_source.publish_policy(policy, version)
        self.set_weight_version(version)

    async def start(self) -> AsyncHub:
        """Build and start the runtime, store, token source, trainer and client (see
        :func:`~rollhub.hubs.parts.start_parts`: a failed start closes what had started)."""
        if self._started:
            return self
        check_config(self.host, self.config)
        self._parts = await start_parts(
            self.config, self.host.registry, run_dir=self.run_dir, exp_id=self.exp_id,
            weight_version=self._gate.current, submit=self._submit,
            on_new_session=self._new_capture,
        )  # fmt: skip
        self._started = True
        try:
            await call_all(self.hook.rollhub_hub_started, hub=self)
        except BaseException:  # a start that fails leaves nothing running
            self._started, parts, self._parts = False, self._parts, None
            with contextlib.suppress(Exception):
                await parts.close()
            raise
        return self

    async def close(self) -> dict[str, Any]:
        """Stop every component (reverse order), each whatever the others did; return what
        the trainer wrote. The first failure is raised once all were closed."""
        if not self._started or self._parts is None:
            return {}
        self._started = False
        try:
            return await self._parts.close()
        finally:  # the observers hear of it either way
            await call_observers(self.hook.rollhub_hub_stopped, hub=self, stats=self.stats)

    async def __aenter__(self) -> AsyncHub:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # One episode --------------------------------------------------------------------------

    async def _submit(self, request: RolloutRequest) -> SubmitReceipt:
        """The client's submit path: prepare hooks (once per rollout, not per retry), then
        the firstresult submit hook."""
        if not request.extras.get(_PREPARED):
            await call_all(self.hook.rollhub_prepare_rollout, request=request, hub=self)
            request.extras[_PREPARED] = True
        return await call_first(
            self.hook.rollhub_submit_rollout, request=request, runtime=self.runtime, hub=self
        )

    def _request(self, payload: Mapping[str, Any], group_id: str, index: int) -> RolloutRequest:
        return self.client.request(
            {k: v for k, v in payload.items() if k != "_rollout"},
            input_id=group_id,
            session_id=f"{group_id}-{index}-{uuid.uuid4().hex[:12]}",
            sampling=dict(self.config.experiment.sampling),
            sample_index=index,
        )

    async def run_episode(
        self,
        payload: Mapping[str, Any],
        group_id: str,
        index: int,
        *,
        sampling: Mapping[str, Any] | None = None,
    ) -> Episode:
        """Run one sample to its terminal episode (never raises for a failed rollout).

        :param sampling: merged over ``[experiment] sampling`` for this rollout only (e.g.
            ``{"temperature": 0.0}`` for a greedy eval); other rollouts keep the defaults.
        :raises ClusterLost: the runtime's cluster is gone (``Runtime.failure``).
        """
        self._require_started()
        request = self._request(payload, group_id, index)
        request.rollout.sampling.update(sampling or {})
        sid = request.rollout.session_id
        seed = self._seeds.assign(request, group_id, index)
        async with self._slots:
            await self._gate.wait_to_submit()
            version = self.weight_version
            # the admission version (the staleness gate's key): queued requests were built
            # before later weight updates. Each turn's own version is stamped by the gateway.
            request.rollout.weight_version = version
            self._gate.enter(sid, version)
            try:
                episode = await self._run_admitted(request, version)
                episode.metrics["sampling_seed"] = seed
            finally:
                self._gate.leave(sid)
        if self.runtime.failure is not None:  # its cluster is gone: the run cannot go on
            raise self.runtime.failure
        if failed := await call_observers(self.hook.rollhub_episode_done, episode=episode, hub=self):
            episode.metrics["episode_done_error"] = failed  # the episode stands; its observer broke
        return episode

    async def _run_admitted(self, request: RolloutRequest, version: int | None) -> Episode:
        rollout = request.rollout
        episode = Episode(
            episode_id=rollout.session_id,
            group_id=rollout.input_id,
            session_id=rollout.session_id,
            sample_index=rollout.sample_index or 0,
            status="submit_error",
            payload=dict(request.payload),
            weight_version=version,
            submitted_at=time.time(),
        )
        capture_open = False  # the current session's capture session is still to be closed
        try:
            await open_capture(self.token_source, request)
            capture_open = True
            while True:
                outcome = await self._outcome(request, episode)
                take_outcome(episode, outcome)
                capture_open, lost = await end_attempt(
                    episode, self.token_source, partial(retrieve_tokens, self),
                    partial(collect_episode_rewards, self), partial(note_sampled_policies, self),
                )
                if lost is None:
                    break
                # the agent's gateway replica went away under it: not the agent's doing
                attempts = self.config.experiment.session_attempts
                retry = next_attempt(request, episode, outcome, lost, session_attempts=attempts)
                if retry is None:
                    break
                request, episode.status = retry, "infra_error"  # until the next outcome
                await open_capture(self.token_source, request)
                capture_open = True
        except asyncio.CancelledError:
            episode.status, episode.finished_at = "cancelled", time.time()
            raise
        except Exception as exc:
            # Failures are data: this episode ends failed, every other one carries on.
            if isinstance(exc, RollhubError):
                log.warning("episode %s failed: %s", rollout.session_id, exc)
            else:
                log.exception("episode %s failed unexpectedly", rollout.session_id)
            episode.fail(exc)
        finally:
            if capture_open:
                await close_capture(self.token_source, episode)
        episode.metrics.setdefault("elapsed_s", episode.elapsed)
        return episode

    async def _outcome(self, request: RolloutRequest, episode: Episode) -> RolloutOutcome:
        if (sessions := SessionEpisodes.for_hub(self)) is not None:  # setup → run → teardown
            return await sessions.run(request, episode)
        future = await self.client.submit_request_async(
            request, timeout=time_left(request, self.config.experiment.timeout_s)
        )
        try:
            return await future.result_async()
        except asyncio.CancelledError:  # the session must not run on to its deadline
            future.cancel()
            raise

    async def _new_capture(self, old: RolloutRequest, new: RolloutRequest) -> None:
        """A rollout goes to a new runtime session: see :func:`replace_capture`."""
        await replace_capture(self.token_source, old, new)

    # Groups -------------------------------------------------------------------------------

    async def run_group(
        self,
        payload: Mapping[str, Any],
        n: int | None = None,
        *,
        group_id: str | None = None,
        sampling: Mapping[str, Any] | None = None,
        on_episode: Callable[[Episode], Awaitable[None]] | None = None,
    ) -> EpisodeGroup:
        """Run ``n`` samples of one prompt and return the finished group; ``sampling`` is
        merged over ``[experiment] sampling`` for this group only (see :meth:`run_episode`);
        ``on_episode`` is awaited with each episode as it finishes, before the group is
        scored (a trainer starting work on it while the others run); an exception it
        raises is logged, and the episode goes on to its group all the same."""
        n = n or self.config.experiment.n_samples
        gid = group_id or group_id_of(payload, self.config.experiment.id_field)

        async def sample(i: int) -> Episode:
            episode = await self.run_episode(payload, gid, i, sampling=sampling)
            if on_episode is not None:
                try:
                    await on_episode(episode)
                except Exception:  # advisory: the episode must reach its group
                    log.warning("on_episode failed for episode %s", episode.episode_id,
                                exc_info=True)  # fmt: skip
            return episode

        episodes = await asyncio.gather(*(sample(i) for i in range(n)))
        group = EpisodeGroup(gid, dict(payload), list(episodes))
        await collect_group_rewards(self, group)  # e.g. a judge ranking the group
        rewards = self.config.rewards
        apply_failure_policy(group, rewards.on_failure, min_group_size=rewards.min_group_size)
        return group

    async def iter_groups(
        self, payloads: Iterable[Mapping[str, Any]], n: int | None = None
    ) -> AsyncIterator[EpisodeGroup]:
        """Yield groups in completion order. Leaving the loop early cancels the rest."""
        self._require_started()
        tasks: set[asyncio.Task[EpisodeGroup]] = set()
        for payload in payloads:
            tasks.add(asyncio.ensure_future(self.run_group(payload, n)))
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            pending = [t for t in tasks if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _require_started(self) -> None:
        if not self._started:
            raise UsageError(
                "the hub is not started: use 'async with AsyncHub(cfg) as hub' or await hub.start()"
            )
