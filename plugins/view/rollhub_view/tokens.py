"""Token ids to text with the run's tokenizer, and one episode laid out for the page.

The tokenizer is ``rollhub_gateway.models.load_tokenizer(model)`` (offline), loaded once
per model in a background thread. Without rollhub-gateway, or when the model cannot be
loaded, the page shows token ids instead of text.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any

from rollhub.errors import UsageError
from rollhub.export import episode_from_row
from rollhub.trace import TraceRecord

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["Decoder", "decoder_for", "episode_view", "parse_chat", "parse_tool_calls"]

log = logging.getLogger(__name__)

#: what a training run's episodes file adds to each export row
TRAINING_FIELDS = ("step", "advantage", "trained")
#: the fields of a turn the page shows (the export keeps these)
TURN_FIELDS = ("turn_index", "start", "end", "finish_reason", "weight_version", "drift",
               "ill_formed", "masked_tokens")

#: how long an episode request waits for a tokenizer still loading
LOAD_WAIT_S = 60.0


class Decoder:
    """Decodes the token ids of one model (or leaves them as ids when it cannot).

    :param model: ``[token_source] model`` of the run (a config word or a directory).
    """

    def __init__(self, model: str | None) -> None:
        self.model = model
        self.error: str | None = None if model else "the run's config names no model"
        self._tok: PreTrainedTokenizerBase | None = None
        self._pieces: dict[int, str] = {}
        self._ready = threading.Event()
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Begin loading the tokenizer in the background (once)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        if not self.model:
            self._ready.set()
            return
        threading.Thread(target=self._load, name=f"tokenizer-{self.model}", daemon=True).start()

    def _load(self) -> None:
        try:
            self._tok = _load_tokenizer(str(self.model))
        except ImportError:
            self.error = "rollhub-gateway is not installed: showing token ids"
        except Exception as exc:  # any failure to load: ids are still worth showing
            self.error = f"tokenizer of {self.model!r} not loaded ({exc}): showing token ids"
            log.warning("%s", self.error)
        finally:
            self._ready.set()

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase | None:
        """The loaded tokenizer, or None (not loaded yet, or it could not be)."""
        return self._tok

    def ready(self, timeout: float = LOAD_WAIT_S) -> bool:
        """Wait for the tokenizer; True when token text is available."""
        self.start()
        self._ready.wait(timeout)
        return self._tok is not None

    def pieces(self, ids: list[int]) -> list[str] | None:
        """The text of each token on its own (None without a tokenizer)."""
        if not self.ready():
            return None
        tok = self._tok
        assert tok is not None  # ready() is True only with a tokenizer
        out = []
        cache = self._pieces
        for i in ids:
            piece = cache.get(i)
            if piece is None:
                piece = cache[i] = str(tok.decode([i]))
            out.append(piece)
        return out

    def text(self, ids: list[int]) -> str | None:
        """The ids decoded together (None without a tokenizer)."""
        if not ids:
            return ""
        if not self.ready():
            return None
        tok = self._tok
        assert tok is not None  # ready() is True only with a tokenizer
        return str(tok.decode(ids))


def _load_tokenizer(model: str) -> PreTrainedTokenizerBase:
    """The gateway's tokenizer of ``model``; its converted copy first when one is cached."""
    from rollhub_gateway.models import converted_dir, load_tokenizer

    try:
        cache = converted_dir(model)
    except Exception:  # not a GGUF model, or not resolvable here: the plain loader says why
        cache = None
    if cache is not None and (cache / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(cache))
    return load_tokenizer(model)


_DECODERS: dict[str | None, Decoder] = {}
_DECODERS_LOCK = threading.Lock()


def decoder_for(model: str | None) -> Decoder:
    """The shared decoder of a model (loading starts now)."""
    with _DECODERS_LOCK:
        dec = _DECODERS.get(model)
        if dec is None:
            dec = _DECODERS[model] = Decoder(model)
    dec.start()
    return dec


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_tool_calls(text: str | None) -> list[dict[str, Any]]:
    """The tool calls a sampled text makes in the ``<tool_call>{json}</tool_call>`` markup
    (Hermes, Qwen): ``{"name", "arguments"}`` each; a block that is not JSON is kept as
    ``{"name": None, "raw": …}`` so an ill-formed call still shows."""
    calls: list[dict[str, Any]] = []
    for m in _TOOL_CALL.finditer(text or ""):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            calls.append({"name": None, "raw": m.group(1)})
            continue
        if not isinstance(obj, dict):
            calls.append({"name": None, "raw": m.group(1)})
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append({"name": obj.get("name"), "arguments": args})
    return calls


_CHATML = re.compile(r"<\|im_start\|>([^\n]*)\n(.*?)(?:<\|im_end\|>\n?|$)", re.S)


