"""Token-fidelity conformance: scripted multi-turn tool sessions for every supported family.

For each family a scripted engine samples the family's exact markup (reasoning, tool
calls, answers) as token ids, and an agent loop sends the parsed answers back the way an
OpenAI client does (reasoning dropped, arguments as JSON text). The run checks that

- every sampled id is in the records with loss mask 1 and its exact logprob, and no
  sampled id is trained twice;
- an ``append`` turn's prompt starts with the previous prompt + output of its branch;
- a ``rerender``/``fork`` happens only where the template itself rewrites the history
  (its rendering of the earlier conversation is not a prefix of the new one), and never
  for append-only templates;
- streamed deltas are a prefix of the final parse, and tool calls parse back exactly.

``rollhub gateway conformance [--family NAME …] [--markdown]`` prints a per-family table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rollhub.sampling import SamplingParams

from rollhub_gateway.chat_model import HFChatModel, build_chat_model
from rollhub_gateway.chat_templates.oracle import direct_message, direct_render, template_rewrites
from rollhub_gateway.conformance.report import (
    APPEND_ONLY,
    CONFORMANCE_FAMILIES,
    FamilyReport,
    check_parse,
    check_records,
    format_table,
)
from rollhub_gateway.conformance.script import TOOLS, Step, agent_message, output_ids, script
from rollhub_gateway.conformance.templates import (
    NO_TOOL_TEMPLATES,
    refusal_report,
    template_for,
    tokenizer_for,
    training_copies,
)
from rollhub_gateway.engines.scripted import ScriptedBackend, scripted_logprob
from rollhub_gateway.turns import ChatTurn

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionAssistantMessageParam, ChatCompletionMessageParam

log = logging.getLogger(__name__)

__all__ = [
    "main",
    "model_for",
    "run_family",
    "run_family_http",
]


def model_for(name: str, template_file: str | None = None) -> HFChatModel:
    """The chat model a conformance family runs on (real template, real vocabulary).

    :param template_file: another TRL template for the same vocabulary (a training copy).
    """
    if name == "smollm2":
        return build_chat_model()
    from rollhub_gateway.testing_tokenizers import trl_template

    template = trl_template(template_file) if template_file else template_for(name)
    return build_chat_model(name, tokenizer=tokenizer_for(name), chat_template=template)


def run_family(name: str, model: HFChatModel | None = None) -> FamilyReport:
    """Run the scripted session of one conformance family and check it."""
    fam_word, parallel = CONFORMANCE_FAMILIES[name]
    model = model or model_for(name)
    model.verify_every = 1  # check every window render against a whole render
    report = FamilyReport(name, model.family)
    if model.family != fam_word:
        report.failures.append(f"template detected as {model.family!r}, expected {fam_word!r}")
    tools = TOOLS if model.supports_tools() else None
    r = model.renderer
    fam = r.family
    windowed_before = model.renderer.windowed
    backend = ScriptedBackend()
    conv = model.new_conversation(f"conformance-{name}")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris and the time in UTC?"},
    ]
    if tools is None:
        messages[1]["content"] = "Hi!"
    sampled: dict[int, tuple[list[int], list[float]]] = {}
    seen: list[tuple[Any, list[int]]] = []
    #: the same history in the form a Hugging Face user hands the template, without the
    #: renderer: what tells the template's own rewrites from the renderer's
    direct = [dict(m) for m in messages]
    prev_len = 0
    for step, (reasoning, content, calls, follow_up) in enumerate(script(parallel, bool(tools))):
        prep = conv.prepare(ChatTurn(list(messages), tools=tools))
        report.turns += 1
        step_ = (reasoning, content, calls, follow_up)
        ids = output_ids(model, prep.prompt_ids, step_, opens=prep.state.opens_reasoning)
        if calls and not fam.content_with_calls:
            content = ""
        backend.add(ids)
        gen = asyncio.run(backend.generate(prep.prompt_ids, SamplingParams(max_tokens=4096)))
        parser = model.new_parser(prep)
        streamed = ""
        for t in gen.token_ids:
            streamed += "".join(d.text for d in parser.feed([t]) if d.kind == "content")
        parsed = parser.finish()
        check_parse(report, step, parsed, streamed, content, calls)
        # independent view: would a full re-render have extended the previous ids?
        fresh = r.encode(r.render_text(r.template_messages(messages), tools, generation=True))
        if prep.drift == "append" and fresh != prep.prompt_ids:
            report.retok_diff += 1
        if seen and prep.drift == "append":
            last_prep, last_out = seen[-1]
            want = last_prep.prompt_ids + last_out
            if prep.prompt_ids[: len(want)] != want:
                report.failures.append(
                    f"turn {step}: append prompt does not extend turn {step - 1}"
                )
        if prep.drift != "append" and not template_rewrites(r, direct, prev_len, tools):
            # the template's own rendering of the history as the agent sent it appends:
            # the renderer, not the template, changed the earlier turns
            report.failures.append(
                f"turn {step}: {prep.drift} where the template's own rendering appends"
            )
        if prep.state.base is None and prep.prompt_ids != r.encode(
            direct_render(r, direct, tools, True)
        ):
            report.failures.append(
                f"turn {step}: the {prep.drift} prompt is not the template's own rendering of "
                "the history: the renderer changed it"
            )
        prev_len = len(messages)
        conv.commit(prep, gen, parsed, weight_version=step)
        sampled[prep.turn_index] = (list(gen.token_ids), list(gen.logprobs))
        seen.append((prep, list(gen.token_ids)))
        messages.append(agent_message(parsed))
        direct.append(direct_message(fam, parsed))
        for c in parsed.tool_calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": c.id,
                    "content": json.dumps({"tool": c.name, "ok": True}),
                }
            )
            direct.append(messages[-1])
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
            direct.append(messages[-1])
    if model.renderer.windowed is False and windowed_before:
        report.failures.append("a window render disagreed with the whole render")
    check_records(report, conv.traces(), sampled)
    report.counts = conv.drift_counts()
    if name in APPEND_ONLY and (report.counts["rerender"] or report.counts["fork"]):
        report.failures.append("append-only template produced a rerender or fork")
    return report


def run_family_http(name: str, model: HFChatModel | None = None) -> FamilyReport:
    """The same session through the gateway's HTTP API with the ``openai`` SDK.

    A :class:`~rollhub_gateway.gateway.Gateway` serves on 127.0.0.1 with the scripted
    engine; the agent loop is an OpenAI Chat Completions client. Checks the finished
    session's records against the ids and logprobs the engine returned and the prompts
    it was given.
    """
    import openai
    from openai.types.chat import ChatCompletionMessageFunctionToolCall

    from rollhub_gateway.gateway import Gateway
    from rollhub_gateway.http.serving import ThreadedGateway

    _fam_word, parallel = CONFORMANCE_FAMILIES[name]
    model = model or model_for(name)
    report = FamilyReport(name, model.family, via="http")
    tools = TOOLS if model.supports_tools() else None
    steps = script(parallel, bool(tools))
    backend = ScriptedBackend()
    outputs: list[list[int]] = []

    def entry(step: Step) -> Callable[[list[int]], list[int]]:
        def sample(prompt_ids: list[int]) -> list[int]:
            outputs.append(output_ids(model, prompt_ids, step))
            return outputs[-1]

        return sample

    backend.add(*(entry(step) for step in steps))
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris and the time in UTC?" if tools else "Hi!"},
    ]
    with ThreadedGateway(Gateway(backend, model)) as gw:
        session = gw.open_session(f"conformance-http-{name}")
        client = openai.OpenAI(base_url=gw.base_url, api_key=session.key, max_retries=0)
        for step, (_, _content, calls, follow_up) in enumerate(steps):
            kwargs: dict[str, Any] = {"tools": tools} if tools else {}
            resp = client.chat.completions.create(
                model=model.model_id, messages=messages, max_tokens=4096, **kwargs
            )
            report.turns += 1
            msg = resp.choices[0].message
            # the gateway answers function tool calls only (never custom ones)
            fn_calls: list[ChatCompletionMessageFunctionToolCall] = []
            for c in msg.tool_calls or []:
                if not isinstance(c, ChatCompletionMessageFunctionToolCall):
                    raise TypeError(f"turn {step}: not a function tool call: {c!r}")
                fn_calls.append(c)
            got = [(c.function.name, json.loads(c.function.arguments)) for c in fn_calls]
            if got != list(calls):
                report.failures.append(f"turn {step}: tool calls {got} != {calls}")
            echo: ChatCompletionAssistantMessageParam = {
                "role": "assistant",
                "content": msg.content,
            }
            if fn_calls:
                # what c.model_dump(exclude_none=True) gives: id, function, type
                echo["tool_calls"] = [
                    {
                        "id": c.id,
                        "function": {"arguments": c.function.arguments, "name": c.function.name},
                        "type": "function",
                    }
                    for c in fn_calls
                ]
            messages.append(echo)
            for c in fn_calls:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": c.id,
                        "content": json.dumps({"tool": c.function.name, "ok": True}),
                    }
                )
            if follow_up:
                messages.append({"role": "user", "content": follow_up})
        records = gw.finish_session(session.session_id)
    sampled = {
        i: (ids, [scripted_logprob(k, t) for k, t in enumerate(ids)])
        for i, ids in enumerate(outputs)
    }
    check_records(report, records, sampled)
    by_turn = {s.turn_index: (rec, s) for rec in records for s in rec.turns}
    for i in range(1, len(outputs)):
        rec, span = by_turn[i]
        if span.drift == "append":
            want = backend.prompts[i - 1] + outputs[i - 1]
            if backend.prompts[i][: len(want)] != want:
                report.failures.append(f"turn {i}: append prompt does not extend turn {i - 1}")
        if rec.full_ids[: len(rec.prompt_ids) + span.start] != backend.prompts[i]:
            report.failures.append(f"turn {i}: record context differs from the engine's prompt")
    report.counts = dict(records[0].metadata.get("drift", {})) if records else {}
    if name in APPEND_ONLY and (report.counts.get("rerender") or report.counts.get("fork")):
        report.failures.append("append-only template produced a rerender or fork")
    return report


def main(argv: list[str] | None = None) -> int:
    """``rollhub gateway conformance``: run every family (or ``--family``), print the table.

    Returns 0 when every check passed, 1 otherwise.
    """
    ap = argparse.ArgumentParser(
        prog="rollhub gateway conformance", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--family",
        action="append",
        choices=sorted(CONFORMANCE_FAMILIES),
        help="run only this family (repeatable)",
    )
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument(
        "--via",
        choices=["both", "http", "direct"],
        default="both",
        help="drive sessions through the HTTP API, the Conversation API, or both",
    )
    ap.add_argument(
        "--all-templates",
        action="store_true",
        help="also run TRL's training copies of each template and check that templates "
        "without a tool-call syntax refuse tools",
    )
    args = ap.parse_args(argv)
    runs: list[tuple[str, str, str | None]] = [
        (n, n, None) for n in args.family or CONFORMANCE_FAMILIES
    ]
    if args.all_templates:
        runs += [
            (copy.removesuffix(".jinja"), n, copy)
            for copy, n in training_copies().items()
            if not args.family or n in args.family
        ]
    reports = []
    for label, n, template_file in runs:
        try:
            model = model_for(n, template_file)
            direct = run_family(n, model) if args.via != "http" else None
            http = run_family_http(n, model) if args.via != "direct" else None
        except Exception as exc:  # a crash is a failed family, not a failed run
            log.exception("family %s crashed", label)
            reports.append(FamilyReport(label, "?", failures=[f"{type(exc).__name__}: {exc}"]))
            continue
        if direct and http and direct.counts != http.counts:
            http.failures.append(f"HTTP drift {http.counts} != direct {direct.counts}")
        for r in (direct, http):
            if r is not None:
                r.name = label
                reports.append(r)
    if args.all_templates and not args.family:
        reports += [refusal_report(t) for t in NO_TOOL_TEMPLATES]
    print(format_table(reports, markdown=args.markdown))
    bad = [r for r in reports if not r.ok]
    for r in bad:
        print(f"\n{r.name}:", *r.failures, sep="\n  ", file=sys.stderr)
    return 1 if bad else 0
