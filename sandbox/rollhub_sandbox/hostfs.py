"""File operations of the local provider that never follow a symlink the sandbox planted.

A workspace is written by untrusted commands, so any entry in it may be a symlink to a host
file, a FIFO, a sparse file of any size or a directory made read-only. These helpers run on
the host (in worker threads) and hold to three rules:

- directories are walked with file descriptors opened ``O_NOFOLLOW``, so a symlink in the
  middle of a path is an error, never a way out of the workspace;
- files are opened ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat`` to be regular
  (a FIFO cannot block the caller, a device cannot be read);
- a tree is removed without following links, making read-only directories writable first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["copy_tree", "open_dir", "read_regular", "remove_tree", "replace_tree", "upload_tree",
           "write_regular"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(path: str) -> int:
    """A descriptor of the directory ``path``; its last part must not be a symlink.

    :raises OSError: missing, a symlink (``ELOOP``) or not a directory.
    """
    return os.open(path, _DIR_FLAGS)


def read_regular(path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``, else an error).

    :raises OSError: not a regular file (``EINVAL``), a final symlink (``ELOOP``), larger
        than ``max_bytes`` (``EFBIG``), or unreadable.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(22, "not a regular file")
        if info.st_size > max_bytes:
            raise OSError(27, f"file is {info.st_size} bytes, over the {max_bytes}-byte limit")
        chunks, total = [], 0
        # The size may grow while we read (a command still writing): stop at the limit.
        while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise OSError(27, f"file grew over the {max_bytes}-byte limit while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_regular(path: str, data: bytes, *, dir_fd: int | None = None,
                  mode: int | None = None) -> None:
    """Write ``data`` to ``path`` (created or truncated), refusing a symlink or non-file.

    :raises OSError: ``path`` is a symlink (``ELOOP``), a FIFO without reader (``ENXIO``),
        not a regular file (``EINVAL``) or not writable.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(22, "not a regular file")
        # Truncate only after the type check: O_TRUNC on open would act on a device first.
        os.ftruncate(fd, 0)
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def copy_tree(src: Path, dest_fd: int) -> None:
    """Copy the host directory ``src`` into the directory open as ``dest_fd`` (merging).

    Existing subdirectories are entered without following links; a symlink, FIFO or other
    non-file where a file goes is an error, not a target. Symlinks in ``src`` are copied as
    links (they are the caller's own).
    """
    for entry in os.scandir(src):
        if entry.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=dest_fd)
            os.symlink(os.readlink(entry.path), entry.name, dir_fd=dest_fd)
        elif entry.is_dir():
            sub = open_dir_at(dest_fd, entry.name)
            try:
                copy_tree(Path(entry.path), sub)
            finally:
                os.close(sub)
        elif entry.is_file():
            write_regular(entry.name, Path(entry.path).read_bytes(), dir_fd=dest_fd,
                          mode=stat.S_IMODE(entry.stat().st_mode))
        else:
            log.debug("copy skips %s (not a regular file)", entry.path)


def upload_tree(src: Path, dest: str) -> None:
    """Copy ``src`` into the trusted directory ``dest`` (created if missing), merging."""
    os.makedirs(dest, exist_ok=True)
    fd = open_dir(dest)
    try:
        copy_tree(src, fd)
    finally:
        os.close(fd)


def open_dir_at(parent_fd: int, name: str) -> int:
    """Open (creating if missing) the directory ``name`` under ``parent_fd``, no links."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)


def _make_writable(path: str) -> None:
    # lstat, not stat: a symlink's target is never chmod-ed.
    info = os.lstat(path)
    if stat.S_ISDIR(info.st_mode):
        os.chmod(path, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)


def remove_tree(path: str) -> list[str]:
    """Delete ``path`` (a tree, a file or a link) without following links; return what is left.

    A directory a command made read-only (``chmod 555``) is made ``u+rwx`` and the removal
    retried, so it goes as long as this user owns it. What cannot be removed is returned
    (and logged by the caller), never silently left.
    """
    failed: list[str] = []

    def retry(func: Callable[..., object], failed_path: str, _exc: object) -> None:
        try:
            _make_writable(os.path.dirname(failed_path))
            with contextlib.suppress(OSError):
                _make_writable(failed_path)
            func(failed_path)
        except FileNotFoundError:
            pass
        except OSError:
            failed.append(failed_path)

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        try:
            os.unlink(path)
        except OSError:
            failed.append(path)
        return failed
    with contextlib.suppress(OSError):
        _make_writable(path)
    # rmtree never follows symlinks (it unlinks them); onerror is 3.11's spelling of onexc.
    shutil.rmtree(path, onerror=retry)
    if os.path.lexists(path) and path not in failed:
        failed.append(path)
    return failed


def replace_tree(src: Path, parent: str, name: str) -> None:
    """Make ``parent/name`` an exact fresh copy of ``src``: remove it, recreate, copy.

    ``parent`` is trusted (resolved and confined by the caller); ``name`` is one path part.
    :raises OSError: the old entry could not be removed entirely, or the copy failed.
    """
    left = remove_tree(os.path.join(parent, name))
    if left:
        raise OSError(39, f"could not remove {len(left)} entr(y/ies), e.g. {left[0]!r}")
    parent_fd = open_dir(parent)
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
        dest_fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
    try:
        copy_tree(src, dest_fd)
    finally:
        os.close(dest_fd)
