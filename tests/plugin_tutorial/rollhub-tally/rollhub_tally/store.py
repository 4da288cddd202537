"""A result store in this process's memory: ``memory://NAME`` (for in-process runtimes)."""

import threading

from rollhub.stores import check_key, check_prefix
from rollhub.stores.base import ResultStore

_SHELVES = {}
_LOCK = threading.Lock()


class MemoryStore(ResultStore):
    """Documents in a dict shared by every store opened on the same ``memory://NAME``."""

    name = "memory"

    def __init__(self, shelf):
        self.shelf = shelf
        with _LOCK:
            self._docs = _SHELVES.setdefault(shelf, {})

    @classmethod
    def from_url(cls, url, **options):
        return cls(url[len("memory://") :] or "default", **options)

    @property
    def url(self):
        return f"memory://{self.shelf}"

    def put(self, key, document):
        with _LOCK:
            self._docs[check_key(key)] = dict(document)

    def get(self, key):
        with _LOCK:
            doc = self._docs.get(check_key(key))
        return dict(doc) if doc is not None else None

    def exists(self, key):
        with _LOCK:
            return check_key(key) in self._docs

    def list(self, prefix=""):
        check_prefix(prefix)
        with _LOCK:
            return sorted(k for k in self._docs if k.startswith(prefix))

    def delete(self, key):
        with _LOCK:
            self._docs.pop(check_key(key), None)
