"""One session's lifecycle under shared bounds: slots, priority, timeouts, teardown, retry."""

from __future__ import annotations

import asyncio
import math

import pytest
from rollhub.errors import SessionError
from rollhub.rollout import RolloutConfig, RolloutRequest
from rollhub.sessions import (
    PrioritySlots,
    RolloutSession,
    SessionBounds,
    SessionDump,
    SessionsConfig,
    drive_session,
    run_with_attempts,
)
from rollhub.sessions.base import check_reward


class Scripted(RolloutSession):
    """A session whose phases do what the test says, and log what happened."""

    def __init__(self, sid, log, *, setup_s=0.0, run_s=0.0, setup_exc=None, run_exc=None,
                 shutdown_exc=None, result=None):  # fmt: skip
        self.session_id = sid
        self.log = log
        self.setup_s, self.run_s = setup_s, run_s
        self.setup_exc, self.run_exc, self.shutdown_exc = setup_exc, run_exc, shutdown_exc
        self.result = {"rewards": 1.0} if result is None else result
        self.shutdowns = 0

    async def setup(self, task):
        self.log.append(("setup", self.session_id))
        await asyncio.sleep(self.setup_s)
        if self.setup_exc:
            raise self.setup_exc

    async def run(self, task):
        self.log.append(("run", self.session_id))
        await asyncio.sleep(self.run_s)
        if self.run_exc:
            raise self.run_exc
        return SessionDump.from_result(self.result)

    async def shutdown(self):
        self.shutdowns += 1
        self.log.append(("shutdown", self.session_id))
        await asyncio.sleep(0.01)
        if self.shutdown_exc:
            raise self.shutdown_exc


def bounds(**kw) -> SessionBounds:
    return SessionBounds.from_config(SessionsConfig(**kw), concurrency=4, timeout_s=5.0)


async def test_ok_session_times_every_phase_and_shuts_down_once():
    log: list = []
    session = Scripted("s1", log, setup_s=0.05, run_s=0.05)
    out = await drive_session(session, {}, bounds())
    assert out.status == "ok" and out.dump.reward == 1.0 and out.error is None
    assert [p for p, _ in log] == ["setup", "run", "shutdown"]
    assert session.shutdowns == 1
    assert set(out.phases) == {"setup_wait_s", "setup_s", "run_wait_s", "run_s", "shutdown_s"}
    assert out.phases["setup_s"] >= 0.04 and out.phases["run_s"] >= 0.04


async def test_a_teardown_error_never_replaces_the_result():
    session = Scripted("s1", [], shutdown_exc=RuntimeError("stop failed: AccessDenied"))
    out = await drive_session(session, {}, bounds())
    assert out.status == "ok" and out.dump.result == {"rewards": 1.0}
    assert out.shutdown_error == "RuntimeError: stop failed: AccessDenied"


@pytest.mark.parametrize(
    ("kw", "status", "phase_option"),
    [
        ({"setup_s": 1.0}, "timeout", "setup_timeout_s"),
        ({"run_s": 1.0}, "timeout", "run_timeout_s"),
        (
            {"setup_exc": SessionError("no container", phase="setup", transient=True)},
            "submit_error",
            None,
        ),
        ({"run_exc": RuntimeError("bug")}, "agent_error", None),
    ],
)
async def test_failures_are_outcomes_with_their_cause_and_still_shut_down(kw, status, phase_option):
    log: list = []
    session = Scripted("s1", log, **kw)
    out = await drive_session(session, {}, bounds(setup_timeout_s=0.1, run_timeout_s=0.1))
    assert out.status == status
    assert session.shutdowns == 1 and log[-1] == ("shutdown", "s1")
    if phase_option:
        assert phase_option in out.error.message
    if "setup_exc" in kw:
        assert out.transient and "run" not in [p for p, _ in log]


async def test_agent_failure_is_agent_error_with_its_message():
    session = Scripted("s1", [], result={"rewards": math.nan})
    out = await drive_session(session, {}, bounds())
    assert out.status == "agent_error"
    assert "not finite" in out.error.message and "rewards" in out.error.message


async def test_cancel_shuts_down_and_frees_both_slots():
    b = bounds(setup_slots=1, run_slots=1)
    session = Scripted("s1", [], run_s=10)
    task = asyncio.ensure_future(drive_session(session, {}, b))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert session.shutdowns == 1
    assert b.setup_slots.in_use == 0 and b.run_slots.in_use == 0


