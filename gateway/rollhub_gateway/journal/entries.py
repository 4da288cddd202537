"""A committed turn as a journal entry, and a session's turn tree rebuilt from its entries.

An entry holds what the trajectory needs to rebuild its turn exactly, without re-rendering:
the prompt tail and sampled ids, logprobs, labels and the (neutral-form) messages the turn
added, with the indices of the turns it continues. Rebuilding refuses entries that continue
a turn the journal no longer holds: their prefix cannot be known.
"""

from __future__ import annotations

from typing import Any

from rollhub_gateway.journal import SessionJournal
from rollhub_gateway.trajectory import TrajectoryTree, TurnNode

__all__ = ["journal_entry", "rebuild"]


def journal_entry(node: TurnNode) -> dict[str, Any]:
    """The journal entry of a committed turn (fields: :data:`journal.ENTRY_FIELDS`)."""
    known = len(node.parent.messages) if node.parent else 0
    entry = {
        "turn": node.index,
        "parent": node.parent.index if node.parent else None,
        "base": node.base.index if node.base else None,
        "extra_ids": node.extra_ids,
        "output_ids": node.output_ids,
        "logprobs": node.logprobs,
        "finish_reason": node.finish_reason,
        "weight_version": node.weight_version,
        "drift": node.drift,
        "ill_formed": node.ill_formed,
        "masked": node.masked_tokens,
        "new_messages": node.messages[known:],
        "history_digest": node.history_digest,
        "prompt_text_len": node.prompt_text_len,
        "prompt_text_digest": node.prompt_text_digest,
        "tools_key": node.tools_key,
    }
    if node.policy is not None:  # runs with several policies only
        entry["policy"] = node.policy
    return entry


def rebuild(
    tree: TrajectoryTree,
    entries: list[dict[str, Any]],
    journal: SessionJournal | None,
    session_id: str,
) -> int:
    """Add the turns of ``entries`` (commit order) to ``tree``; returns the next turn index.

    :raises JournalCorruptError: an entry continues a turn that is not in the journal.
    """
    by_index: dict[int, TurnNode] = {}
    next_turn = 0
    for e in entries:
        for ref in ("parent", "base"):
            if e[ref] is not None and e[ref] not in by_index and journal is not None:
                # a turn this one continues is gone: its prefix cannot be rebuilt
                journal.damaged(
                    session_id, e["turn"], "missing_turn",
                    f"its {ref} turn {e[ref]} is not in the journal",
                )  # fmt: skip
        parent = by_index.get(e["parent"]) if e["parent"] is not None else None
        base = by_index.get(e["base"]) if e["base"] is not None else None
        node = TurnNode(
            index=e["turn"],
            parent=parent,
            base=base,
            extra_ids=e["extra_ids"],
            output_ids=e["output_ids"],
            logprobs=e["logprobs"],
            finish_reason=e["finish_reason"],
            weight_version=e["weight_version"],
            drift=e["drift"],
            ill_formed=e["ill_formed"],
            masked_tokens=e["masked"],
            messages=(parent.messages if parent else []) + e["new_messages"],
            history_digest=e["history_digest"],
            prompt_text_len=e["prompt_text_len"],
            prompt_text_digest=e["prompt_text_digest"],
            tools_key=e["tools_key"],
            policy=e.get("policy"),
        )
        tree.add(node, recovered=True)
        by_index[node.index] = node
        next_turn = max(next_turn, node.index + 1)
    return next_turn
