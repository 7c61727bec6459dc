"""A stand-in for ``pyshim.Model`` that replays scripted replies, for the agent loop's bookkeeping.

It makes no claim about generation (every test of what the model does runs the real one); it
drives the agent core through turns a small model really takes, and records what each turn saw
(``seen``), which tools it was offered (``offered``) and its options (``options``).
"""

from __future__ import annotations

from typing import Any


class Scripted:
    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.seen: list[list[dict[str, Any]]] = []
        self.offered: list[list[str]] = []
        self.schemas: list[list[dict[str, Any]]] = []  # the tools each turn's grammar was built from
        self.options: list[dict[str, Any]] = []

    def generate(self, messages: Any, tools: Any = None, on_delta: Any = None, **options: Any) -> dict[str, Any]:
        self.seen.append([dict(m) for m in messages])
        self.offered.append([t["function"]["name"] for t in tools or []])
        self.schemas.append(list(options.get("grammar_tools") or tools or []))
        self.options.append(options)
        reply = self.replies.pop(0)
        calls = [
            {"id": f"call_{len(self.seen)}_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(reply.get("calls", []))
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        if calls:
            message["tool_calls"] = calls
        return {"message": message, "content": reply.get("content"), "tool_calls": calls, "finish_reason": "stop"}


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """A call as the agent's bookkeeping reads it: a tool's name and its arguments' JSON text."""
    return {"function": {"name": name, "arguments": arguments}}


def called(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """An assistant turn that made one call, as a transcript holds it."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}
