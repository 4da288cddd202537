"""What ``rollhub run`` and ``rollhub config check`` verify before any rollout starts.

Everything that can be known without running an agent is checked here, so a bad config is
a one-line usage error (exit 2) and leaves nothing behind: plugin settings, every
component's name and options, the store URL and whether a ``file://`` store is writable,
the dataset (every line, every id), the agent app reference, and the output directory.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig
from rollhub.dataset import load_jsonl_dataset
from rollhub.errors import ConfigError, RollhubError
from rollhub.plugin_host.settings import check_config
from rollhub.plugins import PluginHost, build_host
from rollhub.registry import build_options
from rollhub.training.loop import check_stratify

log = logging.getLogger(__name__)

__all__ = ["check_run_config", "load_payloads"]


def check_run_config(cfg: RollhubConfig, host: PluginHost | None = None) -> PluginHost:
    """Check a config as far as it can be without a rollout; return the plugin host.

    :raises ConfigError: or another usage error, naming the field and the fix.
    """
    host = host or build_host(modules=cfg.plugins.modules, search_dir=cfg.base_dir)
    check_config(host, cfg)
    reg = host.registry
    _, runtime_opts = build_options(
        reg, "runtime", cfg.runtime.name, cfg.runtime.options, section="runtime"
    )
    build_options(
        reg, "token_source", cfg.token_source.name, cfg.token_source.options, section="token_source"
    )
    build_options(reg, "trainer", cfg.trainer.name, cfg.trainer.options, section="trainer")
    for name in cfg.training.metric_sinks:
        build_options(
            reg,
            "metric_sink",
            name,
            cfg.training.sinks.get(name, {}),
            section=f"training.sinks.{name}",
        )
    _check_store(cfg, host)
    app = getattr(runtime_opts, "app", None)
    if isinstance(app, str):
        check_app_ref(app, cfg.base_dir, field="runtime.app")
    elif cfg.runtime.name == "local":  # its options allow none so a bare config parses
        raise ConfigError(
            "the local runtime needs runtime.app: the RolloutApp to serve, e.g. "
            "app = 'agent.py:app' (relative to the config file) or 'mypkg.agent:app'",
            field="runtime.app",
        )
    _check_writable_dir(cfg.path(cfg.experiment.output_dir), "experiment.output_dir")
    if cfg.eval.dataset:
        load_held_out(cfg)
    if cfg.logging.file:
        _check_writable_dir(cfg.path(cfg.logging.file).parent, "logging.file")
    return host


def load_payloads(cfg: RollhubConfig) -> list[dict[str, Any]]:
    """The dataset's payloads (every line checked, ``max_prompts`` applied; with
    ``training.stratify``, every payload has that field)."""
    if not cfg.experiment.dataset:
        raise ConfigError(
            "experiment.dataset is not set; point it at a JSONL file of prompts",
            field="experiment.dataset",
        )
    payloads = load_jsonl_dataset(
        cfg.path(cfg.experiment.dataset),
        id_field=cfg.experiment.id_field,
        limit=cfg.experiment.max_prompts,
    )
    if cfg.training.stratify:
        check_stratify(payloads, cfg.training.stratify, id_field=cfg.experiment.id_field)
    return payloads


def load_held_out(cfg: RollhubConfig) -> list[dict[str, Any]]:
    """The ``[eval] dataset`` payloads (every line checked, ``[eval] max_prompts`` applied)."""
    assert cfg.eval.dataset is not None
    return load_jsonl_dataset(
        cfg.path(cfg.eval.dataset), id_field=cfg.experiment.id_field,
        limit=cfg.eval.max_prompts, field="eval.dataset",
    )


def check_app_ref(ref: str, base_dir: Path, *, field: str) -> None:
    """Check ``path/to/agent.py:app`` or ``pkg.module:app`` names something that exists.

    The module is not imported (that would run the user's agent here); a file is parsed and
    its top-level names looked up, a module is looked up on the import path.
    """
    target, sep, attr = ref.partition(":")
    if not sep or not target or not attr:
        raise ConfigError(
            f"{field} = {ref!r}: use 'path/to/agent.py:app' or 'package.module:app'", field=field
        )
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if not path.is_file():
            raise ConfigError(
                f"{field} = {ref!r}: file {str(path)!r} does not exist; paths are "
                f"relative to the config file's directory",
                field=field,
            )
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{field} = {ref!r}: {path} is not valid Python: {exc}", field=field
            ) from None
        if attr not in _top_level_names(tree):
            raise ConfigError(
                f"{field} = {ref!r}: {path} defines no top-level {attr!r}; name "
                f"the RolloutApp variable after ':'",
                field=field,
            )
        return
    try:
        found = importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"{field} = {ref!r}: no module {target!r} on the import path; install "
            f"its package or give a file path (agent.py:app)",
            field=field,
        )


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _check_store(cfg: RollhubConfig, host: PluginHost) -> None:
    from rollhub.stores import open_store

    host.registry.get("store", cfg.store.scheme, field="store.url")
    url = cfg.store.url
    if cfg.store.scheme == "file" and not url[len("file://") :].startswith("/"):
        url = f"file://{cfg.path(url[len('file://') :])}"
    try:
        store = open_store(url, host.registry, **cfg.store.options)
    except (RollhubError, ValueError, TypeError) as exc:
        raise ConfigError(f"store.url = {cfg.store.url!r}: {exc}", field="store.url") from None
    root = getattr(store, "root", None)
    if cfg.store.scheme == "file" and isinstance(root, Path):
        _check_writable_dir(root, "store.url")


def _check_writable_dir(path: Path, field: str) -> None:
    """``path`` is, or can be created as, a directory this process may write in.

    Tried, not inferred: root passes every permission check, and a directory such as
    ``/proc`` refuses new entries whatever the permissions say. What the probe creates is
    removed again.
    """
    target = Path(path).absolute()
    probe = target
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(
            f"{field}: {str(path)!r} cannot be a directory: {str(probe)!r} is a "
            f"file; choose another path",
            field=field,
        )
    missing = [d for d in (target, *target.parents) if not d.exists()]
    created: list[Path] = []
    try:
        for directory in reversed(missing):
            directory.mkdir()
            created.append(directory)
        fd, name = tempfile.mkstemp(dir=target, prefix=".rollhub-write-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise ConfigError(
            f"{field}: cannot create or write in {str(target)!r} ({exc.strerror or exc}); "
            "choose a writable path",
            field=field,
        ) from None
    finally:
        for directory in reversed(created):
            try:
                directory.rmdir()
            except OSError:
                pass  # something else wrote there meanwhile: it is not ours to remove
