"""Compatibility with agentcore-rl-toolkit: its agents, its client and a local data plane.

- :mod:`rollhub.compat.agentcore_rl`: ``AgentCoreRLApp``, upstream agents under rollhub and
  rollhub agents under upstream's client.
- :mod:`rollhub.compat.upstream_client`: upstream's ``RolloutClient`` signature on rollhub's
  client.
- :mod:`rollhub.compat.upstream_layout`: reading upstream's result documents with a status.
- :mod:`rollhub.compat.plugin`: the ``agentcore-rl+s3://`` store scheme for ``rollhub.toml``.
- :mod:`rollhub.compat.agentcore_local`: ``LocalAgentCore``, the ``bedrock-agentcore``
  data plane on loopback, forwarding to local agent apps (and running sandbox commands
  with :mod:`rollhub.compat.agentcore_commands`).

See ``docs/migrating-from-agentcore-rl-toolkit.md``.
"""
