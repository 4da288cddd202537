"""Encoding and decoding through the Rust ``tokenizers`` backend, without the Python wrapper.

A Hugging Face fast tokenizer's ``encode``/``decode`` wrap the Rust tokenizer in several
layers of Python (argument normalisation, ``to_py_obj`` on every id list, batch
encoding of a one-item batch). The gateway encodes every turn's tail and decodes every
sampled id, so it calls the Rust tokenizer directly when that gives the same ids and text.

:class:`TokenCodec` checks this when it is built: it encodes and decodes probe texts both
ways (special tokens, leading spaces, digits, non-ASCII, a chat template's markup) and
uses the direct path only if every probe agrees. A tokenizer whose class changes encoding
or decoding in Python (a slow tokenizer, a subclass that overrides ``_decode``) keeps the
wrapper.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rollhub_gateway.families.base import IncrementalDecoder

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

__all__ = ["BatchDecoder", "TokenCodec", "decode_text", "token_id"]

log = logging.getLogger(__name__)

#: texts longer than this are encoded by the batch call, which releases the GIL (big
#: requests are prepared in worker threads while the event loop serves others)
_GIL_FREE_CHARS = 16 * 1024

_PROBES = (
    "Hello, world! 12345 6.02e23",
    "  leading spaces\n\ttabs and\r\nnewlines  ",
    "naïve café — 東京 🚀 ｆｕｌｌｗｉｄｔｈ",
    '{"name": "f", "arguments": {"q": "x"}}',
)


class TokenCodec:
    """Text ↔ ids for one tokenizer, as the tokenizer itself does it (no special tokens added).

    :param tokenizer: a Hugging Face tokenizer.
    :param extra_probes: more texts to check (e.g. a rendered chat template).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, extra_probes: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self._rust: Tokenizer | None = None
        rust = getattr(tokenizer, "backend_tokenizer", None)
        if rust is not None and hasattr(rust, "encode") and hasattr(rust, "decode"):
            added = [
                str(t) for t in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values()
            ]
            probes = (*_PROBES, "".join(added[:8]) + " x " + " y ".join(added[:8]), *extra_probes)
            if all(self._agrees(rust, text) for text in probes):
                self._rust = rust
            else:
                log.info(
                    "tokenizer %s encodes through its Python wrapper", type(tokenizer).__name__
                )

    @property
    def direct(self) -> bool:
        """Whether encoding and decoding go straight to the Rust tokenizer."""
        return self._rust is not None

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no BOS/EOS added: chat templates write their own)."""
        if self._rust is not None:
            return _direct_encode(self._rust, text)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int], **_: object) -> str:
        """Text of ``ids``, special tokens kept, no clean-up of spaces.

        Accepts (and ignores) the wrapper's keyword arguments, so it can stand in for the
        tokenizer where only ``decode(ids, skip_special_tokens=False,
        clean_up_tokenization_spaces=False)`` is called.
        """
        if self._rust is not None:
            text: str = self._rust.decode(ids, skip_special_tokens=False)
        else:
            text = decode_text(
                self.tokenizer, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        return text

    def _agrees(self, rust: Tokenizer, text: str) -> bool:
        try:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            if _direct_encode(rust, text) != ids:
                return False
            want = decode_text(
                self.tokenizer, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            return bool(rust.decode(ids, skip_special_tokens=False) == want)
        except Exception as exc:  # a tokenizer without this API: keep the wrapper
            log.debug("direct tokenizer probe failed: %s", exc)
            return False


def decode_text(tokenizer: PreTrainedTokenizerBase, ids: list[int], **options: bool) -> str:
    """``tokenizer.decode(ids, **options)``: the text of one id sequence."""
    text = tokenizer.decode(ids, **options)
    assert isinstance(text, str)  # one sequence of ids decodes to one string
    return text


def token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    """``tokenizer.convert_tokens_to_ids(token)``: the id of one token."""
    tid = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(tid, int)  # one token converts to one id
    return tid


def _direct_encode(rust: Tokenizer, text: str) -> list[int]:
    # the batch calls release the GIL (big texts are encoded in worker threads while the
    # loop serves others); the "fast" one skips character offsets, which the gateway never
    # reads: a sixth less CPU for a turn's tail
    fast = getattr(rust, "encode_batch_fast", None)
    if fast is not None:
        ids: list[int] = fast([text], add_special_tokens=False)[0].ids
    elif len(text) > _GIL_FREE_CHARS:
        ids = rust.encode_batch([text], add_special_tokens=False)[0].ids
    else:
        ids = rust.encode(text, add_special_tokens=False).ids
    return ids


class BatchDecoder(IncrementalDecoder):
    """An :class:`IncrementalDecoder` that decodes a whole first batch of ids in one call.

    The id-by-id path decodes two windows per sampled id; a non-streamed turn hands the
    parser every id at once, and one decode of them gives the same text. Later feeds
    (streamed chunks) continue id by id from the last id, exactly as if it had been fed
    alone; a batch whose text ends inside a UTF-8 sequence also goes id by id.
    """

    def feed(self, token_ids: list[int]) -> str:
        """Add ids; return the text they complete."""
        if self.ids or len(token_ids) < 2:
            return super().feed(token_ids)
        kept = [i for i in token_ids if i not in self._stop]
        text = self._decode(kept) if kept else ""
        if text.endswith("\ufffd"):
            return super().feed(token_ids)
        self.ids.extend(token_ids)
        if kept:  # as after feeding the last kept id alone: its window starts there
            last = max(i for i, t in enumerate(token_ids) if t not in self._stop)
            self._prefix, self._read = last, last + 1
        self.text += text
        return text
