"""One run directory as the page sees it: what kind of run, how far it got, its config,
its per-step metrics (read incrementally), and the files it may serve.

A training run (``rollhub run train.toml``) has ``metrics.jsonl`` and ``episodes.jsonl``; a
rollouts-only run has ``episodes.parquet`` or ``episodes.jsonl`` and, once finished,
``summary.json``. Everything is read as it is written: a run in progress is fine.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from rollhub.errors import UsageError
from rollhub.runs.run_dir import RunDir as RunFiles

from rollhub_view.errors import NotFound
from rollhub_view.tail import JsonlTail

__all__ = ["RunDir", "safe_path"]

log = logging.getLogger(__name__)

#: a run whose files changed this recently counts as running
RUNNING_WINDOW_S = 120.0
#: files in a run directory the page may show as images
IMAGES = (RunFiles.TRAINING_PLOT, RunFiles.PLOTS)
#: the files a run appends to (their last change tells whether it is running)
WRITTEN = (RunFiles.METRICS, RunFiles.EPISODES, RunFiles.EPISODES_PARQUET, RunFiles.SUMMARY,
           RunFiles.EVAL, RunFiles.CONFIG)


class RunDir:
    """A run directory, its files named by the core's :class:`rollhub.runs.run_dir.RunDir`
    (:attr:`files`).

    :param path: the directory (it must exist; its files may not yet).
    :param name: how the page labels it (default: the directory's name).
    :raises UsageError: the path is not a directory.
    """

    def __init__(self, path: str | os.PathLike[str], name: str | None = None) -> None:
        p = Path(path).expanduser()
        if not p.is_dir():
            raise UsageError(f"RUN_DIR {str(p)!r} is not a directory")
        self.path = p.resolve()
        self.files = RunFiles(self.path)
        self.name = name or self.path.name
        self._metrics_tail = JsonlTail(self.files.metrics)
        self.metrics: list[dict[str, Any]] = []
        self._json_cache: dict[str, tuple[float, object]] = {}

    # -- files -------------------------------------------------------------------------

    def episodes_file(self) -> Path | None:
        """``episodes.jsonl`` if there is one, else ``episodes.parquet``, else None."""
        return self.files.episodes_file()

    def read_json(self, name: str) -> object:
        """A JSON file of the run (cached until it changes); None when absent or unreadable."""
        p = self.path / name
        try:
            mtime = p.stat().st_mtime
        except FileNotFoundError:
            return None
        cached = self._json_cache.get(name)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            value = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # being written: try again next time
            log.debug("%s not readable yet: %s", p, exc)
            return cached[1] if cached else None
        self._json_cache[name] = (mtime, value)
        return value

    def file(self, relative: str) -> Path:
        """A file inside this run directory; see :func:`safe_path`."""
        return safe_path(self.path, relative)

    # -- state -------------------------------------------------------------------------

    def refresh_metrics(self) -> list[dict[str, Any]]:
        """Read the steps recorded since the last call; return all of them."""
        lines, reset = self._metrics_tail.read_new()
        if reset:
            self.metrics = []
        self.metrics.extend(line.value for line in lines if isinstance(line.value, dict))
        return self.metrics

    def config(self) -> dict[str, Any]:
        """The resolved config (``config.json``), or {} before it is written."""
        value = self.read_json(RunFiles.CONFIG)
        return value if isinstance(value, dict) else {}

    def kind(self) -> str:
        """``"training"`` (per-step metrics) or ``"rollouts"`` (episodes, no steps)."""
        if (self.path / RunFiles.METRICS).exists():
            return "training"
        if (self.path / RunFiles.SUMMARY).exists() or self.files.episodes_file() is not None:
            return "rollouts"
        # neither yet: a run that just started; the export trainer only exports
        trainer = (self.config().get("trainer") or {}).get("name")
        return "rollouts" if trainer in (None, "export") else "training"

    def model(self) -> str | None:
        """``[token_source] model`` of the run's config (decodes its token ids)."""
        value = (self.config().get("token_source") or {}).get("model")
        return value if isinstance(value, str) else None

    def steps_total(self) -> int | None:
        """``[training] steps`` when the config sets it."""
        value = (self.config().get("training") or {}).get("steps")
        return value if isinstance(value, int) else None

    def last_write(self) -> float | None:
        """When a file the run appends to last changed (seconds since the epoch)."""
        times = []
        for name in WRITTEN:
            try:
                times.append((self.path / name).stat().st_mtime)
            except FileNotFoundError:
                continue
        return max(times) if times else None

    def status(self) -> str:
        """``finished``, ``running`` (written to lately) or ``stopped`` (neither)."""
        if self.kind() == "rollouts":
            if (self.path / RunFiles.SUMMARY).exists():
                return "finished"
        else:
            total = self.steps_total()
            done = len(self.metrics)
            evals = self.read_json(RunFiles.EVAL)
            if (total is not None and done >= total) and (
                (isinstance(evals, dict) and "after" in evals) or not (self.config().get("eval") or {}).get("dataset")
                or (self.path / RunFiles.TRAINING_PLOT).exists()
            ):
                return "finished"
        last = self.last_write()
        if last is not None and time.time() - last < RUNNING_WINDOW_S:
            return "running"
        return "stopped"

    def images(self) -> list[str]:
        """The run's plots that exist (relative names, served through :meth:`file`)."""
        return [name for name in IMAGES if (self.path / name).is_file()]


def safe_path(root: Path, relative: str) -> Path:
    """``root / relative`` when it is a regular file inside ``root``.

    Refused (:class:`UsageError`): absolute paths, ``..`` components, and any path that
    leaves ``root`` once symlinks are resolved (a link pointing out of the run directory);
    :class:`NotFound` when no such file exists.
    """
    parts = Path(relative).parts
    if not relative or Path(relative).is_absolute() or ".." in parts or "\x00" in relative:
        raise UsageError(f"{relative!r} is not a path inside the run directory")
    base = root.resolve()
    try:
        target = (base / relative).resolve()
        outside = not target.is_relative_to(base)
        is_file = not outside and target.is_file()
    except (OSError, RuntimeError):
        # A name too long for the file system, a symlink loop (RuntimeError before 3.13):
        # the request names no file, the client's mistake. The message keeps the server's
        # own paths (the exception's text) to itself.
        raise NotFound(
            f"{relative!r} is not a file of the run directory (a name too long or a "
            f"symbolic link loop)"
        ) from None
    if outside:
        raise UsageError(f"{relative!r} leads out of the run directory")
    if not is_file:
        raise NotFound(f"{relative!r} is not a file of the run directory")
    return target