async def test_run_slot_is_released_before_teardown_and_setup_slot_after():
    b = bounds(setup_slots=2, run_slots=1)
    seen: list = []

    class Watching(Scripted):
        async def shutdown(self):
            seen.append((b.run_slots.in_use, b.setup_slots.in_use))
            await super().shutdown()

    await drive_session(Watching("s1", []), {}, b)
    assert seen == [(0, 1)]
    assert b.setup_slots.in_use == 0


async def test_earlier_groups_get_slots_first():
    slots = PrioritySlots(1)
    order: list[int] = []
    await slots.acquire()

    async def wait(priority):
        async with slots.slot(priority):
            order.append(priority)

    waiters = [asyncio.ensure_future(wait(p)) for p in (3, 1, 2, 1, 0)]
    await asyncio.sleep(0.01)
    slots.release()
    await asyncio.gather(*waiters)
    assert order == [0, 1, 1, 2, 3]
    assert slots.in_use == 0


async def test_setups_run_while_runs_are_capped():
    b = bounds(setup_slots=4, run_slots=1)
    log: list = []
    sessions = [Scripted(f"s{i}", log, setup_s=0.05, run_s=0.05) for i in range(3)]
    outs = await asyncio.gather(*(drive_session(s, {}, b) for s in sessions))
    assert all(o.status == "ok" for o in outs)
    # all three set up before the second run starts: setup is not held back by the run cap
    first_runs = [i for i, (p, _) in enumerate(log) if p == "run"]
    setups = [i for i, (p, _) in enumerate(log) if p == "setup"]
    assert max(setups) < first_runs[1]


async def test_creation_rate_spaces_setups():
    b = bounds(sessions_per_s=20.0)
    outs = await asyncio.gather(*(drive_session(Scripted(f"s{i}", []), {}, b) for i in range(4)))
    waits = sorted(o.phases["rate_wait_s"] for o in outs)
    assert waits[-1] >= 0.1  # the 4th waited ~3 intervals of 50 ms


def _request(sid="g-0-abc") -> RolloutRequest:
    return RolloutRequest(
        payload={"x": 1},
        rollout=RolloutConfig(
            exp_id="e", input_id="g", session_id=sid, result_store="file:///tmp/x"
        ),
    )


async def test_infrastructure_failures_are_retried_under_a_new_session():
    log: list = []
    opened: list[str] = []

    def open_session(request):
        sid = request.rollout.session_id
        opened.append(sid)
        exc = SessionError("container did not start", phase="setup", transient=True)
        return Scripted(sid, log, setup_exc=exc if len(opened) == 1 else None)

    out, last = await run_with_attempts(open_session, _request(), bounds(), attempts=2)
    assert out.status == "ok"
    assert opened == ["g-0-abc", "g-0-abc-r1"] and last.rollout.session_id == "g-0-abc-r1"
    assert out.dead_sessions == [{"session_id": "g-0-abc", "cause": out.dead_sessions[0]["cause"]}]
    assert "did not start" in out.dead_sessions[0]["cause"]


async def test_sessions_all_lost_to_the_infrastructure_end_infra_error():
    """Every session a transient failure ended: infra_error, never the agent's fault."""
    opened: list[str] = []

    def open_session(request):
        opened.append(request.rollout.session_id)
        exc = SessionError("the transport broke", phase="run", transient=True)
        return Scripted(request.rollout.session_id, [], run_exc=exc)

    out, _ = await run_with_attempts(open_session, _request(), bounds(), attempts=2)
    assert out.status == "infra_error" and opened == ["g-0-abc", "g-0-abc-r1"]
    assert "transport broke" in out.error.message and len(out.dead_sessions) == 1


async def test_a_failure_of_the_agent_is_not_retried():
    opened: list[str] = []

    def open_session(request):
        opened.append(request.rollout.session_id)
        return Scripted(request.rollout.session_id, [], run_exc=RuntimeError("agent bug"))

    out, _ = await run_with_attempts(open_session, _request(), bounds(), attempts=3)
    assert out.status == "agent_error" and len(opened) == 1


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan], "1.0", True])
def test_rewards_that_are_not_finite_numbers_are_refused(value):
    with pytest.raises(ValueError, match="rewards"):
        check_reward(value, "rewards")


def test_a_reward_list_gives_its_last_element():
    assert check_reward([0.0, 2], "rewards") == 2.0 and check_reward([], "rewards") is None
