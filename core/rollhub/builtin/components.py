"""Registers the components the core ships: runtimes, result stores, token source, trainer,
metric sinks.

Only the classes are imported here; each one imports its heavy dependencies (boto3, ray,
pyarrow) lazily, when it is built, so registration stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollhub.plugin_host.markers import hookimpl
from rollhub.registry import ComponentRegistry

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    from rollhub.export.trainer import ExportTrainer
    from rollhub.tokens import NoTokenSource
    from rollhub.training.sinks import MLflowSink, TensorBoardSink, WandbSink

    registry.add_token_source(NoTokenSource)
    registry.add_trainer(ExportTrainer)
    for sink in (WandbSink, TensorBoardSink, MLflowSink):
        registry.add_metric_sink(sink)


@hookimpl
def rollhub_check_config(config: RollhubConfig, registry: ComponentRegistry) -> None:
    """Metric sinks named in ``[training]`` exist and their options validate."""
    from rollhub.errors import ConfigError
    from rollhub.registry import build_options

    training = config.training
    for name in training.metric_sinks:
        build_options(registry, "metric_sink", name, training.sinks.get(name, {}),
                      section=f"training.sinks.{name}")
    unused = sorted(set(training.sinks) - set(training.metric_sinks))
    if unused:
        raise ConfigError(
            f"[training.sinks.{unused[0]}] configures a sink that training.metric_sinks does not "
            f"name; add {unused[0]!r} to training.metric_sinks or remove the table",
            field=f"training.sinks.{unused[0]}",
        )
