"""Damaged journals: every kind of damage is detected, the session is refused (never
continued on a wrong prefix), the refusal comes in the caller's wire format, and
``/metrics`` counts it."""

from __future__ import annotations

import json
import shutil
import sqlite3

import aiohttp
import anthropic
import openai
import pytest
from rollhub.sampling import Generation
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend, scripted_logprob
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.journal import JournalCorruptError, SessionJournal
from rollhub_gateway.testing_tokenizers import family_template, vocab_tokenizer
from rollhub_gateway.turns import ChatTurn

USER = [{"role": "user", "content": "hi"}]


def _model(journal):
    return build_chat_model(
        "qwen2_5", tokenizer=vocab_tokenizer("qwen2_5"),
        chat_template=family_template("qwen2_5"), journal=journal,
    )  # fmt: skip


def _two_turns(journal_path) -> SessionJournal:
    """A session ``s`` with two committed turns; returns the model's journal (still open)."""
    model = _model(journal_path)
    r = model.renderer
    conv = model.new_conversation("s")
    msgs = list(USER)
    for k in range(2):
        prep = conv.prepare(ChatTurn(list(msgs)))
        ids = [*r.encode(f"answer {k}"), r.stop_ids[0]]
        lps = [scripted_logprob(i, t) for i, t in enumerate(ids)]
        conv.commit(prep, Generation(ids, lps, "stop"), model.parse(ids, prep))
        msgs += [
            {"role": "assistant", "content": f"answer {k}"},
            {"role": "user", "content": "more"},
        ]
    return model.journal


def _edit(path, turn: int, change) -> None:
    db = sqlite3.connect(path)
    (text,) = db.execute("SELECT entry FROM turns WHERE turn=?", (turn,)).fetchone()
    db.execute("UPDATE turns SET entry=? WHERE turn=?", (change(text), turn))
    db.commit()
    db.close()


def _flip_logprob_digit(text: str) -> str:
    at = text.index('"logprobs":[-') + len('"logprobs":[-') + 3
    return text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :]


def _drop_field(text: str) -> str:
    entry = json.loads(text)
    del entry["history_digest"]
    return json.dumps(entry)


@pytest.mark.parametrize(
    ("damage", "kind"),
    [
        (_flip_logprob_digit, "checksum"),
        (lambda t: t[: len(t) // 2], "checksum"),  # a truncated entry
        (_drop_field, "checksum"),
    ],
)
def test_a_damaged_entry_is_refused(tmp_path, damage, kind):
    path = tmp_path / "j.sqlite"
    _two_turns(path).close()
    _edit(path, 1, damage)
    model = _model(path)
    with pytest.raises(JournalCorruptError, match="turn 1 is damaged") as exc:
        model.new_conversation("s")
    assert exc.value.context["kind"] == kind
    assert model.journal.corruptions == {kind: 1}


def test_rows_written_without_a_checksum_are_still_checked_for_fields(tmp_path):
    path = tmp_path / "j.sqlite"
    _two_turns(path).close()
    _edit(path, 1, _drop_field)
    db = sqlite3.connect(path)
    db.execute("UPDATE turns SET crc=NULL")  # as an older gateway wrote them
    db.commit()
    db.close()
    with pytest.raises(JournalCorruptError, match="lacks history_digest"):
        _model(path).new_conversation("s")


def test_a_missing_turn_is_refused(tmp_path):
    path = tmp_path / "j.sqlite"
    _two_turns(path).close()
    db = sqlite3.connect(path)
    db.execute("DELETE FROM turns WHERE turn=0")
    db.commit()
    db.close()
    with pytest.raises(JournalCorruptError, match="parent turn 0 is not in the journal"):
        _model(path).new_conversation("s")


def test_a_cut_write_ahead_log_refuses_the_sessions_it_held(tmp_path):
    """The reported case: a WAL cut by 1,000 bytes silently lost one of two turns."""
    live = tmp_path / "live.sqlite"
    journal = _two_turns(live)  # still open: the turns are only in the WAL, as after a kill
    crashed = tmp_path / "crashed.sqlite"
    shutil.copy(live, crashed)
    shutil.copy(live.with_name("live.sqlite-wal"), crashed.with_name("crashed.sqlite-wal"))
    journal.close()
    wal = crashed.with_name("crashed.sqlite-wal")
    with wal.open("r+b") as f:
        f.truncate(wal.stat().st_size - 1000)
    model = _model(crashed)
    assert model.journal.corruptions == {"torn_wal": 1}
    with pytest.raises(JournalCorruptError) as exc:
        model.new_conversation("s")
    assert exc.value.context["kind"] == "torn_wal"
    model.journal.close()
    # the verdict is kept in the file: SQLite rewrote the log, a later open still refuses
    with pytest.raises(JournalCorruptError):
        _model(crashed).new_conversation("s")
    # sessions opened after the damage are fine
    assert _model(crashed).new_conversation("t").traces() == []


async def test_refusal_in_the_callers_format_and_counted(tmp_path):
    path = tmp_path / "j.sqlite"
    cfg = GatewayConfig(admin_token="adm", log_turns=False)
    model = _model(path)
    r = model.renderer
    gw = Gateway(ScriptedBackend(script=[[*r.encode("hello"), r.stop_ids[0]]]), model, cfg)
    await gw.start()
    key = gw.open_session("s").key
    await openai.AsyncOpenAI(base_url=gw.base_url, api_key=key).chat.completions.create(
        model="m", messages=USER
    )
    await gw.close()
    model.journal.close()
    _edit(path, 0, _flip_logprob_digit)

    gw2 = Gateway(ScriptedBackend(), _model(path), cfg)
    await gw2.start()
    try:
        with pytest.raises(openai.APIStatusError) as err:
            await openai.AsyncOpenAI(
                base_url=gw2.base_url, api_key=key, max_retries=0
            ).chat.completions.create(model="m", messages=USER)
        assert err.value.status_code == 410
        assert err.value.body["code"] == "session_unrecoverable"
        assert "turn 0 is damaged" in err.value.body["message"]
        with pytest.raises(anthropic.APIStatusError) as aerr:
            await anthropic.AsyncAnthropic(
                base_url=gw2.url, api_key=key, max_retries=0
            ).messages.create(model="m", max_tokens=8, messages=USER)
        assert aerr.value.status_code == 410
        assert aerr.value.body["type"] == "error"
        admin = {"Authorization": "Bearer adm"}
        async with aiohttp.ClientSession(headers=admin) as http:
            async with http.get(gw2.url + "/sessions/s/traces") as resp:
                assert resp.status == 410
                assert (await resp.json())["error"]["param"] == "session_id"
            async with http.get(gw2.url + "/metrics") as resp:
                text = await resp.text()
            assert 'rollhub_gateway_journal_corruptions_total{kind="checksum"} 1' in text
            # dropping it clears the damage; the id starts afresh
            async with http.delete(gw2.url + "/sessions/s") as resp:
                assert resp.status == 204
            async with http.post(gw2.url + "/sessions", json={"session_id": "s"}) as resp:
                assert resp.status == 201
    finally:
        await gw2.close()
