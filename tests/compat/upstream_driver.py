"""Runs agentcore-rl-toolkit code inside its own virtual environment (not rollhub's).

    python upstream_driver.py client ARN BUCKET EXP_ID   # payloads as JSON on stdin
    python upstream_driver.py agent PORT                 # serves upstream_math_agent.py

``client`` runs upstream's ``RolloutClient.run_batch`` and prints one JSON line: the
installed version and every ``BatchItem``. ``agent`` serves the upstream agent module on
127.0.0.1:PORT. Endpoints and credentials come from the ``AWS_*`` environment.
"""

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path


def run_client(arn: str, bucket: str, exp_id: str) -> None:
    from agentcore_rl_toolkit import RolloutClient

    payloads = json.loads(sys.stdin.read())
    client = RolloutClient(arn, bucket, exp_id, tps_limit=50, temperature=0.5)
    items = [
        {"success": i.success, "result": i.result, "error": i.error, "index": i.index}
        for i in client.run_batch(
            payloads, max_concurrent_sessions=3, timeout=60, initial_interval=0.05
        )
    ]
    version = importlib.metadata.version("agentcore-rl-toolkit")
    print(json.dumps({"version": version, "items": items}), flush=True)


def run_agent(port: int) -> None:
    path = Path(__file__).with_name("upstream_math_agent.py")
    spec = importlib.util.spec_from_file_location("upstream_math_agent", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.app.run(port=port, host="127.0.0.1")


if __name__ == "__main__":
    if sys.argv[1] == "client":
        run_client(*sys.argv[2:5])
    else:
        run_agent(int(sys.argv[2]))
