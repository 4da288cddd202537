"""slime's ``Sample`` type, structurally (fields, order, defaults, ``Status``) as recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    """One rollout sample as slime's trainer consumes it."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: list[int] | torch.Tensor | None = None  # noqa: F821
    rollout_top_p_token_offsets: list[int] | torch.Tensor | None = None  # noqa: F821
    rollout_routed_experts: list[list[int]] | torch.Tensor | None = None  # noqa: F821
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    class Status(Enum):
        """Where a sample's generation ended."""

        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    @dataclass
    class SpecInfo:
        """Speculative-decoding counters."""

        spec_accept_token_num: int = 0
        spec_draft_token_num: int = 0
        spec_verify_ct: int = 0
        completion_token_num: int = 0

    spec_info: SpecInfo = field(default_factory=SpecInfo)

    @dataclass
    class PrefixCacheInfo:
        """Prefix-cache counters."""

        cached_tokens: int = 0
        total_prompt_tokens: int = 0

    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)
