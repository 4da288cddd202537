"""A runtime that runs the agent app inside the rollhub process, on its event loop."""

from pydantic import Field
from rollhub.errors import SubmissionError
from rollhub.rollout import SubmitReceipt
from rollhub.runtime import Runtime, RuntimeOptions
from rollhub.runtimes.local_worker import load_app


class InlineOptions(RuntimeOptions):
    """``[runtime]`` options of the ``inline`` runtime."""

    app: str = Field(description="the RolloutApp: 'path/to/agent.py:app' or 'pkg.mod:app'")


class InlineRuntime(Runtime):
    """No worker processes: each rollout is a task of this process (for small, fast agents)."""

    name = "inline"
    Options = InlineOptions
    options: InlineOptions
    loopback_callbacks = True  # the agent runs here, so it reaches the client's callbacks

    async def start(self):
        target, _, attr = self.options.app.partition(":")
        if target.endswith(".py"):  # relative to the config file, like every rollhub path
            target = str(self.context.path(target))
        self.app = load_app(f"{target}:{attr or 'app'}")

    async def submit(self, request):
        try:
            run = self.app.start_rollout(request.to_wire())
        except ValueError as exc:  # an invalid request: retrying cannot help
            raise SubmissionError(str(exc), transient=False) from exc
        return SubmitReceipt(
            session_id=request.rollout.session_id,
            result_location=str(run.location),
            runtime=self.name,
        )

    async def cancel(self, session_id):
        await self.app.runner.cancel(session_id, reason="cancelled by the client")

    async def finish(self, session_id):
        return None  # the rollout's task has ended; nothing is held

    async def close(self):
        await self.app.shutdown()  # cancels what still runs, each with a stored result
