"""One agent run as a state machine that does no I/O: ``pyshim.Agent.run`` and ``arun`` drive it.

The core owns the transcript and every decision of the loop: what the model is asked next (the
plain loop's turns, the nudges, plan mode's plan, steps, check and answer, which are states of this
one machine, not a second loop), what a model turn means (calls to run, an answer, a stuck turn),
how a call's arguments are checked before it runs, and what the run's result says. A driver only
waits: it asks ``next_action()`` and does what it says (``Generate`` a turn, ``RunTools``, or
``Finish``), hands back what came of it (``turn_done`` / ``turn_failed``, ``start_tool`` then
``tool_done`` for each call), and passes on ``drain()``'s events. The invariant: a driver holds no
state of the run and makes no decision, so the sync and async loops cannot drift apart (h11's
split between protocol and transport, for the same reason).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import chain, conditions, missed, planner
from .answers import (
    calls_in_text,
    failed_subjects,
    findings,
    invented_numbers,
    numbers,
    plain_text,
    unfounded,
    verdict,
    with_findings,
    without_copied_facts,
    without_invented,
)
from .errors import AgentError, ContextFull, InvalidRequest, ShimError
from .repeats import (
    LOOK_UP,
    call_key,
    choice_owners,
    does_arithmetic,
    fed_back,
    named_choices,
    nudge_text,
    relevant_tools,
    runaway,
    told_text,
)
from .shapes import AgentResult, Result, ToolFailure

__all__ = ["AgentCore", "AgentResult", "Event", "Finish", "Generate", "RunTools", "Spec", "ToolFailure"]

Event = dict[str, Any]

# Options that shape tool calls: the planning and answer turns have no tools. The answer
# keeps the caller's response_format; the plan, a list of lines, does not.
_TOOL_OPTIONS = ("tool_choice", "parallel_tool_calls", "tool_call_recovery")
# Stuck turns asked for the answer in a run: the first offers the tools that have not run yet,
# the last offers none.
MAX_NUDGES = 2
# Turns one planned step may take: its first, and one after each round of calls, so a step can
# chain calls (a lookup, then a lookup of what it found) without running on.
MAX_STEP_TURNS = 3
# Rounds of the check's rules once the steps run out: one before the check proper where nothing
# was found, one after it for a link its steps made possible.
RULE_ROUNDS = 2
# The ends of a run whose content is the model's last text (an answer, or what stood in for one).
_TEXT_ENDS = ("answer", "call_as_text", "no_answer", "unsupported")
# Words with which a step speaks of what an earlier step found.
_POINTS_BACK = re.compile(
    r"\b(?:that|those|it|its|them|this|these|result|results|found|returned|previous|above|same)\b", re.IGNORECASE
)
# A step that asks for a chain of its own: "then" past its start (a plan line "Square 2, then square
# that" is two steps, ``planner.parse_steps``; a condition is kept whole: "If it is late, then ...").
_CHAINED = re.compile(r"\S.*\b(?:then|after that|afterwards)\b", re.IGNORECASE)
NO_ANSWER = {"empty": "the last turn was empty", "echo": "the last turn repeated the request"}


@dataclass(frozen=True)
class Spec:
    """What an agent is, as far as its decisions go: tool names and schemas, options, limits."""

    tools: tuple[str, ...] = ()
    schemas: list[dict[str, Any]] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    max_steps: int = 8
    plan: bool = False
    system: str | None = None


@dataclass
class Generate:
    """Ask the model for one turn: these messages, tools and options; ``stream``: whether its
    text reaches the caller as ``"text"`` events."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    options: dict[str, Any]
    stream: bool = True


@dataclass
class RunTools:
    """Run these calls, in order: ``start_tool`` each, run it, then ``tool_done``."""

    calls: list[dict[str, Any]]


