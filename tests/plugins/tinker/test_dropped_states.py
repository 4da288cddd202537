"""A checkpoint the run deletes (``training.keep_checkpoints``) has its ``save_state``
deleted from the Tinker service too, which would otherwise keep every one.

The real SDK talks to a loopback of the hosted API (:mod:`tests.tinker_loopback`) with its
delete route added: ``DELETE /api/v1/training_runs/{run}/checkpoints/{checkpoint}``, the
call behind ``RestClient.delete_checkpoint_from_tinker_path``.
The local skyrl server has no delete route: ``test_training_local`` sees its 404 there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
import tinker
from aiohttp import web
from rollhub_tinker.trainer import TinkerTrainer, TinkerTrainerOptions, TinkerTrainingError

from tests.tinker_loopback import TinkerLoopback


class _Service(TinkerLoopback):
    """The SDK's session routes, and the hosted delete route with what it deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.stored = {("run-1", "weights/s-000001"), ("run-1", "weights/s-000002")}
        self.deleted: list[tuple[str, str]] = []
        self.refuse = False

    async def handle(self, request: web.Request) -> web.Response:
        prefix = "/api/v1/training_runs/"
        path = request.path
        if request.method != "DELETE" or not path.startswith(prefix):
            return await super().handle(request)
        run, checkpoint = path[len(prefix):].split("/checkpoints/", 1)
        if self.refuse:
            return web.json_response({"detail": "not your checkpoint"}, status=403)
        if (run, checkpoint) not in self.stored:
            return web.json_response({"detail": "checkpoint not found"}, status=404)
        self.stored.remove((run, checkpoint))
        self.deleted.append((run, checkpoint))
        return web.Response(status=200)


@pytest.fixture
async def service() -> AsyncIterator[tuple[_Service, TinkerTrainer]]:
    state = _Service()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # aiohttp has no public accessor
    url = f"http://127.0.0.1:{port}"
    trainer = TinkerTrainer(TinkerTrainerOptions(base_url=url, request_timeout_s=30))
    trainer.service = await asyncio.to_thread(
        lambda: tinker.ServiceClient(base_url=url, api_key="tml-loopback")
    )
    yield state, trainer
    await trainer.close()
    await runner.cleanup()


async def test_a_dropped_state_is_deleted_from_the_service(
    service: tuple[_Service, TinkerTrainer], caplog: pytest.LogCaptureFixture
) -> None:
    state, trainer = service
    caplog.set_level(logging.INFO, logger="rollhub_tinker.trainer")
    await trainer.drop_state({"tinker_path": "tinker://run-1/weights/s-000001", "steps_done": 1})
    assert state.deleted == [("run-1", "weights/s-000001")]
    assert state.stored == {("run-1", "weights/s-000002")}  # the newer one stays
    assert "deleted from the service" in caplog.text
    # a state the service no longer holds (expired, deleted by hand): nothing to free
    await trainer.drop_state({"tinker_path": "tinker://run-1/weights/s-000001", "steps_done": 1})
    assert "stays: the service holds no such state or deletes none (404)" in caplog.text
    # a state written by a trainer that stored none: nothing asked
    await trainer.drop_state({})
    assert len(state.deleted) == 1


async def test_a_refused_delete_is_a_typed_error_naming_the_call(
    service: tuple[_Service, TinkerTrainer],
) -> None:
    state, trainer = service
    state.refuse = True
    with pytest.raises(TinkerTrainingError, match=r"delete_checkpoint\('tinker://run-1/"):
        await trainer.drop_state({"tinker_path": "tinker://run-1/weights/s-000002"})
    assert state.deleted == []
