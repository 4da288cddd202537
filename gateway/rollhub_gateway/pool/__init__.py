"""A pool of gateway replicas: N processes on this machine, or Ray actors across a cluster.

Enabled by a ``pool`` table in the ``gateway`` token source's options::

    [token_source]
    name = "gateway"
    model = "smollm2-135m-instruct"
    engine = { name = "vllm", options = { url = "http://10.0.0.5:8000" } }
    pool = { replicas = 4, placement = "processes", journal_dir = "runs/journals" }

Modules: :mod:`.placement` (which replica takes a session), :mod:`.replica` (a replica as
the pool sees it), :mod:`.replica_server` (a replica's own side), :mod:`.processes` and
:mod:`.ray_replicas` (the two placements), :mod:`.pool` (sessions to replicas).
"""

from rollhub_gateway.pool.placement import least_loaded
from rollhub_gateway.pool.pool import GatewayPool
from rollhub_gateway.pool.replica import Replica, ReplicaDied, ReplicaUnreachable

__all__ = ["GatewayPool", "Replica", "ReplicaDied", "ReplicaUnreachable", "least_loaded"]
