"""The agent loop: generate, run the tools the model asks for, feed results back, repeat."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import Model, Result
from .tools import Tool, as_tool

__all__ = ["Agent", "AgentResult", "Event"]

Event = dict[str, Any]

NUDGE = "Using the tool results above, answer my original question in plain text. Do not call any more tools."


def _call_key(call: dict[str, Any]) -> tuple[str, str]:
    """A call's identity: its name and its arguments, whatever their formatting."""
    fn = call["function"]
    try:
        args = json.dumps(json.loads(fn["arguments"]), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        args = str(fn["arguments"])
    return fn["name"], args


def _with_invalid_calls(result: Result) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]:
    """The turn's message and calls, counting the calls the library found invalid for their
    tool's schema (``invalid_tool_calls``) as calls, so each gets its error back as its result."""
    calls = list(result.get("tool_calls") or [])
    invalid = {c["id"]: c["error"] for c in result.get("invalid_tool_calls") or []}
    if not invalid:
        return result["message"], calls, invalid
    calls += [{k: v for k, v in c.items() if k != "error"} for c in result["invalid_tool_calls"]]
    return {"role": "assistant", "content": None, "tool_calls": calls}, calls, invalid


@dataclass
class AgentResult:
    """The final answer, the whole transcript (OpenAI-shaped) and each turn's raw result."""

    content: str | None
    messages: list[dict[str, Any]]
    turns: list[Result] = field(default_factory=list)
    stopped: str = "answer"  # "answer" or "max_steps"

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [c for m in self.messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]


class Agent:
    """Runs a model in a tool-calling loop until it answers without calling a tool.

    ``tools`` are Python functions (their schema comes from type hints and the
    docstring), OpenAI tool dicts (which then need a ``handlers`` entry to run),
    or ``Tool`` objects. A tool that raises, an unknown tool name or arguments
    that are not valid JSON are reported back to the model as the tool's result,
    and the loop goes on. ``on_event`` receives ``{"type": "text", "delta"}``,
    ``{"type": "tool_call", ...}``, ``{"type": "tool_result", ...}`` and
    ``{"type": "turn", "result"}`` events as they happen.

    When the model only repeats calls it already made, or runs on writing calls as
    text until its token limit (common with small local models), the loop asks it
    once, as a user message, for the answer with tools switched off (``"nudge"`` event).
    """

    def __init__(
        self,
        model: Model,
        tools: Iterable[Callable[..., Any] | Mapping[str, Any] | Tool] = (),
        *,
        max_steps: int = 8,
        system: str | None = None,
        handlers: Mapping[str, Callable[..., Any]] | None = None,
        on_event: Callable[[Event], object] | None = None,
        **options: Any,
    ) -> None:
        self.model = model
        self.tools = {t.name: t for t in map(as_tool, tools)}
        self.handlers = {name: t.fn for name, t in self.tools.items() if t.fn is not None}
        self.handlers.update(handlers or {})
        self.max_steps = max_steps
        self.system = system
        self.on_event = on_event
        self.options = options

    def _emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def run(self, prompt: str | Sequence[Mapping[str, Any]]) -> AgentResult:
        if isinstance(prompt, str):
            messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
            if self.system:
                messages.insert(0, {"role": "system", "content": self.system})
        else:
            messages = [dict(m) for m in prompt]
        schemas = [t.schema for t in self.tools.values()]
        turns: list[Result] = []
        on_delta = None
        if self.on_event is not None:

            def on_delta(delta: dict[str, Any]) -> None:
                if delta.get("content"):
                    self._emit({"type": "text", "delta": delta["content"]})

        done: set[tuple[str, str]] = set()
        nudged = False
        for _ in range(self.max_steps):
            options = dict(self.options)
            if nudged:
                options["tool_choice"] = "none"
            result = self.model.generate(messages, schemas or None, on_delta=on_delta, **options)
            turns.append(result)
            self._emit({"type": "turn", "result": result})
            message, calls, invalid = _with_invalid_calls(result)
            if not nudged and self._stuck(result, calls, done):
                # Small models often ask again for results they already have, or run on
                # writing calls as text. Ask once, plainly, for the answer instead.
                nudged = True
                messages.append({"role": "user", "content": NUDGE})
                self._emit({"type": "nudge", "content": NUDGE})
                continue
            messages.append(message)
            if not calls:
                return AgentResult(result.get("content"), messages, turns, "answer")
            for call in calls:
                done.add(_call_key(call))
                self._emit(
                    {
                        "type": "tool_call",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
                if call["id"] in invalid:  # the library checked it against the tool's schema
                    output = f"error: {invalid[call['id']]}; call {call['function']['name']} again with valid arguments"
                else:
                    output = self._call(call["function"]["name"], call["function"]["arguments"])
                self._emit(
                    {"type": "tool_result", "id": call["id"], "name": call["function"]["name"], "content": output}
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": output}
                )
        return AgentResult(None, messages, turns, "max_steps")

    @staticmethod
    def _stuck(result: Result, calls: list[dict[str, Any]], done: set[tuple[str, str]]) -> bool:
        if calls:
            return all(_call_key(c) in done for c in calls)
        content = (result.get("content") or "").lstrip()
        return bool(done) and result.get("finish_reason") == "length" and content.startswith(("{", "[", "```"))

    def _call(self, name: str, arguments: str) -> str:
        handler = self.handlers.get(name)
        if handler is None:
            return f"error: unknown tool {name!r}; available tools: {', '.join(sorted(self.handlers)) or 'none'}"
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return f"error: the arguments are not valid JSON ({e.msg}); send a JSON object"
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object"
        try:
            output = handler(**args)
        except TypeError as e:
            return f"error: bad arguments for {name}: {e}"
        except Exception as e:  # the model gets to see and fix it
            return f"error: {type(e).__name__}: {e}"
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
