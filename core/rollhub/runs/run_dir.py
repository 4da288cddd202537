"""The run directory's layout, in one place: what ``rollhub run`` writes (and ``--resume``,
``rollhub eval``, ``rollhub view`` and ``rollhub compare`` read).

::

    RUN_DIR/
      rollhub.toml       the config file as given          run.json       where it came from
      config.json        the resolved config               manifest.json  code, versions, machine
      metrics.jsonl      one row per training step         episodes.jsonl every episode
      episodes.parquet   rollouts-only runs (export)       summary.json   rollouts-only summary
      training.png       per-step curves                   plots.png      rollouts-only plots
      eval.json          held-out scores before/after      eval-step-N.json  rollhub eval
      checkpoints/       step-N/ folders and ``latest``
      .rollhub.lock      held by the process running the run (:meth:`RunDir.claim`)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollhub.errors import UsageError

__all__ = ["RunDir", "changed_settings", "release_claims"]

log = logging.getLogger(__name__)

#: run directories this process holds, by resolved path: their lock files stay open (and
#: locked) until released or until the process exits, when the kernel lets them go,
#: however it ends
_CLAIMED: dict[Path, int] = {}


def release_claims() -> None:
    """Let go of every run directory this process claimed (a command that ran in-process,
    as from a test or a notebook, has ended)."""
    while _CLAIMED:
        os.close(_CLAIMED.popitem()[1])


class RunDir:
    """One run directory: its files by name, and the writes that start or resume a run.

    :param path: the directory (it need not exist yet).
    """

    CONFIG_COPY = "rollhub.toml"
    CONFIG = "config.json"
    ORIGIN = "run.json"
    MANIFEST = "manifest.json"
    METRICS = "metrics.jsonl"
    EPISODES = "episodes.jsonl"
    EPISODES_PARQUET = "episodes.parquet"
    SUMMARY = "summary.json"
    TRAINING_PLOT = "training.png"
    PLOTS = "plots.png"
    EVAL = "eval.json"
    CHECKPOINTS = "checkpoints"
    LOCK = ".rollhub.lock"

    #: the outputs ``rollhub run`` lists when it ends, in that order
    OUTPUTS = (EPISODES_PARQUET, EPISODES, SUMMARY, PLOTS, METRICS, TRAINING_PLOT, EVAL,
               CHECKPOINTS, MANIFEST)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # -- paths ---------------------------------------------------------------------------

    @property
    def metrics(self) -> Path:
        """``metrics.jsonl``: one row per training step."""
        return self.path / self.METRICS

    @property
    def episodes(self) -> Path:
        """``episodes.jsonl``: every episode (training runs, and the export trainer's)."""
        return self.path / self.EPISODES

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``."""
        return self.path / self.CHECKPOINTS

    @property
    def eval_report(self) -> Path:
        """``eval.json``: a training run's held-out scores before and after."""
        return self.path / self.EVAL

    def episodes_file(self) -> Path | None:
        """``episodes.jsonl`` if there is one, else ``episodes.parquet``, else None."""
        for name in (self.EPISODES, self.EPISODES_PARQUET):
            if (self.path / name).is_file():
                return self.path / name
        return None

    def checkpoint_report(self, checkpoint: str | os.PathLike[str]) -> Path:
        """Where ``rollhub eval --checkpoint`` writes its report for one checkpoint folder."""
        return self.path / f"eval-{Path(checkpoint).name}.json"

    # -- writing --------------------------------------------------------------------------

    def claim(self) -> None:
        """Make this process the directory's only writer until it exits: a second
        ``rollhub run`` (a scheduler's retry, another terminal's ``--resume``) on a run that
        is still going would interleave its steps and checkpoints with the first's.

        :raises UsageError: another process holds it; the error names its pid.
        """
        import fcntl  # POSIX only, and only here: reading a run directory needs none of it

        key = self.path.resolve()
        if key in _CLAIMED:
            return
        try:  # never through a link: the pid written below would truncate its target
            fd = os.open(self.path / self.LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot open {self.path / self.LOCK}: {exc.strerror or exc}; "
                             f"remove it (it is recreated) and run again") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(
                f"{self.path} is in use by another rollhub process (pid {holder}); wait for "
                f"it to end or stop it, then run again"
            ) from None
        except OSError as exc:  # a file system without locks: run as before, unguarded
            os.close(fd)
            log.warning("cannot lock %s (%s): nothing keeps a second process off this run",
                        self.path / self.LOCK, exc.strerror or exc)
            return
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        _CLAIMED[key] = fd

    def refuse_a_second_run(self) -> None:
        """Refuse to start a run here if one got as far as outputs: a training step
        (``metrics.jsonl``) or a rollouts-only run's summary. A run stopped before either
        may be started over.

        :raises UsageError: naming the directory and the two ways on.
        """
        if (self.path / self.METRICS).exists() or (self.path / self.SUMMARY).exists():
            raise UsageError(
                f"{self.path} already holds a run; pick a new run directory (or continue a "
                f"training run with --resume)"
            )

    def create(self, *, field: str) -> None:
        """Make the directory; ``field`` names the setting it came from for the error.

        :raises UsageError: it cannot be created.
        """
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"{field}: cannot create the run directory {str(self.path)!r}: "
                f"{exc.strerror or exc}; choose a writable path"
            ) from None

    def write_start(
        self, config_file: str | os.PathLike[str], config: dict[str, Any],
        manifest: dict[str, Any],
    ) -> None:
        """The files a new run starts with: a copy of the config file, the resolved config,
        where the config came from (for ``--resume``) and the manifest."""
        shutil.copyfile(config_file, self.path / self.CONFIG_COPY)
        self.write_json(self.CONFIG, config, sort_keys=True)
        self.write_json(self.ORIGIN, {"config": str(Path(config_file).resolve())})
        self.write_json(self.MANIFEST, manifest)

    def record_resume(self, manifest: dict[str, Any]) -> None:
        """Append a resumption (its command, code and versions) to the manifest."""
        current = self.read_json(self.MANIFEST) or {}
        resumed = list(current.get("resumed", []))
        resumed.append({k: manifest.get(k) for k in ("created", "command", "git", "versions",
                                                      "machine")})
        self.write_json(self.MANIFEST, {**current, "resumed": resumed})

    def write_json(self, name: str, value: object, *, sort_keys: bool = False) -> None:
        """Write one JSON file of the run (indented), whole or not at all: a temporary file
        renamed over it, so a kill mid-write leaves the file as it was."""
        path = self.path / name
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(value, indent=2, sort_keys=sort_keys))
        os.replace(tmp, path)

    # -- reading --------------------------------------------------------------------------

    def read_json(self, name: str) -> Any:
        """A JSON file of the run; None when it is absent or unreadable."""
        try:
            return json.loads((self.path / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("%s is not readable JSON: %s", self.path / name, exc)
            return None

    def config_source(self) -> str:
        """The config file a run was started with (``--resume`` without a config).

        :raises UsageError: neither ``run.json`` nor the config copy says.
        """
        origin = self.read_json(self.ORIGIN)
        if isinstance(origin, dict) and isinstance(origin.get("config"), str):
            return origin["config"]
        copy = self.path / self.CONFIG_COPY
        if copy.exists():
            return str(copy)
        raise UsageError(
            f"--resume {self.path}: cannot tell which config started this run; pass it: "
            f"rollhub run CONFIG --resume {self.path}"
        )

    def manifest(self) -> dict[str, Any]:
        """``manifest.json``, or {} for a run that predates manifests."""
        value = self.read_json(self.MANIFEST)
        return value if isinstance(value, dict) else {}


def changed_settings(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> dict[str, tuple[object, object]]:
    """Settings that differ between two resolved configs (``to_toml_dict()``), by dotted
    key: ``{"training.steps": (1, 2)}``; a key one side lacks is None there."""
    changed: dict[str, tuple[object, object]] = {}
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changed.update(changed_settings(old, new, f"{prefix}{key}."))
        elif old != new:
            changed[f"{prefix}{key}"] = (old, new)
    return changed
