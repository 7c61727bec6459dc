"""The agent loop: generate, run the tools the model asks for, feed results back, repeat.

The loop itself (``Agent.run``) only sequences steps; what each step does lives in
``_Run`` (the transcript and the decisions on each model turn) and in the tool-call
helpers (``Agent._runner``, ``tool_output``), so that a loop of another flavour can
reuse them unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import planner
from .errors import AgentError, ContextFull, InvalidRequest, InvalidTool, ShimError
from .model import Delta, Model, Result
from .repeats import call_key, calls_in_text, nudge_text
from .tools import Tool, ToolArgumentError, as_tools, tool_output

__all__ = ["Agent", "AgentResult", "Event", "tool_output"]

Event = dict[str, Any]
Runner = Callable[[dict[str, Any]], Any]

# Options that shape tool calls: the planning and answer turns have no tools. The answer
# keeps the caller's response_format; the plan, a list of lines, does not.
_TOOL_OPTIONS = ("tool_choice", "parallel_tool_calls", "tool_call_recovery")
# Stuck turns asked for the answer in a run: the first offers the tools that have not run yet,
# the last offers none.
MAX_NUDGES = 2
# Turns one planned step may take: its first, and one after each round of calls, so a step can
# chain calls (a lookup, then a lookup of what it found) without running on.
MAX_STEP_TURNS = 3


def _with_invalid_calls(result: Result) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]:
    """The turn's message and calls, counting the calls the library found invalid for their
    tool's schema (``invalid_tool_calls``) as calls, so each gets its error back as its result."""
    calls = list(result.get("tool_calls") or [])
    invalid_calls = result.get("invalid_tool_calls") or []
    invalid = {c["id"]: c["error"] for c in invalid_calls}
    if not invalid:
        return result["message"], calls, invalid
    calls += [{k: v for k, v in c.items() if k != "error"} for c in invalid_calls]
    return {"role": "assistant", "content": None, "tool_calls": calls}, calls, invalid


@dataclass
class AgentResult:
    """The final answer, the whole transcript (OpenAI-shaped) and each turn's raw result.

    ``stopped`` says why the loop ended: ``"answer"``, ``"max_steps"``,
    ``"context_full"`` (the conversation no longer fits the model's context; ``error``
    says by how much, and ``messages`` still holds everything up to that point), or
    ``"call_as_text"``: the last turn wrote a tool call as its text, one already answered,
    after the model was asked for the answer (``content`` is that text, not an answer).
    """

    content: str | None
    messages: list[dict[str, Any]]
    turns: list[Result] = field(default_factory=list)
    stopped: str = "answer"
    error: str | None = None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [c for m in self.messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]

    @property
    def tools_ran(self) -> list[dict[str, Any]]:
        """The tool results of this transcript, in order: one ``{"role": "tool", ...}`` message per call run."""
        return [m for m in self.messages if m.get("role") == "tool"]


