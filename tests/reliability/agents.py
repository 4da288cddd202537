"""Misbehaving agents for the reliability suite; each app is picked by attribute name.

``noop``: answers at once (or sleeps ``seconds``; raises with ``fail``). ``chatty``: writes
``stdout_bytes`` to stdout and ``stderr_bytes`` to stderr (``newline`` false: no line end)
per rollout.
``hanging``: a sync handler on a 4-thread pool; ``mode=hang`` blocks for ``seconds``.
``full_disk``: stores into ``full://DIR``, a store whose writes fail with ENOSPC.
``dies_once``: one model call, then the first session SIGKILLs its own worker.
``dies_writing``: the first ``kills`` sessions of a rollout SIGKILL their worker halfway
through writing the result to its ``file://`` store (``kills`` may be a list: one count per
sample index; ``fail``: the agent raises, or ``fail_index``: that sample does).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
import time
from typing import Any

from rollhub.app import RolloutApp
from rollhub.registry import ComponentRegistry
from rollhub.stores.file import FileResultStore

noop = RolloutApp()


@noop.rollout_entrypoint
async def _noop(payload: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    if payload.get("seconds"):
        await asyncio.sleep(float(payload["seconds"]))
    if payload.get("fail"):
        raise RuntimeError("the agent failed on purpose")
    return {"rewards": 1.0, "x": payload.get("x"), "pid": os.getpid()}


chatty = RolloutApp()


@chatty.rollout_entrypoint
def _chatty(payload: dict[str, Any]) -> dict[str, Any]:
    end = "\n" if payload.get("newline", True) else ""
    out = int(payload.get("stdout_bytes", 0))
    err = int(payload.get("stderr_bytes", 0))
    if out:
        sys.stdout.write("o" * out + end)
        sys.stdout.flush()
    if err:
        sys.stderr.write("e" * err + end)
        sys.stderr.flush()
    return {"rewards": 1.0, "x": payload.get("x")}


hanging = RolloutApp(max_sync_workers=4)


@hanging.rollout_entrypoint
def _hanging(payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("mode") == "hang":
        time.sleep(float(payload.get("seconds", 30)))
    return {"rewards": 1.0, "pid": os.getpid()}


class FullDiskStore(FileResultStore):
    """``full://DIR``: reads like ``file://``, every write fails as on a full disk."""

    name = "full"

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FullDiskStore:
        return cls(url[len("full://") :], **options)

    @property
    def url(self) -> str:
        return f"full://{self.root.as_posix()}"

    def put(self, key: str, document: dict[str, Any]) -> None:
        from rollhub.errors import StoreError

        exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise StoreError(f"could not write {key!r} to {self.url}: {exc}") from exc


_registry = ComponentRegistry()
_registry.add_store(FileResultStore)
_registry.add_store(FullDiskStore)
full_disk = RolloutApp(registry=_registry)
full_disk.rollout_entrypoint(_noop)


huge = RolloutApp()


@huge.rollout_entrypoint
def _huge(payload: dict[str, Any]) -> dict[str, Any]:
    return {"rewards": 1.0, "blob": "x" * int(payload.get("bytes", 0))}


dies_once = RolloutApp()


@dies_once.rollout_entrypoint
def _dies_once(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """One model call through ``_rollout``; the first session to get here kills its worker
    (``marker`` records that it happened), later ones answer with the reply."""
    from openai import OpenAI

    rollout = context.rollout
    api_key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    client = OpenAI(base_url=rollout.base_url, api_key=api_key, max_retries=0)
    reply = client.chat.completions.create(
        model=rollout.model_id, messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    marker = payload["marker"]
    if not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(context.rollout.session_id)
        os.kill(os.getpid(), 9)  # the worker dies after its turn was captured
    return {"rewards": 1.0, "reply": reply.choices[0].message.content}


class KillOnWriteStore(FileResultStore):
    """The app's ``file://`` store: a result the agent marked ``kill_writer`` SIGKILLs the
    worker halfway through its write (the client reads the store as a plain ``file://``)."""

    def put(self, key: str, document: dict[str, Any]) -> None:
        if document.get("kill_writer"):
            target = self.path(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target.with_name(f".tmp-{target.name}"), "wb") as fh:
                fh.write(b'{"rewards": 1.0, "kill_wr')  # a torn write, never renamed
            os.kill(os.getpid(), signal.SIGKILL)
        super().put(key, document)


_kill_registry = ComponentRegistry()
_kill_registry.add_store(KillOnWriteStore)
dies_writing = RolloutApp(registry=_kill_registry)


@dies_writing.rollout_entrypoint
async def _dies_writing(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    import asyncio

    # the rollout's sessions are "<id>", "<id>-r1", "<id>-r2", ...: which one this is
    match = re.search(r"-r(\d+)$", context.rollout.session_id)
    attempt = int(match.group(1)) if match else 0
    index = context.rollout.sample_index or 0
    kills = payload["kills"]
    kills = kills[index] if isinstance(kills, list) else kills
    await asyncio.sleep(float(payload.get("seconds", 0.0)))
    if payload.get("fail") or payload.get("fail_index") == index:
        raise RuntimeError("the agent failed on purpose")
    return {"rewards": float(index % 2), "attempt": attempt, "kill_writer": attempt < kills}
