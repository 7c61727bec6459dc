"""The agent: tools a model may call, and the two drivers (``run`` here, ``arun`` in ``pyshim.aio``).

Every decision of a run lives in ``pyshim.agent_core`` (sans-IO); this module owns what that
core may not do: calling the model, running a tool (a plain function, a coroutine function,
a handler for a dict schema) and turning its value or exception into the text the model gets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from .agent_core import AgentCore, AgentResult, Event, Finish, Generate, Spec
from .aio import agenerate
from .errors import InvalidTool, ShimError
from .model import Delta, Model
from .shapes import Result
from .tools import Tool, as_tools, tool_error, tool_output

__all__ = ["Agent", "AgentResult", "Event", "tool_output"]

Runner = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class ToolRun:
    """A tool call a driver must run, with its checked arguments; its outcome is the output text."""

    call: dict[str, Any]
    args: dict[str, Any]


def settle(value: Any) -> Any:
    """The value of an ``async def`` tool's awaitable, run to completion from synchronous code.

    With no event loop running in this thread it runs on a fresh one; when ``run()`` is
    itself called from async code, the awaitable runs on a loop of its own in a helper
    thread (the calling loop is blocked by the synchronous ``run()`` either way).
    """
    if not inspect.isawaitable(value):
        return value

    async def wait() -> Any:
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pyshim-tool") as pool:
        return pool.submit(asyncio.run, wait()).result()


class Agent:
    """Runs a model in a tool-calling loop until it answers without calling a tool.

    ``tools`` are Python callables (functions, methods, ``functools.partial``, callable
    objects, ``async def`` functions; the schema comes from type hints and the
    docstring), OpenAI tool dicts (which then need a ``handlers`` entry to run), or
    ``Tool`` objects (``Tool.from_function(fn, name=...)`` to rename one). A tool that
    cannot be described, or two tools with one name, raise ``InvalidTool`` here. A tool
    that raises, an unknown tool name or arguments that are not valid JSON are reported
    back to the model as the tool's result, and the loop goes on. ``on_event`` receives
    ``{"type": "text", "delta"}``, ``{"type": "tool_call", ...}``, ``{"type":
    "tool_result", ...}`` and ``{"type": "turn", "result"}`` events as they happen.

    ``system`` is put first in the conversation (also when ``run`` gets a message list
    without a system message; a list that starts with a different one is refused).

    When the model only repeats calls it already made, or runs on writing calls as
    text until its token limit (common with small local models), the loop asks it, in a
    user message restating the question and every result, for the answer (``"nudge"``
    event; ``pyshim.repeats``): the first time offering only the tools that have not run
    yet (so a task that needs one more still gets it) and naming only those the question
    gives a reason to call, the second time with tools off. The same goes for a turn that
    repeats the request or is empty. A call whose figures come from neither the request nor
    a result is not run (the model is told why); so is, for a request that no tool's name or
    description shares a word with, a first call that takes nothing from it (the turn is then
    asked again with tools off, and no plan is made). An answer that states a finding for a name
    of the request whose lookups all failed, or leaves it out, has that sentence replaced by the
    library's, and one that states nothing of a result no later call took (the end of a chain)
    has it added (``{"type": "revised", "content", "replaced"}`` event: the streamed text is not
    what is returned). ``AgentResult.stopped`` is ``"answer"``
    only for an answer (``AgentResult`` lists the other ends; ``failures``, every call that
    gave no result). A
    call written as the answer's text is run if it is new; one that repeats an answered call
    after the second nudge gets one last turn that answers from the question and the results
    alone (plan mode's answer turn), and if that too is a call, the run ends with
    ``stopped="call_as_text"``. A tool's return value reaches the
    model as text as it is, anything else as JSON (``pyshim.tools.jsonable``: dataclasses,
    pydantic models, datetimes, enums, sets, numpy values as a user would write them).
    A dict tool needs a ``handlers`` entry (``InvalidTool`` otherwise).

    ``plan=True`` (the default, chosen by the report half of ``make bench-agent``, the half
    nothing was tuned against, where it solved more tasks on the default model than the plain
    loop) is for small models (about 1B parameters and under) on
    requests with several parts (``plan=False`` runs the plain loop described above). The
    model first lists the steps in a planning chat of its own (``{"type": "plan", "steps"}``
    event), then takes them in turn, each with what the
    steps before it found in view: a step's turns offer the tools (``tool_choice``
    "auto"), so it may call one, then another that takes what the first found (up to
    three turns a step), or none, doing the step in text; then the model writes the
    answer from the request and what the steps found. The caller's system message and the
    conversation before the request reach the planning and answer turns too
    (``pyshim.planner``). ``max_steps`` then bounds the rounds of tool calls; the
    planning and answer turns come on top. It costs one planning call and, on one slot, a
    prefill of the conversation after it. Each turn is kept in ``AgentResult.turns``;
    ``messages`` holds the acting transcript, then the answer's question and reply.
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
        plan: bool = True,
        **options: Any,
    ) -> None:
        self.model = model
        self.tools = as_tools(tools)
        self.runners: dict[str, Runner] = {name: t.call for name, t in self.tools.items() if t.fn is not None}
        for name, handler in (handlers or {}).items():
            if name not in self.tools:
                raise InvalidTool(f"handlers names {name!r}, which is not one of the tools: {', '.join(self.tools)}")
            self.runners[name] = _keywords_to(handler)
        if missing := [name for name in self.tools if name not in self.runners]:
            raise InvalidTool(
                f"the tool {missing[0]!r} is a schema without a function to run: pass handlers={{{missing[0]!r}: fn}}, "
                "or the Python function itself as the tool"
            )
        self.max_steps = max_steps
        self.system = system
        self.on_event = on_event
        self.plan = plan
        self.options = options
        self.schemas = [t.schema for t in self.tools.values()] or None
        self.spec = Spec(tuple(self.tools), self.schemas, dict(options), max_steps, plan, system)

    def core(self, prompt: str | Sequence[Mapping[str, Any]]) -> AgentCore:
        return AgentCore(self.spec, prompt)

    def _flush(self, core: AgentCore) -> None:
        for event in core.drain():
            if self.on_event is not None:
                self.on_event(event)

    def _on_delta(self) -> Callable[[Delta], None] | None:
        if self.on_event is None:
            return None
        on_event = self.on_event

        def on_delta(delta: Delta) -> None:
            if content := delta.get("content"):
                on_event({"type": "text", "delta": content})

        return on_delta

    def _steps(self, core: AgentCore) -> Generator[Generate | ToolRun, object, AgentResult]:
        """The run as a generator over the core: it yields each effect a driver must perform (a
        model turn, a tool call) and is sent its outcome (the result or the ``ShimError`` of the
        turn, the text of the tool's output). ``run`` and ``arun`` only perform them."""
        while True:
            action = core.next_action()
            self._flush(core)
            if isinstance(action, Finish):
                return action.result
            if isinstance(action, Generate):
                outcome = yield action
                if isinstance(outcome, ShimError):
                    core.turn_failed(outcome)
                else:
                    core.turn_done(cast(Result, outcome))
                continue
            for call in action.calls:
                args = core.start_tool(call)
                self._flush(core)
                core.tool_done(call, args if isinstance(args, str) else str((yield ToolRun(call, args))))

    def run(self, prompt: str | Sequence[Mapping[str, Any]]) -> AgentResult:
        """Run the loop. Ends with an answer, after ``max_steps`` turns, or when the context is full;
        any other error raises ``AgentError`` whose ``result`` keeps the transcript and the tools that ran."""
        steps, on_delta = self._steps(self.core(prompt)), self._on_delta()
        outcome: object = None
        while not isinstance(effect := _advance(steps, outcome), AgentResult):
            if isinstance(effect, ToolRun):
                outcome = self._call(effect.call, effect.args)
                continue
            try:
                stream = on_delta if effect.stream else None
                outcome = self.model.generate(effect.messages, effect.tools, on_delta=stream, **effect.options)
            except ShimError as e:
                outcome = e
        return effect

    def _call(self, call: dict[str, Any], args: dict[str, Any]) -> str:
        name = call["function"]["name"]
        try:
            return tool_output(settle(self.runners[name](args)))
        except Exception as e:  # the model gets to see and fix it
            return tool_error(name, e)

    async def arun(self, prompt: str | Sequence[Mapping[str, Any]]) -> AgentResult:
        """``run`` as a coroutine over the same core, with ``pyshim.aio.agenerate``: a plain tool
        runs in a thread, a coroutine tool is awaited; cancelling the task cancels the turn."""
        steps = self._steps(self.core(prompt))
        loop = asyncio.get_running_loop()
        on_event = self.on_event

        def emit_text(delta: Delta) -> None:  # worker thread: hand the event to the loop
            if on_event is not None and (content := delta.get("content")):
                loop.call_soon_threadsafe(on_event, {"type": "text", "delta": content})

        outcome: object = None
        while not isinstance(effect := _advance(steps, outcome), AgentResult):
            if isinstance(effect, ToolRun):
                outcome = await self._acall(effect.call, effect.args)
                continue
            stream = emit_text if effect.stream and on_event is not None else None
            try:
                outcome = await agenerate(self.model, effect.messages, effect.tools, on_delta=stream, **effect.options)
            except ShimError as e:
                outcome = e
        return effect

    async def _acall(self, call: dict[str, Any], args: dict[str, Any]) -> str:
        name = call["function"]["name"]
        try:
            value = await asyncio.to_thread(self.runners[name], args)
            return tool_output(await value if inspect.isawaitable(value) else value)
        except Exception as e:  # the model gets to see and fix it
            return tool_error(name, e)


def _advance(
    steps: Generator[Generate | ToolRun, object, AgentResult], outcome: object
) -> Generate | ToolRun | AgentResult:
    """The run's next effect after ``outcome``, or its result once it has none."""
    try:
        return steps.send(outcome)
    except StopIteration as done:
        return cast(AgentResult, done.value)


def _keywords_to(handler: Callable[..., Any]) -> Runner:
    """A runner calling ``handler`` with a call's arguments as keywords."""
    return lambda args: handler(**args)
