"""Hook specifications of rollhub, in pipeline order.

Every stage the core owns is a hook, so a plugin can implement or extend it the way pytest
plugins extend a test run. Implement a hook with ``from rollhub import hookimpl`` and a
function of the same name; an implementation may take any subset of the arguments.

pluggy calls hooks synchronously. Where a hook's work is asynchronous, the implementation is
a plain ``def`` that returns an *awaitable* (or None to decline); the core awaits what it
gets (:func:`rollhub.plugins.resolve`). Never write a firstresult implementation as
``async def``: its coroutine is never None, so it would always win.

``docs/plugin_hooks.md`` documents each hook under its exact signature; a test fails when a
hook here is missing there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from rollhub.plugin_host.markers import hookspec

if TYPE_CHECKING:
    from pathlib import Path

    import pluggy

    from rollhub.commands import CommandTable
    from rollhub.config import RollhubConfig
    from rollhub.episode import Episode, EpisodeGroup
    from rollhub.hubs.view import HubView
    from rollhub.registry import ComponentRegistry
    from rollhub.rollout import RolloutRequest, SubmitReceipt
    from rollhub.runtime import Runtime
    from rollhub.tokens import TokenSource
    from rollhub.trace import TraceRecord


# ------------------------------------------------------------------------------------------
# Registration
# ------------------------------------------------------------------------------------------


@hookspec(historic=True)
def rollhub_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add a plugin's own hook specifications (named ``rollhub_<plugin>_…``).

    :param pluginmanager: the rollhub plugin manager; call ``add_hookspecs(module)`` on it.

    Historic: plugins registered later are called too. Returns nothing.
    Default: none. Awaitable: no.
    Example: a plugin that lets others customise its exports declares
    ``rollhub_export_columns`` here.
    """


@hookspec
def rollhub_add_commands(commands: CommandTable) -> None:
    """Add ``rollhub`` subcommands.

    :param commands: call ``commands.add(name, module, help)``; ``module`` is the dotted
        name of a module with ``add_arguments(parser)`` and ``run(args) -> int``, imported
        when the command line is built.

    All implementations run. Returns nothing.
    Default: the core's own commands (plugins, config, run, export, deploy).
    Awaitable: no.
    Example: rollhub-gateway adds ``rollhub gateway``; rollhub-tinker adds
    ``rollhub tinker-local``.
    """


