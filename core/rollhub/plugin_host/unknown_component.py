"""What to tell a user who named a component no plugin registered.

The message names the installed choices and, for a component that ships in another rollhub
distribution, the ``pip install`` that provides it (or why the installed one did not
register it). :class:`~rollhub.registry.ComponentRegistry` raises it as an
:class:`~rollhub.errors.UnknownComponentError`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from rollhub.errors import PluginLoadError

__all__ = ["KNOWN_DISTRIBUTIONS", "unknown_component_message"]

#: Components that ship in rollhub distributions other than the core, so that an error can
#: say which distribution to install even when that distribution is absent (data only: the
#: core imports none of them).
KNOWN_DISTRIBUTIONS: dict[tuple[str, str], str] = {
    ("token_source", "gateway"): "rollhub-gateway",
    ("token_source", "rllm"): "rollhub-rllm",
    ("sampling_backend", "transformers"): "rollhub-gateway[transformers]",
    ("sampling_backend", "vllm"): "rollhub-gateway",
    ("sampling_backend", "sglang"): "rollhub-gateway",
    ("sampling_backend", "tinker"): "rollhub-gateway",
    ("sampling_backend", "slime-router"): "rollhub-slime",
    ("sampling_backend", "verl"): "rollhub-verl",
    ("trainer", "verl"): "rollhub-verl",
    ("trainer", "slime"): "rollhub-slime",
    ("trainer", "tinker"): "rollhub-tinker",
    ("trainer", "rllm"): "rollhub-rllm",
    ("framework", "strands"): "rollhub-frameworks",
    ("framework", "langgraph"): "rollhub-frameworks",
    ("sandbox_provider", "local"): "rollhub-sandbox",
    ("sandbox_provider", "agentcore"): "rollhub-sandbox",
    ("sandbox_provider", "docker"): "rollhub-sandbox",
    ("runtime", "ray"): "rollhub[ray]",
}


def unknown_component_message(
    components: Mapping[str, Mapping[str, object]],
    kind: str,
    name: str,
    field: str | None,
    *,
    install_hints: Mapping[tuple[str, str], str],
    load_failures: Mapping[str, PluginLoadError],
) -> str:
    """Why no ``kind`` is registered as ``name``, and what to do about it.

    :param components: the registered components, by kind then config word.
    :param field: the config field that named it, if any.
    :param install_hints: hints plugins added, over :data:`KNOWN_DISTRIBUTIONS`.
    :param load_failures: plugins that failed to load, by name: one may provide it.
    """
    where = f" ({field})" if field else ""
    if kind not in components:
        return (
            f"no component kind {kind!r}{where}; kinds: {', '.join(components)} "
            f"(is the plugin that declares it installed? see 'rollhub plugins')"
        )
    installed = ", ".join(sorted(components.get(kind, {}))) or "none"
    msg = f"no {kind.replace('_', ' ')} named {name!r}{where}; installed: {installed}"
    dist = {**KNOWN_DISTRIBUTIONS, **install_hints}.get((kind, name))
    if dist is not None:
        base = dist.split("[")[0]
        broken = [p for p, f in load_failures.items() if _dist_of(f) == base]
        if broken:
            msg += f"; plugin {broken[0]!r} from {dist} is installed but failed to load: "
            msg += str(load_failures[broken[0]])
        elif _installed(base):
            msg += (
                f"; {base} is installed but this version provides no "
                f"{kind.replace('_', ' ')} {name!r} (upgrade it, or check its extras: {dist})"
            )
        else:
            msg += f"; it ships in {dist}: pip install '{dist}'"
        return msg
    close = difflib.get_close_matches(name, list(components.get(kind, {})), n=1, cutoff=0.6)
    if close:
        msg += f"; did you mean {close[0]!r}?"
    if load_failures:
        # the component may live in a plugin that could not load: say so, and how to see why
        failed = ", ".join(
            f"{p!r} ({getattr(f, 'error', f)})" for p, f in sorted(load_failures.items())
        )
        msg += (
            f"; plugins that failed to load, which may provide it: {failed} "
            f"(fix them; 'rollhub plugins' shows why)"
        )
    return msg


def _dist_of(failure: PluginLoadError) -> str | None:
    return getattr(failure, "distribution", None)


def _installed(distribution: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True
