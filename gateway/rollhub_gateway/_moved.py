"""The old paths of modules that moved into subpackages, kept importable.

``import rollhub_gateway.serving`` (an old path) gives the module at its new path,
``rollhub_gateway.http.serving``: the same module object, so a name patched through either
path is patched for both. The first import of an old path warns with a
:class:`DeprecationWarning` that names the new path; later imports find the module in
``sys.modules`` and stay quiet.

The finder is the core's (:mod:`rollhub.moved_modules`); ``rollhub_gateway/__init__.py``
registers this table with it.
"""

from __future__ import annotations

from rollhub import moved_modules

__all__ = ["MOVED", "install"]

#: old module path -> the path it moved to
MOVED: dict[str, str] = {
    "rollhub_gateway.app_server": "rollhub_gateway.http.app_server",
    "rollhub_gateway.conformance_report": "rollhub_gateway.conformance.report",
    "rollhub_gateway.conformance_script": "rollhub_gateway.conformance.script",
    "rollhub_gateway.conformance_templates": "rollhub_gateway.conformance.templates",
    "rollhub_gateway.fast_path": "rollhub_gateway.http.fast_path",
    "rollhub_gateway.http_head": "rollhub_gateway.http.request_head",
    "rollhub_gateway.journal_entries": "rollhub_gateway.journal.entries",
    "rollhub_gateway.policy_routes": "rollhub_gateway.policies.routes",
    "rollhub_gateway.policy_serving": "rollhub_gateway.policies.serving",
    "rollhub_gateway.render": "rollhub_gateway.chat_templates.render",
    "rollhub_gateway.serving": "rollhub_gateway.http.serving",
    "rollhub_gateway.template_env": "rollhub_gateway.chat_templates.environment",
    "rollhub_gateway.template_oracle": "rollhub_gateway.chat_templates.oracle",
    "rollhub_gateway.turn_nodes": "rollhub_gateway.trajectory.nodes",
    "rollhub_gateway.turn_plan": "rollhub_gateway.model_call.plan",
    "rollhub_gateway.turn_record": "rollhub_gateway.trajectory.record",
    "rollhub_gateway.turn_runner": "rollhub_gateway.model_call.runner",
}


def install() -> None:
    """Register :data:`MOVED` with the core's finder of moved modules (repeat calls are harmless)."""
    moved_modules.install(MOVED)
