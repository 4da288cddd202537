"""Token ids of scripted engine outputs, written as text (shared by the suites that drive
agents through the gateway with the scripted engine)."""

from __future__ import annotations

import json
from typing import Any


class Ids:
    """Token ids of scripted outputs, written as text (Hermes-style tool calls)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def text(self, text: str) -> list[int]:
        return [*self.tok.encode(text, add_special_tokens=False), self.end]

    def tool_call(self, name: str, args: dict[str, Any]) -> list[int]:
        body = json.dumps({"name": name, "arguments": args})
        return self.text(f"<tool_call>\n{body}\n</tool_call>")
