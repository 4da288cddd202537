"""What a Ray failure means to the ``ray`` runtime, as rollhub errors.

Ray is imported only when an error is mapped: the runtime has started, so it is installed.
"""

from __future__ import annotations

from rollhub.errors import SubmissionError

__all__ = ["submit_error"]


def submit_error(exc: Exception, actor: int, node: str, sid: str) -> SubmissionError:
    """A failed start of session ``sid`` on actor number ``actor`` (on node ``node``): a
    dead actor may be replaced (transient); a refused payload is not."""
    import ray

    dead = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)
    if isinstance(exc, dead):
        return SubmissionError(
            f"ray actor {actor} on node {node} is gone: {exc}",
            transient=True,
            session_id=sid,
        )
    cause = getattr(exc, "cause", None) or exc
    return SubmissionError(
        f"ray actor {actor} refused session {sid}: {type(cause).__name__}: {cause}",
        transient=False,
        session_id=sid,
    )