@hookspec(historic=True)
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Name the components a plugin provides.

    :param registry: call ``registry.add_runtime(cls)``, ``add_store``,
        ``add_token_source``, ``add_sampling_backend``, ``add_trainer``, ``add_framework``,
        ``add_sandbox_provider`` or ``add(kind, cls)``. Each class carries its config word
        in a ``name`` class attribute and, optionally, a pydantic ``Options`` model that
        validates its config section.

    Historic: plugins registered later are called too, so registration order never matters.
    Returns nothing.
    Default: the core registers the ``local`` and ``agentcore`` runtimes, the ``file`` and
    ``s3`` stores, the ``none`` token source and the ``export`` trainer.
    Awaitable: no.
    Example: ``rollhub_gateway.plugin`` registers the ``gateway`` token source and the
    ``transformers``, ``vllm``, ``sglang`` and ``tinker`` sampling backends.
    """


@hookspec
def rollhub_check_config(config: RollhubConfig, registry: ComponentRegistry) -> None:
    """Validate a plugin's own settings before anything runs.

    :param config: the loaded config; a plugin's table is ``config.plugins.settings(name)``.
    :param registry: the component registry.

    All implementations run; raise :class:`~rollhub.errors.ConfigError` naming the field
    (``plugins.<name>.<key>``) and the fix. Called by ``rollhub config check`` and before a
    hub starts, so a typo fails in a second, not after every rollout has run.
    Default: the core rejects ``[plugins.<name>]`` tables of plugins that are not loaded.
    Awaitable: no.
    Example: ``rollhub_sandbox.rewards`` validates ``[plugins.sandbox]``.
    """


# ------------------------------------------------------------------------------------------
# Submission
# ------------------------------------------------------------------------------------------


@hookspec
def rollhub_prepare_rollout(request: RolloutRequest, hub: HubView) -> Awaitable[None] | None:
    """Prepare one rollout before it is submitted.

    :param request: the payload and its ``_rollout`` config; change ``request.rollout`` or
        ``request.payload`` in place.
    :param hub: the hub running the experiment.

    Runs after the hub has opened the rollout's token-capture session and filled
    ``base_url``, ``api_key`` and ``model_id`` into ``_rollout``.

    All implementations run (LIFO: the last registered first); awaitables are awaited one
    after another. Returns None or an awaitable of None.
    Default: none.
    Awaitable: yes.
    Example: a plugin adds a per-rollout random seed to ``request.rollout.sampling``.
    """


@hookspec(firstresult=True)
def rollhub_submit_rollout(
    request: RolloutRequest, runtime: Runtime, hub: HubView
) -> Awaitable[SubmitReceipt] | None:
    """Submit one prepared rollout; fire-and-forget.

    :param request: the prepared request.
    :param runtime: the configured runtime component.
    :param hub: the hub running the experiment.

    First result wins: return None to decline, or an awaitable of a
    :class:`~rollhub.rollout.SubmitReceipt` to take the job. Raise
    :class:`~rollhub.errors.SubmissionError` (``transient=True`` for throttling and 5xx).
    Default (trylast): ``runtime.submit(request)``.
    Awaitable: yes.
    Example: a plugin routes a class of inputs to a second runtime.
    """


# ------------------------------------------------------------------------------------------
# Token retrieval
# ------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def rollhub_retrieve_tokens(
    episode: Episode, source: TokenSource, hub: HubView
) -> Awaitable[list[TraceRecord]] | None:
    """Fetch the exact token traces of a finished rollout.

    :param episode: the episode, its result already read from the store.
    :param source: the configured token source.
    :param hub: the hub running the experiment.

    First result wins: return None to decline or an awaitable of a list of
    :class:`~rollhub.trace.TraceRecord`. Raise :class:`~rollhub.errors.TokenRetrievalError`.
    Default (trylast): ``source.fetch_traces(episode.session_id)``; the ``none`` source
    returns an empty list (evaluation only).
    Awaitable: yes.
    """


# ------------------------------------------------------------------------------------------
# Reward collection
# ------------------------------------------------------------------------------------------


@hookspec
def rollhub_collect_rewards(
    episode: Episode, hub: HubView
) -> Mapping[str, float] | Awaitable[Mapping[str, float] | None] | None:
    """Compute named reward components for one episode.

    :param episode: the finished episode with its result and traces.
    :param hub: the hub running the experiment.

    All implementations run. Each returns a mapping of component name to a finite float,
    an awaitable of one, or None. The core merges them (a name given twice is a
    :class:`~rollhub.errors.RewardError`) and sums them into ``episode.reward`` unless the
    config weights them differently.
    Default: ``{"result": rewards}`` from the agent's result (the last element when
    ``rewards`` is a list).
    Awaitable: yes.
    Example: ``rollhub_sandbox.rewards`` runs the task's tests in the episode's sandbox.
    """


@hookspec
def rollhub_collect_group_rewards(
    group: EpisodeGroup, hub: HubView
) -> (
    Mapping[str, Mapping[str, float]] | Awaitable[Mapping[str, Mapping[str, float]] | None] | None
):
    """Compute named reward components for the episodes of one group, scored together.

    :param group: the finished group; its ``ok`` episodes carry their own components.
    :param hub: the hub running the experiment.

    All implementations run, once per group, after every episode's
    ``rollhub_collect_rewards`` and before the failure policy. Each returns a mapping of
    episode id to ``{component: finite float}`` (``ok`` episodes only), an awaitable of
    one, or None. The core merges them into each episode's components (a name the episode
    already has is a :class:`~rollhub.errors.RewardError`) and recomputes its reward; a
    hook that raises fails the group's ``ok`` episodes as reward errors. Put what scoring
    cost in ``group.metrics[<name>]`` (numbers): the loop sums it per step.
    Default: none.
    Awaitable: yes.
    Example: ``rollhub.judge`` asks a frozen policy to score or rank the group's episodes.
    """


# ------------------------------------------------------------------------------------------
# Lifecycle
# ------------------------------------------------------------------------------------------


@hookspec
def rollhub_episode_done(episode: Episode, hub: HubView) -> Awaitable[None] | None:
    """Observe an episode once it has reached its terminal status and reward.

    :param episode: the finished episode (any status).
    :param hub: the hub running the experiment.

    All implementations run; return values other than awaitables are ignored.
    Default: none. Awaitable: yes.
    Example: a metrics plugin logs each episode's reward to a tracker.
    """


@hookspec
def rollhub_training_step(
    step: int, metrics: Mapping[str, Any], hub: HubView
) -> Awaitable[None] | None:
    """Observe one finished training step of the core's training loop.

    :param step: the step index (0-based).
    :param metrics: the step's metrics, the same keys as the run's ``metrics.jsonl``
        (``reward_mean``, ``loss``, ``sampled_tokens``, ``staleness_max``, ``weight_version``…).
    :param hub: the hub the loop samples through.

    All implementations run; return values other than awaitables are ignored.
    Default: none (the configured metric sinks are called by the loop itself).
    Awaitable: yes.
    Example: a plugin posts the step's reward to a team dashboard.
    """


@hookspec(firstresult=True)
def rollhub_trained_weights(path: Path) -> Path | None:
    """Find a checkpoint that a trainer driving its own loop kept, for
    ``rollhub eval --checkpoint``.

    :param path: what the user gave: a run directory or one checkpoint's folder.

    Return the checkpoint's folder, which holds ``policy.safetensors`` (the trained
    parameters by name, loaded over the engine's model) and ``model.json`` (the model they
    belong to); None when ``path`` holds none of this plugin's checkpoints.
    Firstresult. Called only when ``path`` holds no checkpoint of the core's loop.
    Default: none. Awaitable: no.
    Example: ``rollhub_trl`` finds TRL's newest ``trl/checkpoint-N``.
    """


@hookspec
def rollhub_hub_started(hub: HubView) -> Awaitable[None] | None:
    """The hub has started its components and is about to take rollouts.

    :param hub: the hub.

    All implementations run. Default: none. Awaitable: yes.
    """


@hookspec
def rollhub_hub_stopped(hub: HubView, stats: Mapping[str, Any]) -> Awaitable[None] | None:
    """The hub has stopped; every rollout has reached a terminal result.

    :param hub: the hub.
    :param stats: the run's summary numbers.

    All implementations run. Default: none. Awaitable: yes.
    """
