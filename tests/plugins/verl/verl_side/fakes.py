"""What cannot run here: verl's GPU rollout replicas, and Ray's actor RPC in front of them.

- :class:`ScriptedReplica` follows the contract of verl's vLLM server actor
  (``vLLMHttpServer.generate`` in ``verl/workers/rollout/vllm_rollout/vllm_async_server.py``):
  keyword arguments ``prompt_ids``, ``sampling_params`` (``max_tokens`` popped, ``logprobs``
  a flag), ``request_id`` and multimodal ones; it returns ``TokenOutput`` with
  ``stop_reason`` ``completed`` and ``extra_fields["global_steps"]``. Its replies are
  chosen from the decoded prompt (a chat-template-rendered conversation).
- :class:`LocalActor` stands in for a Ray actor handle: ``handle.method.remote(...)``
  returns an awaitable, as Ray's ``ObjectRef`` is. verl's real ``LLMServerClient`` and
  real ``GlobalRequestLoadBalancer`` run behind it unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from typing import Any

from verl.workers.rollout.replica import TokenOutput

TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'


def logprob_at(position: int, token_id: int) -> float:
    """The logprob the replica reports for ``token_id`` at ``position`` of its output."""
    return -((position * 31 + token_id) % 97) / 50.0 - 0.01


class ScriptedReplica:
    """One fake rollout replica holding the weights of step ``global_steps``."""

    def __init__(
        self, tokenizer: Any, global_steps: int = 0, log: list[dict[str, Any]] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.global_steps = global_steps
        #: calls in arrival order (a list shared by several replicas when given)
        self.calls: list[dict[str, Any]] = log if log is not None else []

    def reply(self, prompt: str) -> str:
        """The scripted assistant text for a rendered prompt."""
        last_user = prompt.rsplit("<|im_start|>user", 1)[-1]
        if "pencils" in prompt:  # the GSM8K example's synthetic problems
            return pencils_reply(prompt, last_user)
        if "<tool_response>" in last_user:
            return "6 times 7 is 42.\nAnswer: 42"
        if "[tool]" in last_user:
            return TOOL_CALL
        if "[long]" in last_user:
            return " ".join(["step"] * 400)
        return "The result is 42.\nAnswer: 42"

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        priority: int = 0,
        kv_transfer_params: Any = None,
    ) -> TokenOutput:
        params = dict(sampling_params)
        max_tokens = params.pop("max_tokens")
        self.calls.append(
            {"prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params),
             "request_id": request_id, "priority": priority}
        )  # fmt: skip
        text = self.reply(self.tokenizer.decode(prompt_ids, skip_special_tokens=False))
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        ids = ids[:max_tokens]
        lps = [logprob_at(i, t) for i, t in enumerate(ids)] if params.get("logprobs") else None
        await asyncio.sleep(0)
        return TokenOutput(
            token_ids=ids,
            log_probs=lps,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )


def pencils_reply(prompt: str, last_user: str) -> str:
    """Solve 'b boxes with a pencils each and then c loose pencils' with the calculator."""
    if "<tool_response>" in last_user:
        value = last_user.split("<tool_response>\n", 1)[1].split("\n</tool_response>", 1)[0]
        return f"That makes {value} pencils.\n#### {value}"
    b, a, c = (int(w) for w in re.findall(r"\d+", last_user)[:3])
    args = json.dumps({"expression": f"{b} * {a} + {c}"})
    return f'<tool_call>\n{{"name": "calculator", "arguments": {args}}}\n</tool_call>'


class _Remote:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        if inspect.iscoroutinefunction(self.fn):
            return asyncio.ensure_future(self.fn(*args, **kwargs))
        future = asyncio.get_running_loop().create_future()
        future.set_result(self.fn(*args, **kwargs))
        return future


class LocalActor:
    """``handle.method.remote(...)`` on a plain object, resolved on the running loop."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> _Remote:
        return _Remote(getattr(self._obj, name))