@dataclass
class Finish:
    """The run is over."""

    result: AgentResult


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
class _Run:
    """One run's transcript and bookkeeping; each method is one decision of the loop."""

    messages: list[dict[str, Any]]
    turns: list[Result] = field(default_factory=list)
    done: set[tuple[str, str]] = field(default_factory=set)
    nudges: int = 0  # stuck turns asked for the answer so far
    offer: list[str] | None = None  # the tools the next turn is offered; None: all of them
    tools: list[str] = field(default_factory=list)  # every tool's name
    schemas: list[dict[str, Any]] = field(default_factory=list)  # every tool's schema
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
    barred: set[str] = field(default_factory=set)  # tools out of the current step's grammar (its retry)
    replanned: bool = False  # the plan was checked against what was found
    rule_rounds: int = 0  # rounds of the check's rules after the steps ran out (``_check_rules``)
    plan_steps: list[str] = field(default_factory=list)  # the plan as the model wrote it
    notes: list[planner.Note] = field(default_factory=list)  # steps done in text, and their text
    system: str | None = None  # the caller's system message, for the planning and answer turns
    history: list[dict[str, Any]] = field(default_factory=list)  # the conversation before the question
    relevant: list[str] = field(default_factory=list)  # the tools the question gives a reason to call
    failures: list[ToolFailure] = field(default_factory=list)  # calls that gave no result, in order
    refused: set[str] = field(default_factory=set)  # ids of calls not run (figures from nowhere)
    told: bool = False  # the model was told, before its answer, which lookups failed
    looked_up: bool = False  # an answer from memory was sent back once for a lookup
    force_call: bool = False  # the next turn must call a tool (that lookup)
    unasked: set[str] = field(default_factory=set)  # ids of calls the request gave no reason for, not run
    answer: str | None = None  # the answer as returned, where it differs from the last turn's text
    revised: list[str] = field(default_factory=list)  # the answer's sentences replaced (``unfounded``)
    rejected: list[str] = field(default_factory=list)  # branches a decided condition ruled out
    held: bool | None = None  # did the last condition decided hold (for an "otherwise" step after it)?
    decided_on: set[int] = field(default_factory=set)  # the results conditions were decided by

    def options(self, base: Mapping[str, Any]) -> dict[str, Any]:
        options = dict(base)
        if self.force_call:  # figures stated from memory: the turn after looks them up
            options["tool_choice"] = "required"
        elif self.offer is not None:  # the turn after a nudge: only tools that have not run
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
        self.step_turns, self.barred = 0, set()
        self.step_found = len(self.results)
        if (step := self.steps[0]) is not None:
            self.messages.append(planner.step_message(step))

    def act(self, result: Result) -> str:
        """Record a turn of the plan's current step: "calls", "answer", "next", "retry" (the same
        step again) or "context_full"."""
        self.turns.append(result)
        self.force_call = False
        message, calls, self.invalid = _with_invalid_calls(result)
        known = self.known()
        # The question as asked (a one-step plan) is the plain loop's turn: a call with figures
        # from nowhere is answered with why it did not run (``AgentCore.start_tool``), not dropped.
        whole = self.steps[0] is None
        fresh = [c for c in calls if self.founded(c, known)]
        if calls and not fresh and not any(call_key(c) in self.done for c in calls):
            self.pending = []  # only calls with values from nowhere: none is run
            if self.step_turns == 0 and not self.in_text:
                # The step again: with that tool barred where the step names something no call
                # took (a lookup is wanted: "Tell me how much warmer Lima is" got calculator("2 +
                # 3 * 4")), or, for the question as asked, where it points to another tool; else
                # tools off (a step no tool fits: "Name a fruit").
                tools = {c["function"]["name"] for c in calls}
                pointed = set(relevant_tools(self.question, self.schemas)) - tools if whole else self.untaken_names()
                if pointed and self.bar(tools, as_asked=True):
                    return "retry"
                if not whole:
                    self.in_text = True
                    return "retry"
            # The question as asked, with nothing to look up: the answer turn (tools off, the
            # request alone) writes text; told to answer with tools off in this transcript, a
            # 0.5B model wrote a call's JSON.
            return "next"
        if self.off_step(calls, fresh):
            self.pending = []
            return "retry"
        if self.runs_on(fresh):
            self.pending = []
            return "next"
        if not calls and not self.in_text and self.bar(_written_tools(result, self.tools)):
            self.pending = []  # a call written out to the token limit ("2.8 * 1000000..."): another tool
            return "retry"
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
        if self.steps[0] is None and not self.results:
            # Nothing looked up: the text is the answer, unless it states figures from memory or
            # is a call (then, once, the question again with a call required), or repeats the question or
            # says nothing (then, once, the question again, tools off).
            if _kind(result, self.question, self.tools) in ("echo", "empty") and not self.nudges:
                self.nudges, self.in_text, self.step_turns = 1, True, 0
                self.messages.append({"role": "user", "content": nudge_text(self.question, [])})
                return "retry"
            # A call written as text ("Four coffees and a melon: what's the bill?" came as the
            # calculator's JSON, on figures from nowhere) is a lookup wanted: asked again like one
            # from memory.
            as_text = _kind(result, self.question, self.tools) == "call_as_text"
            if self.looked_up or not (as_text or self.from_memory(result.get("content"))):
                return "answer"
            self.step_turns = 0  # the step again, from its start
            if as_text:  # not the tool it wrote on figures from nowhere
                self.bar(_written_tools(result, self.tools), as_asked=True)
            self.look_up()
            return "retry"
        if self.steps[0] is None:
            return "next"
        if len(self.results) == self.step_found:  # a step done in text, with no tool: the answer needs it
            self.notes.append((self.steps[0], plain_text((result.get("content") or "").strip())))
        return "next"

    def founded(self, call: dict[str, Any], known: str) -> bool:
        """May a step's call run? Not where its values come from nowhere, nor where it wanders
        (then it is listed as refused, with why): a planned step's call must take one from the
        run; the question as asked (a one-step plan) must not write a name the run never saw
        (``chain.names_from_nowhere``), nor guess with small numbers at what a lookup it skipped
        would find (``planner.figures_from_nowhere``); its other figures from nowhere are answered
        with why they did not run (``AgentCore.start_tool``), where the model can look them up.
        A guess, or a wander, is no lookup the request needed (``unasked``): its refusal does not
        make the run one whose tools failed."""
        if call_key(call) in self.done:
            return False
        fn, whole = call["function"], self.steps[0] is None
        nowhere = " appear in neither the request nor any tool result"
        why, unasked = "", True
        if not whole and not planner.grounded(call, known):
            why, unasked = "its arguments come from neither the request nor a result", False
        elif whole and (names := self.made_up_names(call)):
            why = ", ".join(names) + nowhere
        elif whole and (figures := planner.figures_from_nowhere(call, known)) and self.unlooked():
            why = ", ".join(f"{n:g}" for n in figures) + nowhere
        elif wandered := self.wanders(call):
            why = f"nothing was found for {wandered}, and the request gives no reason to call {fn['name']}"
        if why and unasked:
            self.unasked.add(call["id"])
        if why:
            self.failures.append(ToolFailure(call["id"], fn["name"], fn["arguments"], f"not run: {why}", True))
        return not why

    def unlooked(self) -> bool:
        """Is there a lookup the request points to (a tool that does no arithmetic) that has not
        answered yet? Then arithmetic on small numbers from nowhere is a guess at what it finds."""
        pointed = set(relevant_tools(self.question, self.schemas)) - self.answered_tools()
        return any(
            str((s.get("function") or {}).get("name")) in pointed and not does_arithmetic(s) for s in self.schemas
        )

    def wanders(self, call: dict[str, Any]) -> str:
        """The name a call takes that another tool's lookup failed on, where neither the request nor
        the step points to this tool ("" if none): after currency_of(Atlantis) failed, a 0.5B model
        called country_of(Atlantis), which nothing asked for."""
        fn = call["function"]
        step = self.steps[0] if self.steps else None
        if fn["name"] in relevant_tools(f"{self.question}\n{step or ''}", self.schemas):
            return ""
        failed_on = {
            str(v).strip().lower(): str(v).strip()
            for c, out in self.results
            if planner.failed(out) and c["function"]["name"] != fn["name"]
            for v in planner.argument_leaves(c)
            if isinstance(v, str)
        }
        return next(
            (failed_on[k] for v in planner.argument_leaves(call) if (k := str(v).strip().lower()) in failed_on), ""
        )

    def made_up_names(self, call: dict[str, Any]) -> list[str]:
        """The names a call writes that the run never saw (its instructions, the request, the
        conversation, what was found)."""
        return chain.names_from_nowhere(call, f"{self.system or ''}\n{self.known()}", self.schemas)

    def off_step(self, calls: list[dict[str, Any]], fresh: list[dict[str, Any]]) -> bool:
        """A planned step's first turn that does not serve the step, asked again once with its
        tools out of the step's grammar (``barred``): it only repeats calls that ran, which take
        nothing from the step while the step's words point to another tool ("If it is above 25
        degrees, convert it" answered by the weather lookup again; a repeat that takes from the
        step, "Compute 17 * 23" done by an earlier step, served it), or it takes neither a name
        the step gives nor anything a result returned ("Check the temperature in Cairo" answered
        by ``convert_units(25, ...)``, the 25 of the request's condition). A 0.5B model under a
        required tool choice picks the next tool that fits once the wrong one is out of reach.
        Where the turn after the bar misses the step again, no tool fits it: it is done in text
        ("Say hello in French" answered by get_weather, then get_population, for the next step's
        city)."""
        step = self.steps[0]
        if step is None or not calls:
            return False
        barred = {c["function"]["name"] for c in calls}
        pointed = set(relevant_tools(step, self.schemas)) - barred
        repeats = not fresh and bool(pointed) and not any(planner.grounded(c, step, words=True) for c in calls)
        names = _step_names(step, self.question)
        found = "\n".join(out for _, out in self.results if not planner.failed(out))
        missed = bool(names) and not any(_takes(c, names, found) for c in fresh)
        if not (repeats or (bool(fresh) and missed)):
            return False
        if self.barred and not self.step_turns and not self.in_text and not pointed:
            self.in_text = True
            return True
        return self.bar(barred)

    def untaken_names(self) -> list[str]:
        """The names the current step gives (from the request) that no call has taken."""
        step = self.steps[0] if self.steps else None
        took = set().union(*planner.taken(self.results).values())
        return [n for n in _step_names(step or "", self.question) if n.lower() not in took]

    def bar(self, tools: set[str], as_asked: bool = False) -> bool:
        """Bar ``tools`` from the current planned step's first turn (with ``as_asked``, the
        question's as asked too), taken once more; False where that cannot be (not such a turn,
        barred once already, no tool left)."""
        if not tools or self.step_turns or self.barred or not set(self.tools) - tools:
            return False
        if self.steps[0] is None and not as_asked:
            return False
        self.barred = tools
        return True

    def runs_on(self, fresh: list[dict[str, Any]]) -> bool:
        """Does a planned step's later turn feed the step's own output back into its tool
        ("5002000.0 / 2" after "10004000 / 2" returned 5002000.0, for "Then compute that number
        divided by 2"), where the step asks for no chain of its own (``_CHAINED``)? A small model
        runs on so under a required tool choice: the step is done."""
        step = self.steps[0]
        if step is None or not self.step_turns:
            return False
        if planner.own_words(step) != step:  # the arithmetic a check added is one calculation
            return len(self.results) > self.step_found
        if _CHAINED.search(step):
            return False
        return any(fed_back(c, self.results[self.step_found :]) for c in fresh)

    def known(self) -> str:
        """What the run knows, for telling a call's arguments from invented ones: the request, the
        conversation, the calls and results, and the steps done in text. Not the plan: a plan
        line is the model's own, and one written from memory ("The capital of Japan is
        Tokyo.") made ``get_weather(Tokyo)`` look grounded for a step no tool fits."""
        found = [f"{c['function']['arguments']} {out}" for c, out in self.results]
        said = [m["content"] for m in self.history if isinstance(m.get("content"), str)]
        return "\n".join([self.question, *found, *said, *(t for _, t in self.notes)])

    def after_calls(self, max_steps: int) -> None:
        """A step's calls ran: it goes on (tools offered; a lookup may need a lookup of what it
        found) until the model stops calling, within its turns and the run's budget."""
        if not (self.tool_turns < max_steps and self.step_turns < MAX_STEP_TURNS):
            self.next_step(max_steps)

    def next_step(self, max_steps: int) -> None:
        """The current step is done: take the next; once they run out, check the plan against
        what was found (once, if something was); else go answer."""
        self.steps.pop(0)
        self._settle()
        if self.tool_turns >= max_steps:
            self.phase = "answer"
        elif self.steps:
            self._open_step()
        else:
            self.phase = "replan" if self.results and not self.replanned else "answer"

    def replan(self, steps: list[str]) -> None:
        """Act on the steps the check found still needed (each a planned step), or go answer."""
        self.replanned = True
        self.take_steps(steps)

    def take_steps(self, steps: list[str]) -> None:
        """Act on ``steps`` (each a planned step), or go answer: the check's, or its rules' alone
        (``AgentCore._check_rules``, which leave whether the check ran as it was)."""
        self.steps = list(steps)
        self.plan_steps += steps
        self._settle()
        self.phase = "act" if self.steps else "answer"
        if self.steps:
            self._open_step()

    def _settle(self) -> None:
        """Decide the conditional steps at the head of the plan once a figure is found
        (conditions.py): the branch to do replaces the step, a step left with nothing to do is
        dropped, and the branch not taken is kept so that no check brings it back."""
        while self.steps and self.steps[0] is not None:
            decision = conditions.decide(self.steps[0], chain.figures(self.results), self.held)
            if decision is None:
                return
            self.held = decision.held
            # The figure a condition was decided by is one the request asked to check: stated.
            answered = [i for i, (_, out) in enumerate(self.results) if not planner.failed(out)]
            self.decided_on.update(answered[-1:])
            if decision.rejected:
                self.rejected.append(decision.rejected)
            if decision.chosen:
                self.steps[0] = decision.chosen
                return
            self.steps.pop(0)

    def wanted(self) -> str:
        """The request less the branches a decided condition ruled out: the check reads it, so
        that "otherwise tell me the temperature in Oslo" brings no step for Oslo once the
        condition chose Cairo."""
        text = self.question
        for branch in self.rejected:
            said = branch.strip(" .").lower()
            at = text.lower().find(said)
            if at >= 0:
                text = text[:at] + text[at + len(said) :]
            else:
                for name in planner.NAME.findall(branch):
                    text = re.sub(rf"\b{re.escape(name)}\b", "", text)
        return text

    def turn_tools(self, schemas: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if self.offer is None or schemas is None:
            return schemas
        return [t for t in schemas if t["function"]["name"] in self.offer] or None

    def step_tools(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        """The tools a planned step's first turn may call: those its words point to, where any
        do ("Convert 50 lb to kg": ``convert_units``, not the calculator a 0.5B model picked), less
        those ``off_step`` barred; every tool otherwise. The question as asked (a one-step plan)
        is held so only on the turn after its call was barred ("What do 3 melons cost?": the
        calculator's guess barred, the tools "cost" points to). The prompt still shows them all (the
        narrowing is the grammar's, as in chain.py: a prompt that changes per step loses the
        cached prefix and moves the model's choice)."""
        step = self.steps[0] if self.phase == "act" and self.steps else None
        if not tools or self.phase != "act" or self.step_turns or self.in_text:
            return tools
        open_ = [t for t in tools if t["function"]["name"] not in self.barred] or tools
        if step is None and not self.barred:  # the question as asked: every tool
            return tools
        pointed = set(relevant_tools(step or self.question, open_))
        return [t for t in open_ if t["function"]["name"] in pointed] or open_

    def chains(self) -> bool:
        """Are the next turn's name slots narrowed to the names found (chain.py)? On a planned
        step's first turn only, decided on the benchmark's development half: the turns after a
        step's calls end it by repeating a call, which a narrowed slot forbids, and where the
        model acts on the question as asked (the plain loop, a one-step plan) it picks the tool as
        it goes; in both it then wrote a new call with the found name in the wrong tool
        (country_of(city="Norway") after country_of(city="Bergen") returned Norway)."""
        return self.phase == "act" and bool(self.steps) and self.steps[0] is not None and self.step_turns == 0

    def points_back(self) -> bool:
        """Does the current step speak of what an earlier one found ("convert that many km", "if
        it is above 25 degrees")? Its first call's number slots then take a figure a result
        returned (chain.py): told "convert that many km to miles" after 19 * 21 returned 399.0,
        a 0.5B model wrote 19."""
        step = self.steps[0] if self.steps else None
        return step is not None and bool(_POINTS_BACK.search(step))

    def finders(self) -> str:
        """What the tools whose calls succeeded say of themselves (their descriptions): the unit
        of a figure they found ("in degrees Celsius")."""
        ran = self.answered_tools()
        fns = [t.get("function") or {} for t in self.schemas]
        return "\n".join(fn.get("description") or "" for fn in fns if fn.get("name") in ran)

    def acts_as_asked(self) -> bool:
        """Is the model acting on the question as asked (the plain loop, or a one-step plan)?"""
        return self.phase == "loop" or (self.phase == "act" and bool(self.steps) and self.steps[0] is None)

    def unused_tools(self) -> list[str]:
        ran = {name for name, _ in self.done}
        return [name for name in self.tools if name not in ran]

    def take(self, result: Result) -> str:
        """Record one model turn; returns what to do next: "answer", "nudge", "calls",
        "context_full" or "tools_failed"."""
        self.turns.append(result)
        self.offer, self.force_call = None, False
        message, calls, self.invalid = _with_invalid_calls(result)
        kind = "calls" if calls else _kind(result, self.question, self.tools)
        if kind == "call_as_text" and (written := calls_in_text(result.get("content"), self.tools)):
            # A call written as the answer's text (tools were off, or the library could not
            # recover it): a new one is run as a call; a repeat is a stuck turn.
            calls, kind = written, "calls"
            message = {"role": "assistant", "content": None, "tool_calls": written}
        if kind == "calls" and self.unprompted(calls):
            return "again"
        self.pending = calls
        if kind == "calls" and all(runaway(c, self.results) for c in calls):
            kind = "runaway"  # the same tool fed its own output again and again: stuck
        if (kind == "calls" and not all(call_key(c) in self.done for c in calls)) or result.get("truncated"):
            self.messages.append(message)
            return "context_full" if result.get("truncated") else "calls"
        if kind == "answer":
            return self._answered(result, message)
        return self._stuck(bool(result.get("tool_calls")))

    def unprompted(self, calls: list[dict[str, Any]]) -> bool:
        """A first turn's calls when the request gives no reason to call any tool (no tool's name
        or description shares a word with it) and none takes a word or figure from it: not run
        (listed as refused), and the turn is asked again with tools off, once. A 0.5B model
        thanked for its help called ``calculator("2 + 3 * 4")``; a request in other words than the
        tool's ("who won the cup", for ``search``) still runs its call."""
        said = [m["content"] for m in self.history if isinstance(m.get("content"), str)]
        known = "\n".join([self.system or "", *said, self.question])
        if self.relevant or self.results or self.unasked or any(planner.grounded(c, known, words=True) for c in calls):
            return False
        why = "not run: the request gives no reason to call a tool, and the call takes nothing from it"
        for c in calls:
            self.unasked.add(c["id"])
            self.failures.append(ToolFailure(c["id"], c["function"]["name"], c["function"]["arguments"], why, True))
        self.offer = []
        return True

    def _stuck(self, called: bool, again: bool = False) -> str:
        """A turn that is no step forward: it repeats calls that ran, writes a call as text that
        cannot run, repeats the request, or is empty. Small models do all of these. Ask, plainly,
        for the answer instead, restating the question and every result, and offer (and name) only
        the tools that have not run and that the question gives a reason to call (a task may need
        one more); the last time, none. (Offering every tool again, as the doors do, made
        qwen2.5-coder-0.5b repeat once more and then write its calls as text; offering the tools
        that had not run made it call one the question has no use for: on the benchmark's
        development half 4/34 solved and a stray call in 22 of the 34 runs; 10/34 and 10 runs
        with the question's tools only.)"""
        if self.nudges >= MAX_NUDGES and not called:
            # Asked for the answer twice, it still wrote no answer: one last turn answers from the
            # question and the results alone, as plan mode does, in a chat with no tool in sight.
            self.phase = "answer"
            return "nudge"
        self.nudges += 1
        # ``again``: the answer stated figures no result holds, so a tool that ran may be needed
        # again, for another argument (the second city's population).
        unused = self.tools if again else self.unused_tools()
        self.offer = [t for t in unused if t in self.relevant] if self.nudges < MAX_NUDGES else []
        nudge = nudge_text(self.question, self.results, self.offer, named=self.relevant)
        self.messages.append({"role": "user", "content": nudge})
        return "nudge"

    def _answered(self, result: Result, message: dict[str, Any]) -> str:
        """A text answer: final, unless it leans on nothing (figures from memory, no lookup made:
        sent back once to look them up) or some lookups failed and the model was not yet told so
        plainly (one more turn, tools off, with the failures spelled out)."""
        self.messages.append(message)
        if self.needed_failures() and not self.succeeded():
            return "tools_failed"
        if not self.results and not self.looked_up and self.tools and self.from_memory(result.get("content")):
            self.look_up()
            return "nudge"
        if (failed := self.failed_tools()) and not self.told:
            self.told, self.offer = True, []
            self.messages.append({"role": "user", "content": told_text(self.question, failed)})
            return "nudge"
        if self.results and self.nudges < MAX_NUDGES and self.unsupported(result.get("content")):
            self.messages.pop()  # not an answer to build on: the nudge restates what was found
            return self._stuck(False, again=True)
        return "answer"

    def unsupported(self, content: str | None) -> list[float]:
        """The figures an answer states that neither the request, the conversation, any call or
        result of the run, nor a step done in text holds."""
        return invented_numbers(content or "", [self.known()])

    def from_memory(self, content: str | None) -> bool:
        """Does the text state figures that neither the request nor the conversation before it holds?"""
        said = [m["content"] for m in self.history if isinstance(m.get("content"), str)]
        return bool(invented_numbers(content or "", [self.question, *said]))

    def look_up(self) -> None:
        """Send an answer from memory back, once: the next turn must call a tool."""
        self.looked_up = self.force_call = True
        self.messages.append({"role": "user", "content": LOOK_UP})

    def answered_tools(self) -> set[str]:
        """The tools that returned a result (not an error) in this run."""
        return {call["function"]["name"] for call, output in self.results if not planner.failed(output)}

    def succeeded(self) -> bool:
        return bool(self.answered_tools())

    def needed_failures(self) -> list[ToolFailure]:
        """The failures of calls the request called for (not those it gave no reason for)."""
        return [f for f in self.failures if f.id not in self.unasked]

    def failed_tools(self) -> list[ToolFailure]:
        """The failures of tools that never returned a result in this run (a tool that failed once
        and then answered a retry has its result)."""
        ok = self.answered_tools()
        return [f for f in self.needed_failures() if f.name not in ok]

    def conclude(self, result: Result) -> AgentResult:
        """The run's result from its last turn, which was to be the answer."""
        content, copied = without_copied_facts(result.get("content") or "", self.tools)
        kind = _kind({**result, "content": content} if copied else result, self.question, self.tools)
        if copied and kind in ("empty", "echo") and self.succeeded():
            content, kind = "", "answer"  # only the findings, copied: they are stated below
        if kind in ("empty", "echo"):
            return self.result("no_answer", NO_ANSWER[kind])
        if kind == "call_as_text":
            return self.result("call_as_text")
        if self.needed_failures() and not self.succeeded():
            return self.result("tools_failed")
        content, replaced = unfounded(content, failed_subjects(self.question, self.results, self.refused))
        self.revised = [*copied, *replaced]
        found = findings(self.results, self.decided_on)
        said, content = content, with_findings(content, found)
        if made_up := self.unsupported(content):
            # The sentences stating made-up figures go, and what was found is stated in their
            # place; an answer with nothing left is no answer.
            kept, dropped = without_invented(said, [self.known()])
            kept = with_findings(kept, found)
            if not kept.strip() or self.unsupported(kept):
                figures = ", ".join(f"{n:g}" for n in made_up)
                why = f"the answer states figures no tool returned and the request does not hold: {figures}"
                return self.result("unsupported", why)
            content, self.revised = kept, [*self.revised, *dropped]
        if content != (result.get("content") or ""):
            self.revise(result.get("content"), content)
        return self.result("answer")

    def revise(self, said: str | None, content: str) -> None:
        """Return ``content`` as the answer, in the transcript too, in place of what the model said."""
        self.answer = content
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            if m.get("role") == "assistant" and m.get("content") == said:
                self.messages[i] = {**m, "content": content}
                break

    def record(self, call: dict[str, Any], output: str) -> dict[str, Any]:
        self.done.add(call_key(call))
        if planner.failed(output):
            fn, refused = call["function"], call["id"] in self.refused
            self.failures.append(ToolFailure(call["id"], fn["name"], fn["arguments"], output[6:].strip(), refused))
        self.results.append((call, output))
        message = {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": output}
        self.messages.append(message)
        return message

    def result(self, stopped: str, error: str | None = None) -> AgentResult:
        content = self.turns[-1].get("content") if stopped in _TEXT_ENDS and self.turns else None
        if stopped in _TEXT_ENDS and self.answer is not None:
            content = self.answer
        if stopped == "tools_failed":
            content = failed_text(self.needed_failures())
        return AgentResult(content, self.messages, self.turns, stopped, error, list(self.failures))


def _answer_messages(state: _Run) -> list[dict[str, Any]]:
    return planner.answer_messages(state.question, state.results, state.notes, state.system, state.history)


def _made_up(args: dict[str, Any], known: str) -> list[float]:
    """The figures in a call's arguments when none of them is one the run knows (the request,
    earlier results): a small model's guess (``divide(a=1e9, b=5e8)`` for two populations it never
    looked up). Whole numbers 0-10 written plainly do not count either way."""
    made_up = invented_numbers(json.dumps(args, ensure_ascii=False), [known])
    stated = invented_numbers(json.dumps(args, ensure_ascii=False), [])
    return made_up if stated and len(made_up) == len(stated) else []


def failed_text(failures: Sequence[ToolFailure]) -> str:
    """A run's content when every call failed: what failed and why, in the library's words."""
    lines = [f"- {f.name}({f.arguments}): {f.error}" for f in failures]
    return "No answer: every tool call failed.\n" + "\n".join(lines)


_WRITTEN_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


def _written_tools(result: Result, tools: Sequence[str]) -> set[str]:
    """The tools a turn's text names in calls it wrote out, runnable or cut at the token limit."""
    if _kind(result, "", tools) != "call_as_text":
        return set()
    return {n for n in _WRITTEN_NAME.findall(result.get("content") or "") if n in tools}


def _step_names(step: str, question: str) -> list[str]:
    """The names a step gives that the request gave too (not a word the plan made up)."""
    return [n for n in planner.NAME.findall(step) if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", question)]


def _takes(call: dict[str, Any], names: Sequence[str], found: str) -> bool:
    """Does the call take one of ``names``, or a value that a result returned (a figure of it,
    in an expression: small whole numbers tell nothing)?"""
    asked, figures = {n.lower() for n in names}, numbers(found)
    for v in planner.argument_leaves(call):
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and any(planner.same(v, f) for f in figures):
            return True
        text = str(v).strip().lower()
        if isinstance(v, str) and len(text) > 1 and (text in asked or text in found.lower()):
            return True
        # An expression on a figure found ("240 * 0.25" after the stock lookup returned 240).
        telling = [n for n in numbers(text) if not planner.small_whole(n)]
        if isinstance(v, str) and any(planner.same(n, f) for n in telling for f in figures):
            return True
    return False


def _kind(result: Result, question: str, tools: Sequence[str]) -> str:
    """``answers.verdict`` of a turn's text; text cut at the token limit that began as a call
    (small models run on writing calls) is a call written as text too."""
    content = result.get("content") or ""
    cut = result.get("finish_reason") == "length" and content.lstrip().startswith(("{", "[", "```", "<tool_call>"))
    return "call_as_text" if cut else verdict(content, question, tools)


class AgentCore:
    """One run of an agent: ask ``next_action()``, do it, report back; ``drain()`` the events."""

    def __init__(self, spec: Spec, prompt: str | Sequence[Mapping[str, Any]]) -> None:
        self.spec = spec
        self.state = _begin(spec, prompt)
        self._events: list[Event] = []
        self._final: AgentResult | None = None
        self._to_run: list[dict[str, Any]] = []  # calls handed out by the last RunTools, not yet done

    def drain(self) -> list[Event]:
        """The events since the last drain, in order (``turn``, ``nudge``, ``plan``, ``tool_call``,
        ``tool_result``); a driver passes them to ``on_event``."""
        events, self._events = self._events, []
        return events

    def next_action(self) -> Generate | RunTools | Finish:
        if self._final is not None:
            return Finish(self._final)
        if self._to_run:
            return RunTools(list(self._to_run))
        turn = self._next_turn()
        if isinstance(turn, AgentResult):
            self._final = turn
            return Finish(turn)
        return turn

    def turn_failed(self, error: ShimError) -> None:
        """A model turn failed: a full context ends the run with its transcript, anything else
        raises ``AgentError`` carrying the transcript and the tools that ran."""
        if isinstance(error, ContextFull):
            self._final = self.state.result("context_full", str(error))
            return
        raise AgentError(f"the agent run stopped: {error}", self.state.result("error", str(error))) from error

    def turn_done(self, result: Result) -> None:
        """Record one model turn: the run ends here, or its calls are the next action."""
        self._events.append({"type": "turn", "result": result})
        outcome = self._after_plan_turn(result) if self.state.phase != "loop" else self._after_loop_turn(result)
        if isinstance(outcome, AgentResult):
            if self.state.answer is not None:  # the streamed text is not what is returned
                self._events.append({"type": "revised", "content": outcome.content, "replaced": self.state.revised})
            self._final = outcome
        else:
            self._to_run = list(outcome)

    def start_tool(self, call: dict[str, Any]) -> dict[str, Any] | str:
        """Announce a call; returns its arguments to run it with, or the error text the model gets."""
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        self._events.append({"type": "tool_call", "id": call["id"], "name": name, "arguments": arguments})
        if call["id"] in self.state.invalid:  # the library checked it against the tool's schema
            return f"error: {self.state.invalid[call['id']]}; call {name} again with valid arguments"
        if name not in self.spec.tools:
            return f"error: unknown tool {name!r}; available tools: {', '.join(sorted(self.spec.tools)) or 'none'}"
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return f"error: the arguments are not valid JSON ({e.msg}); send a JSON object"
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object"
        if self.state.acts_as_asked() and (names := self.state.made_up_names(call)):
            self.state.refused.add(call["id"])  # plan mode drops such a call in ``_Run.act``
            return (
                f"error: not run: {', '.join(names)} appear in neither my question nor any tool result. "
                "Call a tool only for what the question names or a result gave."
            )
        if self.state.acts_as_asked() and (made_up := _made_up(args, self.state.known())):
            # Plan mode drops such a call before it is announced (``_Run.act``); the plain loop
            # answers it, so the model sees why and can look the figures up.
            self.state.refused.add(call["id"])
            figures = ", ".join(f"{n:g}" for n in made_up)
            return (
                f"error: not run: {figures} appear in neither my question nor any tool result. "
                "Look them up with a tool first, or use the values the results gave."
            )
        return args

    def tool_done(self, call: dict[str, Any], output: str) -> None:
        """A call's output (its value as text, or its error); after a turn's last call, the next step."""
        self.state.record(call, output)
        name = call["function"]["name"]
        self._events.append({"type": "tool_result", "id": call["id"], "name": name, "content": output})
        self._to_run = [c for c in self._to_run if c["id"] != call["id"]]
        if not self._to_run and self.state.phase == "act" and self.state.pending:
            self.state.after_calls(self.spec.max_steps)  # plan mode: the step goes on, or the next

    def _plain_options(self, **extra: Any) -> dict[str, Any]:
        options = {k: v for k, v in self.spec.options.items() if k not in _TOOL_OPTIONS}
        return {**options, **extra}

    def _next_turn(self) -> Generate | AgentResult:
        state = self.state
        if state.phase in ("plan", "replan"):
            options = self._plain_options(max_tokens=planner.PLAN_TOKENS)
            options.pop("response_format", None)
            if state.phase == "plan":
                chat = planner.plan_messages(state.question, state.system, state.history)
            else:
                chat = planner.replan_messages(state.question, state.results, state.notes)
            return Generate(chat, None, options, stream=False)
        if state.phase == "answer":
            return Generate(_answer_messages(state), None, self._plain_options())
        if state.phase == "loop":  # plan mode bounds its rounds of calls in _Run.act
            if state.tool_turns >= self.spec.max_steps:
                return state.result("max_steps")
            state.tool_turns += 1
        tools, options = state.turn_tools(self.spec.schemas), state.options(self.spec.options)
        grammar = state.step_tools(tools)  # the tools a step's words point to, less those barred
        if state.chains():  # a name a lookup found, not one from nowhere (chain.py)
            # An expression on what was found: the figures found and the ones the step states,
            # less those a call already took.
            step = state.steps[0] or ""
            figures, stated = chain.fresh_figures(state.results, step) if state.points_back() else ([], [])
            terms = figures + stated if figures else []
            # Combined as the step asks, or the request where the step's words do not say.
            operation = chain.asked_operation(step) or chain.asked_operation(state.question)
            names = chain.choices(state.wanted(), state.results)
            # So many of a thing whose figure was found: their product ("3 melons": 3 * 2.8).
            products = chain.counted(state.question, state.results) if operation in (None, "+", "*") else []
            grammar = chain.narrowed(grammar, names, figures, terms, operation, products)
            # The units the step names ("Convert 50 lb to kg": pounds and kg; asked for "lb", a
            # 0.5B model wrote "l" and the enum made it "liters"), and where it works on what was
            # found, those its finders state.
            grammar = chain.units_named(grammar, f"{step}\n{state.finders() if figures else ''}")
        if grammar != tools:
            options["grammar_tools"] = grammar
        return Generate(state.messages, tools, options)

    def _after_loop_turn(self, result: Result) -> AgentResult | list[dict[str, Any]]:
        state = self.state
        step = state.take(result)
        if step == "nudge":
            if state.phase == "loop":
                self._events.append({"type": "nudge", "content": state.messages[-1]["content"]})
            return []
        if step == "again":
            return []
        if step == "context_full":
            return state.result("context_full", "the context filled up during the model's turn")
        if step in ("answer", "tools_failed"):
            return state.conclude(result)
        return state.pending

    def _after_plan_turn(self, result: Result) -> AgentResult | list[dict[str, Any]]:
        state = self.state
        if state.phase in ("plan", "replan"):
            steps = planner.parse_steps(result.get("content"), self.spec.max_steps)
            state.turns.append(result)
            if state.phase == "plan":
                self._events.append({"type": "plan", "steps": steps})
                state.begin_steps(steps)
            else:
                steps = planner.new_steps(steps, [state.question, *state.plan_steps], state.results)
                # What the check missed (a failed link a result can feed, a name no call took, a
                # figure the request gives that nothing used) follows what it said.
                rules = missed.missed_steps(state.wanted(), state.results, state.schemas, self.spec.max_steps)
                steps = missed.joined(steps, rules, self.spec.max_steps)
                self._events.append({"type": "plan", "steps": steps, "revised": True})
                state.replan(steps)
            return []
        if state.phase == "answer":
            state.turns.append(result)
            state.messages += [_answer_messages(state)[-1], result["message"]]
            return state.conclude(result)
        step = state.act(result)
        if step == "context_full":
            return state.result("context_full", "the context filled up during the model's turn")
        if step == "answer":
            return state.conclude(result)
        if step == "next":
            state.next_step(self.spec.max_steps)
            self._check_rules()
        return state.pending

    def _check_rules(self) -> None:
        """The steps ran out: the check's rules (``missed``) read the request against what ran
        once more, for a link the last steps made possible or a lookup that found nothing.
        With nothing found and calls refused or failed (a name from nowhere: "Japan's capital
        city: what's the temperature there?" called get_weather(Tokyo), the model's own answer to
        the lookup it skipped; "Egypt's capital has how many residents?" called
        get_population(Egypt)), they give that lookup ("Call capital_of for Japan."), and the
        check proper still follows once it ran. After the check, a step it added may have found
        what a failed call needed (get_weather(Japan) failed, then the check's capital_of(Japan)
        returned Tokyo: get_weather for Tokyo). A step already planned is not planned again,
        and the rounds are few (``RULE_ROUNDS``); with no new step, the answer."""
        state = self.state
        unfound = not state.succeeded() and bool(state.failures)
        if state.phase != "answer" or state.rule_rounds >= RULE_ROUNDS or not (unfound or state.replanned):
            return
        state.rule_rounds += 1
        rules = missed.missed_steps(state.wanted(), state.results, state.schemas, self.spec.max_steps)
        if steps := [s for s in rules if s not in state.plan_steps]:
            self._events.append({"type": "plan", "steps": steps, "revised": True})
            state.take_steps(steps)


def _no_tool_for(state: _Run) -> bool:
    """A request no tool is for needs no plan (the plain loop's turn): no tool's name or
    description shares a word with it, it states no figure ("Compute 2 ** 10" shares no word
    with "Evaluate an arithmetic expression" and needs the calculator), names none of a tool's
    fixed choices ("how much does bread cost": an item two tools take), and names nothing where
    a tool takes a name ("How warm is it in Bergen and in Lyon": a city)."""
    if state.relevant or any(ch.isdigit() for ch in state.question):
        return False
    if named_choices(state.question, choice_owners(state.schemas)):
        return False
    takes_names = any(chain.name_slots(s) for s in state.schemas)
    return not (takes_names and planner.NAME.search(state.question.strip()))


def _begin(spec: Spec, prompt: str | Sequence[Mapping[str, Any]]) -> _Run:
    """The opening transcript: the system message (if any), then the prompt."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if spec.system is not None:
        first = messages[0] if messages else {}
        if first.get("role") not in ("system", "developer"):
            messages.insert(0, {"role": "system", "content": spec.system})
        elif first.get("content") != spec.system:
            raise InvalidRequest(
                "Agent(system=...) was given and the messages start with a different system message; "
                "pass only one of them"
            )
    asked = [i for i, m in enumerate(messages) if m.get("role") == "user" and isinstance(m.get("content"), str)]
    question = messages[asked[-1]]["content"] if asked else ""
    state = _Run(messages, question=question, tools=list(spec.tools), schemas=list(spec.schemas or []))
    if asked:  # what the planning and answer turns see besides the question
        first = messages[0]
        lead = first.get("role") in ("system", "developer") and isinstance(first.get("content"), str)
        state.system = first["content"] if lead else None
        state.history = messages[1 if lead else 0 : asked[-1]]
    # The tools the request gives a reason to call; the caller's instructions count ("You watch
    # the disks" and a request of "Go.").
    state.relevant = relevant_tools(f"{state.system or ''}\n{state.question}", spec.schemas or [])
    if spec.plan and spec.schemas and state.question and not _no_tool_for(state):
        state.phase = "plan"
    return state
