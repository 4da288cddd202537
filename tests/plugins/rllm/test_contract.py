"""The record of rLLM in :mod:`rollhub_rllm.contract` against the packages it describes.

``rllm-model-gateway`` is on PyPI and installed with the test requirements, so its trace
fields are checked on every run. rLLM is not on PyPI: its classes are compared with the
record only where ``rllm`` is importable (an rLLM checkout on ``PYTHONPATH``, or rLLM
installed from git); elsewhere that test is skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import inspect
import re
from typing import Any

import pytest
from rollhub_rllm import contract, protocol

RLLM = importlib.util.find_spec("rllm")
needs_rllm = pytest.mark.skipif(
    RLLM is None, reason="rLLM is not installed (not on PyPI; put an rLLM checkout on PYTHONPATH)"
)


def annotation(tp: Any) -> str:
    """An annotation as the record writes it: source text, module prefixes left out."""
    if isinstance(tp, str):
        text = tp
    elif inspect.isclass(tp) and getattr(tp, "__origin__", None) is None:
        text = tp.__name__
    else:  # a union or a parameterised generic: its repr is its source spelling
        text = repr(tp)
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text)


def default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "<required>"


def fields_with_defaults(cls: type) -> dict[str, tuple[str, str]]:
    return {f.name: (annotation(f.type), default(f)) for f in dataclasses.fields(cls)}


def test_annotation_text_follows_the_source_spelling():
    from rollhub_rllm.protocol import TerminationReason

    assert annotation(dict) == "dict" and annotation("float | None") == "float | None"
    assert annotation(dict[str, Any] | None) == "dict[str, Any] | None"
    assert annotation(TerminationReason | None) == "TerminationReason | None"


def test_gateway_trace_fields_are_the_installed_gateways():
    from rllm_model_gateway.models import TraceRecord

    assert importlib.metadata.version("rllm-model-gateway") == contract.GATEWAY_VERSION
    assert tuple(TraceRecord.model_fields) == contract.GATEWAY_TRACE_FIELDS


@needs_rllm
def test_rllms_classes_match_the_record():
    from rllm.engine.remote_runtime.protocol import (
        RemoteAgentRuntime,
        RemoteTaskResult,
        TaskSubmission,
    )
    from rllm.types import Episode, Step, Trajectory
    from rllm.workflows.workflow import TerminationReason

    submission = {f.name: annotation(f.type) for f in dataclasses.fields(TaskSubmission)}
    assert submission == contract.TASK_SUBMISSION_FIELDS
    assert fields_with_defaults(RemoteTaskResult) == contract.REMOTE_TASK_RESULT_FIELDS
    assert {m.name: m.value for m in TerminationReason} == contract.TERMINATION_REASONS
    for name, (is_async, params) in contract.REMOTE_RUNTIME_METHODS.items():
        method = getattr(RemoteAgentRuntime, name)
        assert inspect.iscoroutinefunction(method) is is_async, name
        assert tuple(inspect.signature(method).parameters)[1:] == params, name
    assert tuple(Episode().to_dict()) == contract.EPISODE_KEYS
    assert tuple(Trajectory().to_dict()) == contract.TRAJECTORY_KEYS
    assert tuple(Step().to_dict()) == contract.STEP_KEYS
    # with rLLM importable, the runtime hands rLLM's own classes to its trainer
    assert protocol.rllm_types() == (RemoteTaskResult, TerminationReason)
