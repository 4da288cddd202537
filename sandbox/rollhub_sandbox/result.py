"""What one command produced: :class:`ExecResult`, and the capped output buffer behind it."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_MAX_OUTPUT", "ExecResult", "OutputBuffer"]

#: Bytes kept per stream unless the caller or provider options say otherwise.
DEFAULT_MAX_OUTPUT = 1 << 20


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command: failures and timeouts are results, not exceptions.

    :ivar exit_code: the shell's exit status; ``-N`` when killed by signal N (a timeout
        gives the signal that finally killed it, or 124 where a provider only reports
        "timed out").
    :ivar stdout: standard output, decoded as UTF-8 (invalid bytes replaced), at most
        ``max_output`` bytes of it: when cut, its first and last halves.
    :ivar stderr: standard error, likewise.
    :ivar timed_out: the command ran past its timeout and was killed.
    :ivar duration: wall seconds from start to the end of output.
    :ivar stdout_truncated: more stdout was produced than was kept.
    :ivar stderr_truncated: more stderr was produced than was kept.
    """

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def truncated(self) -> bool:
        """True when either stream was cut at the cap."""
        return self.stdout_truncated or self.stderr_truncated

    def to_dict(self) -> dict[str, object]:
        """Plain data (JSON-safe), e.g. for an agent's tool reply or a result file."""
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timed_out": self.timed_out,
            "duration": self.duration,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
        }


@dataclass
class OutputBuffer:
    """Keeps the first and the last ``limit // 2`` bytes of a stream and counts the rest.

    Both ends are kept because both matter: a failure shows first, a test runner's summary
    comes last (a command cannot push it out of view by printing a lot). Callers keep
    feeding it everything they read, so the producer never blocks on a full pipe; only the
    kept bytes cost memory.
    """

    limit: int
    _head: bytearray = field(default_factory=bytearray)
    _tail: bytearray = field(default_factory=bytearray)
    seen: int = 0

    def feed(self, data: bytes) -> None:
        """Account for ``data``; keep what belongs to the head or the tail."""
        self.seen += len(data)
        head_cap = self.limit - self.limit // 2
        room = head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        tail_cap = self.limit - head_cap
        if data and tail_cap:
            self._tail += data[-tail_cap:]
            del self._tail[:-tail_cap]

    @property
    def kept(self) -> int:
        """Bytes kept (head and tail)."""
        return len(self._head) + len(self._tail)

    @property
    def truncated(self) -> bool:
        """More was seen than kept."""
        return self.seen > self.kept

    def getvalue(self) -> bytes:
        """The kept bytes: the head, then the tail (the middle is gone when truncated)."""
        return bytes(self._head + self._tail)

    def text(self) -> str:
        """The kept bytes as text (UTF-8, invalid or cut sequences replaced)."""
        return self.getvalue().decode("utf-8", errors="replace")
