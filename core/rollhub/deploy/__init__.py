"""Ship agents and sandboxes to AWS Bedrock AgentCore Runtime (``rollhub deploy``).

- :mod:`~rollhub.deploy.dockerfile`: the Dockerfile for an agent built on ``RolloutApp``.
- :mod:`~rollhub.deploy.sandbox_image`: any image plus the sandbox health shim.
- :mod:`~rollhub.deploy.container`: docker / finch / podman: build, login, push.
- :mod:`~rollhub.deploy.ecr`: the repository and the registry login.
- :mod:`~rollhub.deploy.agentcore_control`: create or update the runtime, wait for READY.
- :mod:`~rollhub.deploy.deployer`: the steps in order, printed (and only printed in a dry run).

Nothing here imports boto3 at import time; the AWS clients are created on the first real call.
"""

from __future__ import annotations

from rollhub.deploy.errors import DeployError

__all__ = ["DeployError"]
