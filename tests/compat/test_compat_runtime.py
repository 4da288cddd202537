"""rollhub.compat's ``AgentCoreRuntimeApp`` and ``AgentCoreHttpClient`` through the local
AgentCore data plane: background starts, lookups by id, recovery after a lost handle."""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest
from rollhub.compat import AgentCoreHttpClient, AgentCoreRuntimeApp, InvocationError, runtime_client
from rollhub.compat.agentcore_local import runtime_arn
from rollhub.testing.servers import serve_app

ARN = runtime_arn("compat_runtime")
SID = "session-00000000-0000-0000-000000000001"


@pytest.fixture
def app(tmp_path):
    app = AgentCoreRuntimeApp(state_dir=tmp_path / "records")
    app.gate = threading.Event()

    @app.entrypoint
    def handler(payload):
        if payload.get("blocked"):
            app.gate.wait(10)
        if payload.get("fail"):
            raise ValueError("bad input")
        return {"echo": payload, "n": 7}

    return app


async def test_background_start_get_and_recovery(plane, app, monkeypatch):
    monkeypatch.setattr(runtime_client, "POLL_INTERVAL", 0.05)
    with serve_app(app) as url:
        plane.app.add_runtime(ARN, url)
        async with AgentCoreHttpClient(ARN) as client:
            handle = await client.invoke({"blocked": True}, session_id=SID, invocation_id="inv-1",
                                         background=True)  # fmt: skip
            with pytest.raises(TimeoutError):
                await handle.result(timeout=0.05)
            assert (await handle.status())["status"] == "in_progress"
            # a second start of the same id does not run the handler again
            again = await client.invoke({"blocked": True}, session_id=SID, invocation_id="inv-1",
                                        background=True)  # fmt: skip
            assert (await again.status())["status"] == "in_progress"
            app.gate.set()
            restored = client.get_invocation(session_id=SID, invocation_id="inv-1")
            assert await restored.result(timeout=5) == {"echo": {"blocked": True}, "n": 7}
            # foreground: the result itself
            assert (await client.invoke({"x": 1}, session_id=SID))["n"] == 7
            with pytest.raises(InvocationError, match="bad input") as info:
                await client.invoke({"fail": True}, session_id=SID)
            assert pickle.loads(pickle.dumps(info.value)).snapshot["error"] == "bad input"
            with pytest.raises(InvocationError, match="not_found"):
                await client.get_invocation(session_id=SID, invocation_id="unknown").result()
            await client.stop_session(SID)
    assert ("StopRuntimeSession", ARN, SID) in plane.app.calls


async def test_a_record_outlives_the_app_that_wrote_it(plane, tmp_path):
    first = AgentCoreRuntimeApp(state_dir=tmp_path / "records")
    first.entrypoint(lambda payload: {"done": payload["k"]})
    with serve_app(first) as url:
        plane.app.add_runtime(ARN, url)
        async with AgentCoreHttpClient(ARN) as client:
            assert await client.invoke({"k": 1}, session_id=SID, invocation_id="keep") == {
                "done": 1
            }
    second = AgentCoreRuntimeApp(state_dir=tmp_path / "records")
    second.entrypoint(lambda payload: {"done": "again"})
    with serve_app(second) as url:
        plane.app.add_runtime(ARN, url)
        async with AgentCoreHttpClient(ARN) as client:
            handle = client.get_invocation(session_id=SID, invocation_id="keep")
            assert await handle.result(timeout=5) == {"done": 1}


async def test_bad_envelopes_are_refused_naming_the_field(app):
    import httpx

    with serve_app(app) as url:
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"{url}/invocations",
                json={
                    "_agentcore_runtime": {
                        "version": 1,
                        "operation": "get",
                        "invocation_id": "x",
                        "background": True,
                    }
                },
            )
            plain = await http.post(f"{url}/invocations", json={"k": 2})
    assert answer.status_code == 400 and "background is only valid for start" in answer.text
    assert plain.json() == {"echo": {"k": 2}, "n": 7}  # no envelope: the plain entrypoint
    await asyncio.sleep(0)
