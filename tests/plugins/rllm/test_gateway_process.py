"""The rllm-model-gateway child process: started on loopback, stopped by PID, clear failures."""

from __future__ import annotations

import os
import socket

import pytest
from rollhub.errors import TokenRetrievalError
from rollhub_rllm.gateway_process import GatewayProcess, GatewaySettings


async def test_started_on_loopback_and_stopped_by_pid(tmp_path, upstream):
    proc = GatewayProcess(GatewaySettings(engine_url=f"{upstream.url}/v1", data_dir=str(tmp_path)))
    url = await proc.start()
    assert url.startswith("http://127.0.0.1:")
    pid = proc.pid
    assert pid is not None and await proc.start() == url  # idempotent
    config = (tmp_path / "gateway.yaml").read_text()
    assert '"sync_traces": true' in config and '"host": "127.0.0.1"' in config
    await proc.stop()
    assert proc.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    await proc.stop()  # idempotent


async def test_a_gateway_that_cannot_start_is_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = GatewayProcess(
            GatewaySettings(engine_url="http://127.0.0.1:9/v1", port=port, data_dir=str(tmp_path))
        )
        with pytest.raises(
            TokenRetrievalError, match=r"did not start on 127\.0\.0\.1: it exited"
        ) as err:
            await proc.start()
    assert "address already in use" in str(err.value).lower()
    assert proc.pid is None
