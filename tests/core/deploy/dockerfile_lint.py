"""A small Dockerfile parser and the checks an AgentCore image must pass (hadolint-style).

Parsing follows the Dockerfile reference: ``#`` comment lines, ``\\`` line continuations,
one instruction per logical line, JSON (exec) or shell form arguments. The checks are
the contract of AgentCore Runtime and of ``rollhub deploy`` (linux/arm64, port 8080, no
root, no secrets in the image, dependencies from the project's own files).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Instruction:
    """One instruction: upper-cased keyword, its raw argument text, its first line number."""

    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form CMD/ENTRYPOINT/RUN, else None."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        value = json.loads(text)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), value
        return value


def parse(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile (comments dropped, continuations joined)."""
    out: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # comment lines inside a continuation are ignored
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    assert not pending, "a continuation runs past the end of the file"
    return out


SECRET_NAME = re.compile(
    r"(SECRET|PASSWORD|PASSWD|TOKEN|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE
)
SECRET_VALUE = re.compile(r"(AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9]{16,}|-----BEGIN)")


def _env_names(args: str) -> list[str]:
    """Variable names an ENV or ARG line sets (``A=1 B=2`` or the legacy ``A 1``)."""
    if "=" not in args.split(" ", 1)[0]:
        return [args.split(" ", 1)[0]]
    return re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", args)


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """Instructions grouped by build stage (each starts at FROM; ARGs before it are global)."""
    groups: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            groups.append([])
        if not groups and ins.keyword == "ARG":
            continue
        assert groups, f"line {ins.line}: {ins.keyword} before FROM"
        groups[-1].append(ins)
    return groups


def global_args(instructions: list[Instruction]) -> dict[str, str]:
    """Defaults of the ARGs declared before the first FROM (the ones FROM lines may use)."""
    found: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "FROM":
            break
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            found[name.strip()] = default.strip()
    return found


def expand(text: str, args: dict[str, str]) -> str:
    """``${NAME}`` and ``$NAME`` replaced by the ARG defaults (a build without --build-arg)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), text)


def check_agentcore_image(text: str, *, require_non_root: bool = True) -> list[str]:
    """Problems that keep this Dockerfile from being a good AgentCore Runtime image."""
    problems: list[str] = []
    instructions = parse(text)
    groups = stages(instructions)
    defaults = global_args(instructions)
    if not groups:
        return ["no FROM"]
    for group in groups:
        frm = group[0]
        if "--platform=linux/arm64" not in expand(frm.args, defaults).split():
            problems.append(f"line {frm.line}: FROM without --platform=linux/arm64")
    final = groups[-1]
    keywords = [i.keyword for i in final]
    exposed = [i.args.split() for i in final if i.keyword == "EXPOSE"]
    if not any("8080" in ports or "8080/tcp" in ports for ports in exposed):
        problems.append("final stage does not EXPOSE 8080")
    users = [i for i in final if i.keyword == "USER"]
    if require_non_root:
        if not users:
            problems.append("final stage runs as root (no USER)")
        elif users[-1].args.split(":")[0] in {"root", "0"}:
            problems.append(f"line {users[-1].line}: USER {users[-1].args} is root")
    if "CMD" not in keywords and "ENTRYPOINT" not in keywords:
        problems.append("no CMD or ENTRYPOINT")
    for ins in instructions:
        if ins.keyword in {"ENV", "ARG"}:
            for name in _env_names(ins.args):
                if SECRET_NAME.search(name):
                    problems.append(f"line {ins.line}: {ins.keyword} {name} looks like a secret")
        if SECRET_VALUE.search(ins.args):
            problems.append(f"line {ins.line}: a credential-like value in {ins.keyword}")
        if ins.keyword == "ADD" and re.search(r"https?://", ins.args):
            problems.append(f"line {ins.line}: ADD from a URL")
    for ins in final:
        form = ins.exec_form() if ins.keyword in {"CMD", "ENTRYPOINT"} else None
        if ins.keyword in {"CMD", "ENTRYPOINT"} and form is None:
            problems.append(f"line {ins.line}: {ins.keyword} in shell form (signals miss the app)")
    return problems


def serve_command(text: str) -> list[str]:
    """ENTRYPOINT + CMD of the final stage, as the container would run them."""
    final = stages(parse(text))[-1]
    entry = [i.exec_form() for i in final if i.keyword == "ENTRYPOINT"]
    cmd = [i.exec_form() for i in final if i.keyword == "CMD"]
    return [*(entry[-1] if entry else []), *(cmd[-1] if cmd else [])]


def copies_before_install(text: str) -> list[str]:
    """Sources of the COPY lines that come before the first RUN installing dependencies."""
    final = stages(parse(text))[-1]
    sources: list[str] = []
    for ins in final:
        if ins.keyword == "RUN" and re.search(
            r"(uv sync|poetry install|pip install( --?[a-z-]+ \S+)* (-r|\.))", ins.args
        ):
            return sources
        if ins.keyword == "COPY":
            parts = [p for p in ins.args.split() if not p.startswith("--")]
            sources.extend(parts[:-1])
    return sources