@dataclass
class _Turn:
    """One model turn to run: the conversation it sees, its tools and options."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    options: dict[str, Any]
    stream: bool = True  # whether its text reaches on_event as "text" events


@dataclass
class _Run:
    """One run's transcript and bookkeeping; each method is one decision of the loop."""

    messages: list[dict[str, Any]]
    turns: list[Result] = field(default_factory=list)
    done: set[tuple[str, str]] = field(default_factory=set)
    nudges: int = 0  # stuck turns asked for the answer so far
    offer: list[str] | None = None  # the tools the next turn is offered; None: all of them
    tools: list[str] = field(default_factory=list)  # every tool's name
    pending: list[dict[str, Any]] = field(default_factory=list)  # the calls of the last turn, to run
    invalid: dict[str, str] = field(default_factory=dict)  # call id -> why its arguments fail the schema
    question: str = ""  # the last user message the run began with
    results: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (call, output), in order
    tool_turns: int = 0  # model turns that could call tools, counted against max_steps
    # Plan mode: "plan" (ask for the steps), "act" (the steps in turn), "replan" (what is still
    # needed, once the steps ran out), "answer" (from the findings).
    phase: str = "loop"
    steps: list[str | None] = field(default_factory=list)  # None: the whole question, tools optional
    step_turns: int = 0  # turns spent on the current step
    step_found: int = 0  # how many results there were when the current step began
    in_text: bool = False  # the current step's next turn has tools off
    replanned: bool = False  # the plan was checked against what was found
    plan_steps: list[str] = field(default_factory=list)  # the plan as the model wrote it
    notes: list[planner.Note] = field(default_factory=list)  # steps done in text, and their text
    system: str | None = None  # the caller's system message, for the planning and answer turns
    history: list[dict[str, Any]] = field(default_factory=list)  # the conversation before the question

    def options(self, base: Mapping[str, Any]) -> dict[str, Any]:
        options = dict(base)
        if self.offer is not None:  # the turn after a nudge: only tools that have not run
            options["tool_choice"] = "auto" if self.offer else "none"
        elif self.phase == "act" and self.in_text:
            options["tool_choice"] = "none"  # its call took nothing from the run: do the step in text
        elif self.phase == "act" and (self.steps[0] is not None or self.step_turns):
            # A planned step is a call, and so is the turn after a round of calls: a small model
            # asked whether to call writes text, from memory. A call with no value from the run
            # is not run (the step is then done in text), and a repeat ends the step.
            options["tool_choice"] = "required"
        return options

    def begin_steps(self, steps: list[str]) -> None:
        """Act on the plan: its steps in turn, or, for a one-step plan, the question as asked."""
        self.phase = "act"
        self.steps = list(steps) if len(steps) > 1 else [None]
        self.plan_steps = list(steps)
        self._open_step()

    def _open_step(self) -> None:
        self.step_turns = 0
        self.step_found = len(self.results)
        if (step := self.steps[0]) is not None:
            self.messages.append(planner.step_message(step))

    def act(self, result: Result) -> str:
        """Record a turn of the plan's current step: "calls", "answer", "next", "retry" (the same
        step again) or "context_full"."""
        self.turns.append(result)
        message, calls, self.invalid = _with_invalid_calls(result)
        known = self.known()
        fresh = [c for c in calls if call_key(c) not in self.done and planner.grounded(c, known)]
        if calls and not fresh and not any(call_key(c) in self.done for c in calls):
            self.pending = []  # only calls with values from nowhere: none is run
            if self.step_turns == 0 and self.steps[0] is not None:
                self.in_text = True  # the step again, tools off
                return "retry"
            return "next"
        self.in_text = False
        self.pending = fresh
        self.step_turns += 1
        if fresh or not calls:
            self.messages.append(message if len(fresh) == len(calls) else {**message, "tool_calls": fresh})
        if result.get("truncated"):
            return "context_full"
        if fresh:
            self.tool_turns += 1
            return "calls"
        if calls:
            return "next"  # it only repeats calls that ran: the step is done
        if self.steps[0] is None:
            return "next" if self.results else "answer"  # nothing looked up: the text is the answer
        if len(self.results) == self.step_found:  # a step done in text, with no tool: the answer needs it
            self.notes.append((self.steps[0], (result.get("content") or "").strip()))
        return "next"

    def known(self) -> str:
        """What the run knows, for telling a call's arguments from invented ones."""
        found = [f"{c['function']['arguments']} {out}" for c, out in self.results]
        said = [m["content"] for m in self.history if isinstance(m.get("content"), str)]
        return "\n".join([self.question, *self.plan_steps, *found, *said, *(t for _, t in self.notes)])

    def after_calls(self, max_steps: int) -> None:
        """A step's calls ran: it goes on (tools offered; a lookup may need a lookup of what it
        found) until the model stops calling, within its turns and the run's budget."""
        if not (self.tool_turns < max_steps and self.step_turns < MAX_STEP_TURNS):
            self.next_step(max_steps)

    def next_step(self, max_steps: int) -> None:
        """The current step is done: take the next; once they run out, check the plan against
        what was found (once, if something was); else go answer."""
        self.steps.pop(0)
        if self.tool_turns >= max_steps:
            self.phase = "answer"
        elif self.steps:
            self._open_step()
        else:
            self.phase = "replan" if self.results and not self.replanned else "answer"

    def replan(self, steps: list[str]) -> None:
        """Act on the steps the check found still needed (each a planned step), or go answer."""
        self.replanned = True
        self.phase = "act" if steps else "answer"
        if steps:
            self.steps = list(steps)
            self.plan_steps += steps
            self._open_step()

    def turn_tools(self, schemas: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if self.offer is None or schemas is None:
            return schemas
        return [t for t in schemas if t["function"]["name"] in self.offer] or None

    def unused_tools(self) -> list[str]:
        ran = {name for name, _ in self.done}
        return [name for name in self.tools if name not in ran]

    def take(self, result: Result) -> str:
        """Record one model turn; returns what to do next: "answer", "nudge", "calls",
        "context_full" or "call_as_text"."""
        self.turns.append(result)
        self.offer = None
        message, calls, self.invalid = _with_invalid_calls(result)
        if not calls and (written := calls_in_text(result.get("content"), self.tools)):
            # A call written as the answer's text (tools were off, or the library could not
            # recover it): a new one is run as a call; a repeat is a stuck turn.
            calls = written
            message = {"role": "assistant", "content": None, "tool_calls": written}
        self.pending = calls
        if _stuck(result, calls, self.done):
            # Small models often ask again for results they already have, or run on writing
            # calls as text. Ask, plainly, for the answer instead, restating the question and
            # every result, and offer only the tools that have not run (a task may need one
            # more); the last time, none. (Offering every tool again, as the doors do, made
            # qwen2.5-coder-0.5b repeat once more and then write its calls as text.)
            if self.nudges >= MAX_NUDGES and not result.get("tool_calls"):
                # Asked for the answer twice, it wrote a call it has the result of: one last
                # turn answers from the question and the results alone, as plan mode does,
                # in a chat with no tool in sight.
                self.phase = "answer"
                return "nudge"
            self.nudges += 1
            self.offer = self.unused_tools() if self.nudges < MAX_NUDGES else []
            content = nudge_text(self.question, self.results, self.offer)
            self.messages.append({"role": "user", "content": content})
            return "nudge"
        self.messages.append(message)
        if result.get("truncated"):
            return "context_full"
        return "calls" if calls else "answer"

    def record(self, call: dict[str, Any], output: str) -> dict[str, Any]:
        self.done.add(call_key(call))
        self.results.append((call, output))
        message = {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": output}
        self.messages.append(message)
        return message

    def result(self, stopped: str, error: str | None = None) -> AgentResult:
        content = self.turns[-1].get("content") if stopped in ("answer", "call_as_text") and self.turns else None
        return AgentResult(content, self.messages, self.turns, stopped, error)


def _answer_messages(state: _Run) -> list[dict[str, Any]]:
    return planner.answer_messages(state.question, state.results, state.notes, state.system, state.history)


def _stuck(result: Result, calls: list[dict[str, Any]], done: set[tuple[str, str]]) -> bool:
    if calls:
        return all(call_key(c) in done for c in calls)
    content = (result.get("content") or "").lstrip()
    return bool(done) and result.get("finish_reason") == "length" and content.startswith(("{", "[", "```"))


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
    yet (so a task that needs one more still gets it), the second time with tools off. A
    call written as the answer's text is run if it is new; one that repeats an answered call
    after the second nudge gets one last turn that answers from the question and the results
    alone (plan mode's answer turn), and if that too is a call, the run ends with
    ``stopped="call_as_text"``. A tool's return value reaches the
    model as text as it is, anything else as JSON (``pyshim.tools.jsonable``: dataclasses,
    pydantic models, datetimes, enums, sets, numpy values as a user would write them).
    A dict tool needs a ``handlers`` entry (``InvalidTool`` otherwise).

    ``plan=True`` is for small models (about 1B parameters and under) on requests with
    several parts: the model first lists the steps in a planning chat of its own
    (``{"type": "plan", "steps"}`` event), then takes them in turn, each with what the
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
        plan: bool = False,
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

    def _emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _on_delta(self) -> Callable[[Delta], None] | None:
        if self.on_event is None:
            return None

        def on_delta(delta: Delta) -> None:
            if content := delta.get("content"):
                self._emit({"type": "text", "delta": content})

        return on_delta

    def begin(self, prompt: str | Sequence[Mapping[str, Any]]) -> _Run:
        """The opening transcript: the system message (if any), then the prompt."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        if self.system is not None:
            first = messages[0] if messages else {}
            if first.get("role") not in ("system", "developer"):
                messages.insert(0, {"role": "system", "content": self.system})
            elif first.get("content") != self.system:
                raise InvalidRequest(
                    "Agent(system=...) was given and the messages start with a different system message; "
                    "pass only one of them"
                )
        asked = [i for i, m in enumerate(messages) if m.get("role") == "user" and isinstance(m.get("content"), str)]
        state = _Run(messages, question=messages[asked[-1]]["content"] if asked else "", tools=list(self.tools))
        if asked:  # what the planning and answer turns see besides the question
            first = messages[0]
            lead = first.get("role") in ("system", "developer") and isinstance(first.get("content"), str)
            state.system = first["content"] if lead else None
            state.history = messages[1 if lead else 0 : asked[-1]]
        if self.plan and self.schemas and state.question:
            state.phase = "plan"
        return state

    def run(self, prompt: str | Sequence[Mapping[str, Any]]) -> AgentResult:
        """Run the loop. Ends with an answer, after ``max_steps`` turns, or when the context is full;
        any other error raises ``AgentError`` whose ``result`` keeps the transcript and the tools that ran."""
        state = self.begin(prompt)
        on_delta = self._on_delta()
        while True:
            turn = self.next_turn(state)
            if isinstance(turn, AgentResult):
                return turn
            try:
                result = self.model.generate(
                    turn.messages, turn.tools, on_delta=on_delta if turn.stream else None, **turn.options
                )
            except ShimError as e:
                return self.stopped(state, e)
            outcome = self.after_turn(state, result)
            if isinstance(outcome, AgentResult):
                return outcome
            for call in outcome:
                name, runner = self.begin_tool(state, call)
                if isinstance(runner, str):
                    output = runner
                else:
                    try:
                        output = tool_output(settle(runner()))
                    except Exception as e:  # the model gets to see and fix it
                        output = tool_error(name, e)
                self.end_tool(state, call, output)
            self.end_round(state)

    async def arun(self, prompt: str | Sequence[Mapping[str, Any]]) -> AgentResult:
        """``run`` as a coroutine: tools may be coroutine functions; cancelling the task cancels the turn."""
        from .aio import arun

        return await arun(self, prompt)

    # The steps a loop is made of; ``run`` and ``aio.arun`` differ only in how they wait.

    def stopped(self, state: _Run, error: ShimError) -> AgentResult:
        """A model turn failed: a full context ends the run with its transcript, anything else raises."""
        if isinstance(error, ContextFull):
            return state.result("context_full", str(error))
        raise AgentError(f"the agent run stopped: {error}", state.result("error", str(error))) from error

    def next_turn(self, state: _Run) -> _Turn | AgentResult:
        """What the model is asked next, or the run's result when no turn is left."""
        if state.phase == "plan":
            options = self._plain_options(max_tokens=planner.PLAN_TOKENS)
            options.pop("response_format", None)
            plan = planner.plan_messages(state.question, state.system, state.history)
            return _Turn(plan, None, options, stream=False)
        if state.phase == "replan":
            options = self._plain_options(max_tokens=planner.PLAN_TOKENS)
            options.pop("response_format", None)
            check = planner.replan_messages(state.question, state.results, state.notes)
            return _Turn(check, None, options, stream=False)
        if state.phase == "answer":
            return _Turn(_answer_messages(state), None, self._plain_options())
        if state.phase == "loop":  # plan mode bounds its rounds of calls in _Run.act
            if state.tool_turns >= self.max_steps:
                return state.result("max_steps")
            state.tool_turns += 1
        return _Turn(state.messages, state.turn_tools(self.schemas), state.options(self.options))

    def _plain_options(self, **extra: Any) -> dict[str, Any]:
        options = {k: v for k, v in self.options.items() if k not in _TOOL_OPTIONS}
        return {**options, **extra}

    def after_turn(self, state: _Run, result: Result) -> AgentResult | list[dict[str, Any]]:
        """Record one model turn: the run's result if it ends here, else the tool calls to run next."""
        self._emit({"type": "turn", "result": result})
        if state.phase != "loop":
            return self._after_plan_turn(state, result)
        step = state.take(result)
        if step == "nudge":
            if state.phase == "loop":
                self._emit({"type": "nudge", "content": state.messages[-1]["content"]})
            return []
        if step == "context_full":
            return state.result("context_full", "the context filled up during the model's turn")
        if step in ("answer", "call_as_text"):
            return state.result(step)
        return state.pending

    def _after_plan_turn(self, state: _Run, result: Result) -> AgentResult | list[dict[str, Any]]:
        if state.phase == "plan":
            steps = planner.parse_steps(result.get("content"), self.max_steps)
            state.turns.append(result)
            self._emit({"type": "plan", "steps": steps})
            state.begin_steps(steps)
            return []
        if state.phase == "replan":
            steps = planner.parse_steps(result.get("content"), self.max_steps)
            state.turns.append(result)
            self._emit({"type": "plan", "steps": steps, "revised": True})
            state.replan(steps)
            return []
        if state.phase == "answer":
            state.turns.append(result)
            state.messages += [_answer_messages(state)[-1], result["message"]]
            return state.result("call_as_text" if calls_in_text(result.get("content"), state.tools) else "answer")
        step = state.act(result)
        if step == "context_full":
            return state.result("context_full", "the context filled up during the model's turn")
        if step == "answer":
            return state.result("answer")
        if step == "next":
            state.next_step(self.max_steps)
        return state.pending

    def end_round(self, state: _Run) -> None:
        """After a turn's calls ran: in plan mode, ask whether the step needs more, or move on."""
        if state.phase == "act" and state.pending:
            state.after_calls(self.max_steps)

    def begin_tool(self, state: _Run, call: dict[str, Any]) -> tuple[str, Callable[[], Any] | str]:
        """Announce a call; returns its tool name and a ready-to-run call (or the error text the model gets)."""
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        self._emit({"type": "tool_call", "id": call["id"], "name": name, "arguments": arguments})
        if call["id"] in state.invalid:  # the library checked it against the tool's schema
            return name, f"error: {state.invalid[call['id']]}; call {name} again with valid arguments"
        return name, self._runner(name, arguments)

    def end_tool(self, state: _Run, call: dict[str, Any], output: str) -> None:
        state.record(call, output)
        self._emit({"type": "tool_result", "id": call["id"], "name": call["function"]["name"], "content": output})

    def _runner(self, name: str, arguments: str) -> Callable[[], Any] | str:
        """A ready-to-run call of the tool, or the error text the model gets instead."""
        run = self.runners.get(name)
        if run is None:
            return f"error: unknown tool {name!r}; available tools: {', '.join(sorted(self.runners)) or 'none'}"
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return f"error: the arguments are not valid JSON ({e.msg}); send a JSON object"
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object"
        return lambda: run(args)


def _keywords_to(handler: Callable[..., Any]) -> Runner:
    """A runner calling ``handler`` with a call's arguments as keywords."""
    return lambda args: handler(**args)


def tool_error(name: str, e: Exception) -> str:
    """What the model sees when a tool call fails."""
    if isinstance(e, (TypeError, ToolArgumentError)):
        return f"error: bad arguments for {name}: {e}"
    return f"error: {type(e).__name__}: {e}"
