"""``file://DIR``: the embedded result store, one JSON file per key under a directory.

Writes are atomic: the document goes to a temporary file in the key's own directory, is
flushed to disk, then renamed over the key with :func:`os.replace`. A reader therefore
sees either no file or the whole document, never a partial one. A process killed
mid-write leaves its temporary file behind; :meth:`FileResultStore.clean_temp` removes
those older than a few minutes (a live write takes milliseconds), and the agent app runs
it when it opens the store. Temporary files are named ``.tmp-rollhub-<16 hex>.json`` and
the sweep removes only names of that form, only in the directories result keys
(``exp/input/session.json``) write to: a store URL may name a directory holding other
programs' files, which are never touched.

Writes never go through a symbolic link inside the root: a link planted there (to
``/etc`` or another run) would otherwise carry results out of the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from rollhub.errors import StoreError
from rollhub.stores import check_key, check_prefix
from rollhub.stores.base import ResultStore, decode_document, encode_document

__all__ = ["FileResultStore"]

log = logging.getLogger(__name__)

#: What :meth:`FileResultStore.list` hides (any program's temporary files, rollhub's too).
_TMP_PREFIX = ".tmp-"
#: rollhub's own temporary files; the sweep removes nothing else.
_OWN_TMP_PREFIX = ".tmp-rollhub-"
_OWN_TMP = re.compile(r"\.tmp-rollhub-[0-9a-f]{16}(?:\.[A-Za-z0-9]{1,16})?")
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,16}")
#: Age after which a temporary file is certainly not a write in progress.
TEMP_MAX_AGE_S = 600.0
#: Parts of a result key (``exp/input/session.json``): temporary files sit beside the key.
RESULT_KEY_PARTS = 3
#: Directories one sweep may look into; a store URL naming ``/`` stays a bounded scan.
SWEEP_MAX_DIRS = 20_000


class FileResultStore(ResultStore):
    """Results as JSON files under a root directory.

    :param root: the directory; created on the first write.
    :param fsync: flush each document to disk before it becomes visible (default on, so a
        machine crash cannot leave a renamed but empty file).

    Example::

        store = FileResultStore.from_url("file://runs/results")
        store.put("exp/q1/s1.json", {"rewards": 1.0})
        assert store.get("exp/q1/s1.json")["rewards"] == 1.0
    """

    name: ClassVar[str] = "file"

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.fsync = fsync

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FileResultStore:
        """Open ``file:///abs/dir`` or ``file://rel/dir`` (relative to the working directory)."""
        if not url.startswith("file://"):
            raise StoreError(f"{url!r} is not a file:// URL", url=url)
        path = url[len("file://") :]
        if not path:
            raise StoreError(f"store URL {url!r} names no directory; use file://DIR", url=url)
        return cls(path, **options)

    @property
    def url(self) -> str:
        """``file://`` plus the absolute root, so the URL means the same from any directory."""
        return f"file://{self.root.as_posix()}"

    def path(self, key: str) -> Path:
        """The file that holds ``key`` (after checking the key cannot leave the root)."""
        return self.root.joinpath(*check_key(key).split("/"))

    def put(self, key: str, document: dict[str, Any]) -> None:
        """Write ``document`` as JSON at ``key``, atomically."""
        target = self.path(key)
        data = _encode(document, key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._refuse_links(target, key)
            fd, tmp = _create_temp(target)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    if self.fsync:
                        fh.flush()
                        os.fsync(fh.fileno())
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise StoreError(
                f"could not write {key!r} to {self.url}: {exc}", url=self.url, key=key
            ) from exc

    def _refuse_links(self, target: Path, key: str) -> None:
        """Raise when any part of ``key`` below the root is a symbolic link."""
        current = self.root
        for part in target.relative_to(self.root).parts:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return  # nothing below a missing entry can be a link yet
            if stat.S_ISLNK(mode):
                raise StoreError(
                    f"refusing to write {key!r} to {self.url}: {str(current)!r} is a symbolic "
                    f"link; results are only written to real directories inside the store",
                    url=self.url,
                    key=key,
                )

    def clean_temp(
        self, max_age_s: float = TEMP_MAX_AGE_S, *, key_parts: int = RESULT_KEY_PARTS
    ) -> int:
        """Remove rollhub's temporary files older than ``max_age_s`` (left by killed writers).

        Only names this store gives its temporary files, only in the directories keys of
        ``key_parts`` parts write to, never through a symbolic link: the root may be a
        directory other programs use too.

        :returns: how many were removed.
        """
        cutoff = time.time() - max_age_s
        removed = 0
        for directory in self._key_dirs(key_parts - 1):
            with contextlib.suppress(OSError), os.scandir(directory) as entries:
                for entry in entries:
                    if not _OWN_TMP.fullmatch(entry.name):
                        continue
                    with contextlib.suppress(OSError):
                        info = entry.stat(follow_symlinks=False)
                        if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                            os.unlink(entry.path)
                            removed += 1
        if removed:
            log.info("removed %d stale temporary files from %s", removed, self.url)
        return removed

    def _key_dirs(self, depth: int) -> Iterator[str]:
        """Real directories exactly ``depth`` levels below the root (at most SWEEP_MAX_DIRS)."""
        level = [str(self.root)] if self.root.is_dir() else []
        visited = 0
        for _ in range(depth):
            below: list[str] = []
            for directory in level:
                visited += 1
                if visited > SWEEP_MAX_DIRS:
                    log.warning("%s: stopped looking for stale temporary files after %d "
                                "directories", self.url, SWEEP_MAX_DIRS)  # fmt: skip
                    return
                with contextlib.suppress(OSError), os.scandir(directory) as entries:
                    below.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
            level = below
        yield from level[: max(0, SWEEP_MAX_DIRS - visited)]

    def get(self, key: str) -> dict[str, Any] | None:
        """The document at ``key``, or None when there is none."""
        target = self.path(key)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(
                f"could not read {key!r} from {self.url}: {exc}", url=self.url, key=key
            ) from exc
        return decode_document(data, url=self.url, key=key)

    def exists(self, key: str) -> bool:
        """Whether a document is stored at ``key``."""
        return self.path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        """Keys that start with ``prefix``, sorted; temporary files are never listed."""
        check_prefix(prefix)
        # Walk only the deepest directory the prefix pins down.
        head, _, _ = prefix.rpartition("/")
        start = self.root.joinpath(*head.split("/")) if head else self.root
        if not start.is_dir():
            return []
        keys: list[str] = []
        for dirpath, _dirs, files in os.walk(start):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for fname in files:
                if fname.startswith(_TMP_PREFIX):
                    continue
                key = fname if rel_dir == "." else f"{rel_dir}/{fname}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(
                f"could not delete {key!r} from {self.url}: {exc}", url=self.url, key=key
            ) from exc

    def __repr__(self) -> str:
        return f"FileResultStore({self.url!r})"


def _create_temp(target: Path) -> tuple[int, str]:
    """Create (exclusively) a temporary file beside ``target``: its descriptor and path."""
    match = _SUFFIX.fullmatch(target.suffix)
    suffix = match.group(0) if match else ""
    while True:
        path = target.with_name(f"{_OWN_TMP_PREFIX}{secrets.token_hex(8)}{suffix}")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            return os.open(path, flags, 0o600), str(path)
        except FileExistsError:  # 64 random bits: a clash means retry, not a problem
            continue


def _encode(document: dict[str, Any], key: str) -> bytes:
    try:
        return encode_document(document)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"document for {key!r} is not JSON: {exc}", key=key) from exc
