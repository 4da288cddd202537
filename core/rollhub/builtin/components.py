"""Registers the components the core ships: runtimes, result stores, token source, trainer,
metric sinks.

Only the classes are imported here; each one imports its heavy dependencies (boto3, ray,
pyarrow) lazily, when it is built, so registration stays cheap.
"""

from __future__ import annotations

from rollhub.markers import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    from rollhub.tokens import NoTokenSource
    from rollhub.trainers.export import ExportTrainer
    from rollhub.training.sinks import MLflowSink, TensorBoardSink, WandbSink

    registry.add_token_source(NoTokenSource)
    registry.add_trainer(ExportTrainer)
    for sink in (WandbSink, TensorBoardSink, MLflowSink):
        registry.add_metric_sink(sink)
