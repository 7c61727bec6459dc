"""Calls a model repeats instead of answering: how they are recognised, and the turn that asks
for the answer instead (sans-IO; ``pyshim.Agent`` and the HTTP doors both use it).

Small models (qwen2.5-coder-0.5b among them) often answer a tool's result by calling the same
tool with the same arguments again, turn after turn, so that an agent loop never ends. The
invariant: a turn counts as stuck only when *every* call in it is one the conversation already
made and answered (same name, same arguments whatever their formatting, a tool message with its
id); one new call, or any text answer, is never touched.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from . import planner

__all__ = ["NUDGE", "answered", "call_key", "calls_in_text", "nudge", "nudge_text", "repeats_only"]


def call_key(call: Mapping[str, Any]) -> tuple[str, str]:
    """A call's identity: its name and its arguments, whatever their formatting."""
    fn = call["function"]
    try:
        args = json.dumps(json.loads(fn["arguments"]), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        args = str(fn["arguments"])
    return fn["name"], args


def answered(messages: Iterable[Mapping[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """The conversation's calls that a tool message answered, with what it returned, in order."""
    pending: dict[str, dict[str, Any]] = {}
    out: list[tuple[dict[str, Any], str]] = []
    for m in messages:
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or []:
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    pending[str(call.get("id"))] = call
        elif m.get("role") == "tool" and (call := pending.pop(str(m.get("tool_call_id")), None)) is not None:
            content = m.get("content")
            out.append((call, content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)))
    return out


def repeats_only(messages: Iterable[Mapping[str, Any]], result: Mapping[str, Any]) -> bool:
    """Whether the result's calls are all calls the conversation already made and answered."""
    calls = result.get("tool_calls") or []
    if not calls:
        return False
    done = {call_key(call) for call, _ in answered(messages)}
    return all(call_key(c) in done for c in calls)


def _question(messages: list[Mapping[str, Any]]) -> str | None:
    """The last user message's text: what the calls were for."""
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return str(m["content"])
    return None


NUDGE = "Using the tool results above, answer my original question in plain text. Do not call any more tools."


def nudge_text(question: str | None, results: list[tuple[dict[str, Any], str]], unused: Sequence[str] = ()) -> str:
    """The request for the answer after a stuck turn: the question and every result, so that a
    small model that lost the thread of a long transcript can still state them all. With tools
    off it says so; ``unused`` names the tools still offered (those that have not run)."""
    if not results:
        return NUDGE
    asked = f"My question was: {question}\n" if question else ""
    ending = "Now answer my question in plain text, stating every result. Do not call any more tools."
    if unused:
        ending = (
            f"If my question still needs {' or '.join(unused)}, call it now. Otherwise answer my question in plain "
            "text, stating every result."
        )
    return f"{asked}The tools returned:\n{planner.facts(results)}\n{ending}"


_FENCE = re.compile(r"^\s*(?:```[a-zA-Z]*|<tool_call>)\s*(.*?)\s*(?:```|</tool_call>)?\s*$", re.DOTALL)


def calls_in_text(content: str | None, tools: Collection[str]) -> list[dict[str, Any]]:
    """The tool calls that a turn wrote as its whole text (bare JSON, fenced, or in
    ``<tool_call>`` tags: ``{"name", "arguments" | "parameters"}`` or a list of them) naming
    one of ``tools``, as OpenAI tool calls; [] when the text is anything else."""
    if not content or not content.strip().startswith(("{", "[", "`", "<tool_call>")):
        return []
    match = _FENCE.match(content)
    try:
        value = json.loads(match.group(1) if match else content)
    except (json.JSONDecodeError, TypeError):
        return []
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or item.get("name") not in tools:
            return []
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return []
        if not isinstance(args, dict):
            return []
        function = {"name": item["name"], "arguments": json.dumps(args, ensure_ascii=False)}
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function})
    return calls


def nudge(messages: list[Mapping[str, Any]]) -> dict[str, str]:
    """``nudge_text`` as the user message that follows ``messages``."""
    return {"role": "user", "content": nudge_text(_question(messages), answered(messages))}
