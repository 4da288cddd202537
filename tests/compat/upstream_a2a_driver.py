"""Runs agentcore-rl-toolkit 0.1.4's A2A code inside its own environment (not rollhub's).

    python upstream_a2a_driver.py agent HOST PORT         # serves upstream_a2a_agent.py
    python upstream_a2a_driver.py agentcore ARN PROVIDER  # tasks as JSON on stdin
    python upstream_a2a_driver.py url URL                 # tasks as JSON on stdin

``agent`` serves the upstream executor with bedrock-agentcore's ``build_a2a_app`` (as
upstream's agents are served). ``agentcore`` runs each task through upstream's own
``make_session`` (backend ``agentcore_a2a``) under ``run_rollout_with_bounds``; upstream
hard-codes the public data-plane URL for its A2A route, so only that URL is pointed at
``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE`` (the boto3 calls read that variable themselves).
``url`` drives a running A2A server with upstream's ``A2ARolloutSession`` base, given the
transport the way upstream's own tests give it (``DockerA2ASession`` itself needs Docker's
``awslogs`` log driver, STS and a bridge network IP: none of which exists under podman here).
Prints one JSON line: per task, the dump or the exception that ended it.
"""

import asyncio
import json
import os
import sys
import uuid


def serve_agent(host, port):
    import uvicorn
    from agentcore_rl_toolkit.rollout_session.a2a_executor import make_ping_handler
    from bedrock_agentcore.runtime.a2a import build_a2a_app

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from upstream_a2a_agent import MathExecutor

    executor = MathExecutor()
    app = build_a2a_app(executor, ping_handler=make_ping_handler(executor))
    uvicorn.run(app, host=host, port=int(port), log_level="warning")


def _bounds():
    from agentcore_rl_toolkit.concurrency.priority_assigner import LocalPriorityAssigner
    from agentcore_rl_toolkit.concurrency.priority_semaphore import LocalPrioritySemaphore
    from agentcore_rl_toolkit.rollout_session.lifecycle import RolloutSessionBounds

    return RolloutSessionBounds(
        container_semaphore=LocalPrioritySemaphore(4),
        rollout_semaphore=LocalPrioritySemaphore(4),
        container_priority_assigner=LocalPriorityAssigner(),
        rollout_priority_assigner=LocalPriorityAssigner(),
        container_setup_timeout=60,
        agent_run_timeout=60,
    )


async def _run_all(tasks, make):
    from agentcore_rl_toolkit.aws_tools.persistent_dict import NullPersister, PersistentDict
    from agentcore_rl_toolkit.rollout_session.lifecycle import run_rollout_with_bounds

    bounds = _bounds()

    async def one(task):
        state = PersistentDict(persister=NullPersister())
        session_id = f"up014-{uuid.uuid4().hex}"
        try:
            dump = await run_rollout_with_bounds(
                state, bounds, str(task.get("id")), make(session_id, state), task
            )
            return {
                "session_id": session_id,
                "dump": dump.model_dump(mode="json"),
                "successful": dump.is_successful(),
                "reward_repr": repr(dump.reward),
            }
        except Exception as exc:  # the point of some tests: what upstream raises
            return {
                "session_id": session_id,
                "error": type(exc).__name__,
                "message": str(exc)[:2000],
            }

    return list(await asyncio.gather(*(one(task) for task in tasks)))


def run_agentcore(arn, provider):
    from agentcore_rl_toolkit.rollout_session import agentcore_a2a_session
    from agentcore_rl_toolkit.rollout_session.factory import make_session

    endpoint = os.environ["AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"].rstrip("/")
    agentcore_a2a_session.runtime_invocations_url = lambda runtime_arn: (
        f"{endpoint}/runtimes/{agentcore_a2a_session.quote(runtime_arn, safe='')}/invocations/"
    )
    cfg = {
        "backend": "agentcore_a2a",
        "agentcore_runtime_arn": arn,
        "capacity_provider_arn": provider,
    }
    tasks = json.loads(sys.stdin.read())
    out = asyncio.run(_run_all(tasks, lambda sid, state: make_session(sid, cfg, state)))
    print(json.dumps(out), flush=True)


def run_url(url):
    import httpx
    from agentcore_rl_toolkit.rollout_session.a2a_client import A2ARolloutSession, build_a2a_client

    class UrlSession(A2ARolloutSession):
        async def _client(self):
            if not hasattr(self, "_http"):
                self._http = httpx.AsyncClient(timeout=60)
            return build_a2a_client(self._http, url)

        async def shutdown(self):
            await self._cancel_if_unfinished()
            if hasattr(self, "_http"):
                await self._http.aclose()

    tasks = json.loads(sys.stdin.read())
    out = asyncio.run(_run_all(tasks, lambda sid, state: UrlSession(sid, state)))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"agent": serve_agent, "agentcore": run_agentcore, "url": run_url}[mode](*args)