def parse_chat(text: str) -> list[dict[str, str]]:
    """Messages of a ChatML-rendered text (``<|im_start|>role ... <|im_end|>``).

    Text in another template is one message of role ``text``.
    """
    if "<|im_start|>" not in text:
        return [{"role": "text", "content": text}] if text else []
    out = []
    head = text.split("<|im_start|>", 1)[0]
    if head.strip():
        out.append({"role": "text", "content": head})
    for m in _CHATML.finditer(text):
        out.append({"role": m.group(1).strip() or "?", "content": m.group(2)})
    if out and not out[-1]["content"] and not text.endswith("<|im_end|>\n"):
        out.pop()  # the generation prompt ("<|im_start|>assistant\n"): the reply follows
    return out


def _trace_view(trace: TraceRecord, dec: Decoder) -> dict[str, Any]:
    prompt = trace.prompt_ids
    resp = trace.response_ids
    spans = sorted(trace.turns, key=lambda t: t.start)
    turn_of: list[int | None] = [None] * len(resp)
    version_of: list[int | None] = [None] * len(resp)
    for t in spans:
        for i in range(t.start, t.end):
            turn_of[i] = t.turn_index
            version_of[i] = t.weight_version
    turns = []
    prev_end = 0
    for k, t in enumerate(spans):
        seen = prompt + resp[: t.start] if k == 0 else resp[prev_end : t.start]
        text_in = dec.text(seen)
        text_out = dec.text(resp[t.start : t.end])
        turns.append({
            **t.model_dump(include=set(TURN_FIELDS)),
            "input_ids": None if text_in is not None else seen,
            "input_messages": parse_chat(text_in) if text_in is not None else None,
            "output_ids": None if text_out is not None else resp[t.start : t.end],
            "output_text": text_out,
            "tool_calls": parse_tool_calls(text_out),
        })
        prev_end = t.end
    tail = resp[prev_end:]
    ids = prompt + resp
    pieces = dec.pieces(ids)
    return {
        "branch_id": trace.branch_id,
        "parent_branch_id": trace.parent_branch_id,
        "fork_turn": trace.fork_turn,
        "finish_reason": trace.finish_reason,
        "model_id": trace.model_id,
        # what the export keeps beside the schema's fields, as it wrote it
        "metadata": {**trace.metadata, **(trace.model_extra or {})},
        "turns": turns,
        "after_last_turn": dec.text(tail) if tail else "",
        "tokens": {
            "ids": ids,
            "text": pieces,
            # p: prompt, s: sampled (mask 1, trained), e: environment (mask 0: tool results,
            # template; not trained)
            "kind": ["p"] * len(prompt) + ["s" if m else "e" for m in trace.response_mask],
            "logprob": [None] * len(prompt) + [round(float(x), 5)
                                               for x in trace.response_logprobs],
            "turn": [None] * len(prompt) + turn_of,
            "version": [None] * len(prompt) + version_of,
        },
    }


def episode_view(row: dict[str, Any], dec: Decoder, n: int) -> dict[str, Any]:
    """One export row as the episode page shows it: fields, turns, tokens, error.

    The row is read as the core reads it (:func:`rollhub.export.episode_from_row`); what a
    training run adds to it (``step``, ``advantage``, ``trained``) is shown beside.

    :raises UsageError: the row is not one of the export schema this rollhub reads.
    """
    try:
        episode = episode_from_row(row)
    except (KeyError, TypeError, ValueError) as exc:  # ValidationError is a ValueError
        raise UsageError(f"episode {n} is not a readable export row: {exc}") from None
    metrics = episode.metrics
    error = None
    if episode.error is not None:
        error = {**episode.error.to_dict()}
        error["traceback"] = (
            error["traceback"] or metrics.get("traceback") or metrics.get("error_traceback")
        )
    return {
        "n": n,
        "episode_id": episode.episode_id,
        "group_id": episode.group_id,
        "session_id": episode.session_id,
        "sample_index": episode.sample_index,
        "status": episode.status,
        "trainable": episode.trainable,
        "reward": episode.reward,
        "weight_version": episode.weight_version,
        "num_turns": episode.num_turns,
        "num_sampled_tokens": episode.num_sampled_tokens,
        "elapsed_s": row.get("elapsed_s"),
        **{k: row.get(k) for k in ("exp_id", *TRAINING_FIELDS)},
        "reward_components": episode.reward_components,
        "payload": episode.payload,
        "result": episode.result,
        "metrics": metrics,
        # a session rollout's phase seconds (setup, run, teardown), from rollhub.sessions
        "session": metrics.get("session"),
        "error": error,
        "traces": [_trace_view(t, dec) for t in episode.traces],
        "decoded": dec.tokenizer is not None,
        "decoder_note": dec.error,
    }
