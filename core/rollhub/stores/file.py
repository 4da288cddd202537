"""``file://DIR``: the embedded result store, one JSON file per key under a directory.

Writes are atomic: the document goes to a temporary file in the key's own directory, is
flushed to disk, then renamed over the key with :func:`os.replace`. A reader therefore
sees either no file or the whole document, never a partial one. A process killed
mid-write leaves its temporary file behind; :meth:`FileResultStore.clean_temp` removes
those older than a few minutes (a live write takes milliseconds), and the agent app runs
it when it opens the store.

Writes never go through a symbolic link inside the root: a link planted there (to
``/etc`` or another run) would otherwise carry results out of the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from rollhub.errors import StoreError
from rollhub.stores import check_key, check_prefix
from rollhub.stores.base import ResultStore, decode_document, encode_document

__all__ = ["FileResultStore"]

log = logging.getLogger(__name__)

_TMP_PREFIX = ".tmp-"
#: Age after which a temporary file is certainly not a write in progress.
TEMP_MAX_AGE_S = 600.0


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
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".json", dir=target.parent)
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

    def clean_temp(self, max_age_s: float = TEMP_MAX_AGE_S) -> int:
        """Remove temporary files older than ``max_age_s`` (left by killed writers).

        :returns: how many were removed.
        """
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - max_age_s
        removed = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for fname in files:
                if not fname.startswith(_TMP_PREFIX):
                    continue
                path = os.path.join(dirpath, fname)
                with contextlib.suppress(OSError):
                    if os.lstat(path).st_mtime < cutoff:
                        os.unlink(path)
                        removed += 1
        if removed:
            log.info("removed %d stale temporary files from %s", removed, self.url)
        return removed

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


def _encode(document: dict[str, Any], key: str) -> bytes:
    try:
        return encode_document(document)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"document for {key!r} is not JSON: {exc}", key=key) from exc
