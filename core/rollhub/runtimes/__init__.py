"""The runtimes the core ships: ``local`` (worker processes on this machine), ``agentcore``
(AWS Bedrock AgentCore Runtime) and ``ray`` (a Ray cluster). Each module imports its heavy
dependencies (boto3, ray) only when the runtime is built."""
