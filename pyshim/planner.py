"""Plan, act, answer: how ``Agent(plan=True)`` keeps a small model on a multi-part task.

Small models (0.5B and under) call the right tool for one question but lose the thread
of a request with several parts: after the first result they repeat the call, run on
through the tool's other arguments, or answer with one result. The plan mode splits the
work so that every model turn has one small job: list the steps (a few-shot chat of its
own), take the steps in turn, each as many turns as it needs, then write the answer from a
short context holding the request and what the steps found.

The plan adapts as it goes: a step is taken with what earlier steps found in view (the
transcript holds their calls and results), so a step written against an earlier result ("the
author found in step 1", "if it is late ...") takes its arguments from it; after each round of
calls the step goes on, tools offered, until the model stops calling (a lookup, then a lookup
of what it found, is one step), and a step no tool fits is done in text, which the answer sees.
Once the steps run out the model checks what is still needed; where it answers "none" with a part
plainly missed, the missed parts become steps (``missed.missed_steps``, with ``untaken_steps`` here
and ``chain.retry_steps``). A plan line that holds two steps (two sentences, a "then", an "and"
before an instruction on what the first found, ", and" before a second question) is split into
them (``parse_steps``); a step that
opens with a condition on a figure is decided by the figure found before the model sees it
(``conditions.decide``), and the check's reply that only repeats the request or a step done is no
step (``new_steps``).

The invariant this module keeps: **its prompts share no tool, topic or phrasing with any task
the agent is scored on** (``tests/test_agent_tasks.py`` checks the vocabularies are disjoint),
so what the benchmark measures is how the mode generalises, not what it was shown. It owns the
prompts and the parsing of the steps and never calls the model or a tool (the agent loops,
sync and async, do both), so every loop shares it unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = [
    "FOLLOW_STEP",
    "NAME",
    "PLAN_TOKENS",
    "RETRY_STEP",
    "UNCHOSEN_STEP",
    "UNWORKED_STEP",
    "WORD_FIGURES",
    "answer_messages",
    "argument_leaves",
    "facts",
    "failed",
    "figures_from_nowhere",
    "grounded",
    "leaves",
    "new_steps",
    "own_words",
    "parse_steps",
    "plan_messages",
    "prompt_texts",
    "replan_messages",
    "same",
    "small_whole",
    "spelled",
    "step_message",
    "taken",
    "untaken_steps",
]

PLAN_TOKENS = 120  # a plan is a few brief lines; more is the model running on

PLAN_SYSTEM = (
    "Break the user's request into the separate steps it asks for, each on its own line, in order. "
    "Output only those steps, each as a brief instruction; do not carry them out. "
    "A request asking for a single thing is a single step. "
    "Add no step for reporting or summarizing what was found."
)
# The caller's own instructions reach the planner as context, not as steps.
PLAN_CONTEXT = "The assistant you plan for follows these instructions: {system}"

# Shown as earlier turns of the planning chat. Their topics (films, novels, paintings, trains,
# blogs, opening hours, translation, text puzzles) share nothing with the tasks the agent is
# scored on; they teach the form: one line per part (two questions about two things are two
# steps), a later step naming what an earlier one finds, a condition kept whole inside the step
# it decides, a step no lookup serves, an expression left for the step to work out, a single-step
# request. Written into a single message instead, a 0.5B model copied the examples as its plan.
EXAMPLES = [
    (
        "Who directed the film Vertigo, and in which year was the film Alien released?",
        ["Who directed the film Vertigo?", "In which year was the film Alien released?"],
    ),
    (
        "What are the runtimes of the films Heat and Alien?",
        ["What is the runtime of the film Heat?", "What is the runtime of the film Alien?"],
    ),
    (
        "How many chapters and how many pages does the novel Emma have?",
        ["How many chapters does the novel Emma have?", "How many pages does the novel Emma have?"],
    ),
    (
        "What is the rating of the hotel in Porto and of the hotel in Seville?",
        ["What is the rating of the hotel in Porto?", "What is the rating of the hotel in Seville?"],
    ),
    (
        "Work out 6 ^ 3 and 40 % 7, and show me what each comes to.",
        ["Work out 6 ^ 3.", "Work out 40 % 7."],
    ),
    (
        "Search for the author of the novel Dune, and list two other novels by that author.",
        ["Search for the author of the novel Dune.", "List two other novels by the author found in step 1."],
    ),
    (
        "Who painted the Mona Lisa? Then search for the birthplace of that painter.",
        ["Who painted the Mona Lisa?", "Search for the birthplace of the painter found in step 1."],
    ),
    (
        "Read the timetable of the train on platform 4. If it is late, book a taxi, else reserve a seat.",
        ["Read the timetable of the train on platform 4.", "If the train is late, book a taxi, else reserve a seat."],
    ),
    (
        "Suggest a title for my blog, and search the vet's opening hours on Saturday.",
        ["Suggest a title for my blog.", "Search the vet's opening hours on Saturday."],
    ),
    ("Translate 'sleep well' into Spanish.", ["Translate 'sleep well' into Spanish."]),
    (
        "Search the opening hours of the museum, of the zoo and of the aquarium.",
        [
            "Search the opening hours of the museum.",
            "Search the opening hours of the zoo.",
            "Search the opening hours of the aquarium.",
        ],
    ),
]

STEP = "Do only this step now: {step}"

# Once the steps run out, the plan is checked against what was found: a part the first plan
# folded into another (two lookups in one line), or a part an early result made necessary.
REPLAN_SYSTEM = (
    "Below are a request and what has been found for it so far. List the steps still needed to "
    "complete the request, each on its own line, or output: none."
)
REPLAN = "Request: {question}\nFound so far:\n{facts}"
# A name the request gives that no call took, when the check found nothing left to do: a small
# model read "Lima, Oslo and Tokyo" beside Lima's result and answered "none". The step points at
# the call that took a name nearest before it in the request (asked what the request "asks about
# Oslo", or to "do for Oslo what was done for Lima", the model called other tools).
UNTAKEN_STEP = "Call {tool} for {subject}, as for {like}."
# A lookup that failed on a name the request gave, and a later one that returned a name: the
# failed tool once more, for the found name ("the currency of the country whose capital is Cairo":
# currency_of(Cairo) failed, country_of(Cairo) returned Egypt, the check answered "none").
RETRY_STEP = "Call {tool} for {subject}."
# The second link of a chain whose first was added by the check: the tool that failed on the
# request's name, for the name the added step finds (the slot is narrowed to found names).
FOLLOW_STEP = "Call {tool} for what was found."
# Arithmetic the request asks for with nothing run on what was found ("the combined population of
# two cities" after both lookups); the step speaks of what was found, so its expression takes the
# figures results returned and those the request states (``chain.narrowed``).
UNWORKED_STEP = "Call {tool} with the figures found, to work out: {question}"


# A fixed choice two slots of a tool offer (a unit to convert from or to) that the request names
# and no call took ("in Fahrenheit" after a Celsius lookup); "what was found" points the step's
# number slots at the figures results returned. A choice of one slot gets RETRY_STEP.
def own_words(step: str) -> str:
    """A step's own words, less the request an ``UNWORKED_STEP`` quotes (its "then" is the
    request's chain, not the step's: the step is one calculation)."""
    quoting = UNWORKED_STEP.split("{question}")[0].split("{tool}")[-1]
    return step.split(quoting)[0]


UNCHOSEN_STEP = "Call {tool} so that what was found is in {choice}."
REPLAN_EXAMPLES = [
    (
        "Who directed the film Vertigo, and in which year was the film Alien released?",
        '1. director(film="Vertigo") returned: Alfred Hitchcock',
        ["In which year was the film Alien released?"],
    ),
    (
        "What is the rating of the hotel in Porto and of the hotel in Seville?",
        '1. rating(hotel="Porto") returned: 4.5',
        ["What is the rating of the hotel in Seville?"],
    ),
    (
        "What are the runtimes of the films Heat and Alien?",
        '1. runtime(film="Heat") returned: 170 minutes\n2. runtime(film="Alien") returned: 117 minutes',
        ["none"],
    ),
    (
        "Search for the author of the novel Dune, and list two other novels by that author.",
        '1. author(novel="Dune") returned: Frank Herbert',
        ["List two other novels by Frank Herbert."],
    ),
    ("Suggest a title for my blog.", "1. Suggest a title for my blog. -> Notes from the Garden", ["none"]),
]

ANSWER_SYSTEM = (
    "Reply to the user's request from the findings below, in plain text, stating every finding in full. "
    "Where a lookup failed, report that it found nothing."
)
ANSWER = "Request: {question}\nFindings:\n{facts}"

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|step\s*\d+\s*[:.)-])\s*", re.IGNORECASE)

Finding = tuple[dict[str, Any], str]  # a tool call and its output
Note = tuple[str, str]  # a step done in text, and that text


def plan_messages(
    question: str, system: str | None = None, history: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The planning chat: its instructions (and the caller's, as context), the worked examples,
    then the request, after the conversation that led to it when there is one."""
    head = PLAN_SYSTEM if not system else f"{PLAN_SYSTEM}\n{PLAN_CONTEXT.format(system=system)}"
    messages: list[dict[str, Any]] = [{"role": "system", "content": head}]
    for request, steps in EXAMPLES:
        messages += [{"role": "user", "content": request}, {"role": "assistant", "content": "\n".join(steps)}]
    return [*messages, {"role": "user", "content": _with_history(question, history)}]


def _with_history(question: str, history: Sequence[dict[str, Any]]) -> str:
    lines = [f"{m['role']}: {m['content']}" for m in history if isinstance(m.get("content"), str)]
    if not lines:
        return question
    return "Earlier conversation:\n" + "\n".join(lines) + f"\n\nRequest: {question}"


def replan_messages(question: str, results: list[Finding], notes: Sequence[Note] = ()) -> list[dict[str, Any]]:
    """The check once the steps ran out: what the request still needs, given what was found."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": REPLAN_SYSTEM}]
    for request, found, steps in REPLAN_EXAMPLES:
        ask = REPLAN.format(question=request, facts=found)
        messages += [{"role": "user", "content": ask}, {"role": "assistant", "content": "\n".join(steps)}]
    ask = REPLAN.format(question=question, facts=facts(results, notes) or "(nothing)")
    return [*messages, {"role": "user", "content": ask}]


# A capitalised word (or run of them: "Buenos Aires") that does not open a sentence, nor is a
# word that opens a clause (a step quoting the request: "..., to work out: If I buy 5 pears").
_OPENER = r"(?:If|When|Then|Also|And|But|Or|So|Please|What|Which|Who|How|Where|Why|Is|Are|Do|Does|Can|The|An?)"
NAME = re.compile(rf"(?<![.!?]\s)(?<!^)\b(?!{_OPENER}\b)[A-Z][a-z]+(?:\s[A-Z][a-z]+)*\b")


def untaken_steps(question: str, results: Sequence[Finding], limit: int, skip: Collection[str] = ()) -> list[str]:
    """A step for each name of the request that no call (run, failed or not) took as an argument,
    after one that a call did take, in order, at most ``limit``: what the plan missed when the
    check says nothing is left. ``skip``: words that are no subject (a tool's fixed choices,
    lowercased: "Fahrenheit" is a unit, not a city to look up as Bergen was)."""
    took: dict[str, str] = {}  # an argument, lowercased -> the tool that took it
    for call, _ in results:
        took.update({str(v).strip().lower(): call["function"]["name"] for v in argument_leaves(call)})
    steps, like = [], None
    for name in dict.fromkeys(NAME.findall(question.strip())):
        if name.lower() in skip:
            continue
        if name.lower() in took:
            like = name
        elif like is not None:
            steps.append(UNTAKEN_STEP.format(tool=took[like.lower()], subject=name, like=like))
    return steps[:limit]


# Where one line of a plan holds two steps: a sentence ending before the next begins ("How many
# are in stock? Multiply that by the price."), a "then" joining two instructions, an "and"
# before an instruction that works on what the one before found ("Get X and convert it"), or an
# "and" before a second question ("What is X, and which Y is it?": a 0.5B model planned such a
# request as one step and answered its first question only).
_SENTENCES = re.compile(r"(?<=[.?!])\s+(?=[A-Z])")
_JOINED = re.compile(
    r"\s*(?:,\s*|;\s*)?\b(?:and\s+)?then\b,?\s+"
    r"|\s*,?\s+and\s+(?=[a-z]+\s+(?:it|that|them|this|those|these)\b)"
    r"|\s*,\s+and\s+(?=(?:what|which|who|whom|whose|where|when|how)\s)",
    re.IGNORECASE,
)
# A condition keeps its consequence in the same step ("If it is late, then book a taxi").
_CONDITION = re.compile(r"^\s*(?:if|when|unless|whether|once|should|in case|provided)\b", re.IGNORECASE)


def _parts(line: str) -> list[str]:
    """The steps one plan line holds: its sentences, each split where it joins two instructions
    (a small model wrote "How many are in stock? Multiply that by the price." as one step and
    then did only the first)."""
    out = []
    for sentence in _SENTENCES.split(line):
        pieces = [sentence] if _CONDITION.match(sentence) else _JOINED.split(sentence)
        pieces = [p.strip(" ,;") for p in pieces if p.strip(" ,;.")]
        if len(pieces) > 1:
            pieces = [p[0].upper() + p[1:] + ("" if p[-1] in ".?!" else _end(p)) for p in pieces]
        out += pieces
    return out


_ASKS = re.compile(r"^\W*(?:\w+:\s*)?(?:what|which|who|whom|whose|where|when|how|is|are|do|does|can)\b", re.IGNORECASE)


def _end(piece: str) -> str:
    """The stop a piece split off a line takes: a question's, or a sentence's."""
    return "?" if _ASKS.match(piece) else "."


def parse_steps(text: str | None, limit: int) -> list[str]:
    """The plan's steps: one per non-empty line, list markers stripped, a line that holds several
    steps split into them (``_parts``), at most ``limit``."""
    lines = [_BULLET.sub("", line).strip() for line in (text or "").splitlines()]
    steps = [part for line in lines if line for part in _parts(line)]
    # A line written again is the model running on ("Convert 8 kg to pounds." six times), not
    # a step to do twice.
    return list(dict.fromkeys(s for s in steps if s and s.strip(".").lower() != "none"))[:limit]


def _said(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


# A line that states a figure ("Cusco's population would be 428450."): a finding, not a step.
_STATES = re.compile(r"\b(?:is|are|was|were|be|equals)\s+(?:about\s+|roughly\s+)?-?\d", re.IGNORECASE)


def new_steps(steps: Sequence[str], asked: Sequence[str], found: Sequence[Finding] = ()) -> list[str]:
    """The check's steps less those that only repeat the request or a step already taken (as
    written, or with its finding after "->"): the model wrote the request back as "what is still
    needed", was given it as a step, and did its first part again. A line that states what a
    result returned, of names the calls took, is a finding written back, not a step ("Cusco's
    population would be 428450." for "What would it be if it doubled?": given as a step, the
    lookup ran again). One that gives the figure to a name no call took is a claim to check
    ("The population of Gotham is 10004000.", Lima's figure): its step looks Gotham up."""
    seen = {_said(a) for a in asked}
    figures = {n for _, out in found if not failed(out) for n in _numbers(out)}
    took = {a for args in taken(found).values() for a in args}

    def finding(line: str) -> bool:
        if not _STATES.search(line) or not any(same(n, f) for n in _numbers(line) for f in figures):
            return False
        return all(name.lower() in took for name in NAME.findall(line))

    return [s for s in steps if _said(s.split("->")[0]) not in seen and not finding(s)]


def step_message(step: str) -> dict[str, Any]:
    """The user turn that starts a step (what earlier steps found is in the transcript above it)."""
    return {"role": "user", "content": STEP.format(step=step)}


def _arguments(call: dict[str, Any]) -> str:
    raw = call["function"]["arguments"]
    try:
        args = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return str(raw)
    if not isinstance(args, dict):
        return json.dumps(args, ensure_ascii=False)
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())


def _outcome(output: str) -> str:
    # A failed call reads as a failure, so the answer says so instead of inventing a value.
    return f"failed ({output[6:].strip()})" if failed(output) else f"returned: {output}"


def facts(results: list[Finding], notes: Sequence[Note] = ()) -> str:
    """Each tool call and what it returned, then each step done in text, one numbered line each."""
    lines = [f"{call['function']['name']}({_arguments(call)}) {_outcome(output)}" for call, output in results]
    lines += [f"{step} -> {text}" for step, text in notes]
    return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))


def answer_messages(
    question: str,
    results: list[Finding],
    notes: Sequence[Note] = (),
    system: str | None = None,
    history: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The short context the answer is written from, no tools: the caller's instructions first,
    the conversation before the request (its text turns), then the request and the findings."""
    head = ANSWER_SYSTEM if not system else f"{system}\n\n{ANSWER_SYSTEM}"
    earlier = [
        {"role": m["role"], "content": m["content"]}
        for m in history
        if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str) and m["content"]
    ]
    ask = ANSWER.format(question=question, facts=facts(results, notes) or "(none)")
    return [{"role": "system", "content": head}, *earlier, {"role": "user", "content": ask}]


_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")


def _numbers(text: str) -> set[float]:
    out = set()
    for m in _NUMBER.findall(text):
        try:
            out.add(float(m.replace(",", "")))
        except ValueError:
            continue
    return out


def leaves(value: Any) -> list[Any]:
    """The scalars of a JSON value (a call's arguments, a tool's result), in order."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def argument_leaves(call: Mapping[str, Any]) -> list[Any]:
    """The scalars of a call's arguments, in order (none when they are not JSON)."""
    try:
        return leaves(json.loads(call["function"]["arguments"] or "{}"))
    except (json.JSONDecodeError, TypeError, KeyError):
        return []


def taken(results: Sequence[tuple[Mapping[str, Any], str]]) -> dict[str, set[str]]:
    """Each tool that was called -> the values (lowercased text) its calls took, failed or not."""
    out: dict[str, set[str]] = {}
    for call, _ in results:
        out.setdefault(call["function"]["name"], set()).update(str(v).strip().lower() for v in argument_leaves(call))
    return out


def same(a: float, b: float) -> bool:
    """Are two figures one (to a relative 1e-9: 399.0 and 399)?"""
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def failed(output: str) -> bool:
    """Is a call's output its error (``tools.tool_error`` and the agent's refusals start so)?"""
    return output.startswith("error:")


def grounded(call: dict[str, Any], known: str, words: bool = False) -> bool:
    """Does the call take at least one of its arguments from what the run knows (the request,
    the plan, what was found)? A small model made to act on a step no tool fits calls some
    tool with values from nowhere ("Name a fruit" became ``currency_of(country="Japan")``):
    such a call is not run. A number counts as known when the text holds it; a string with
    digits (an expression) when every number in it is known; other text when the text holds it,
    or, with ``words``, a word of it (three letters or more: a query in the model's words); an
    expression's small whole numbers count only when it has no other (``_telling``)."""
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except (json.JSONDecodeError, TypeError):
        return True  # its error goes back to the model as the call's result
    values = [v for v in leaves(args) if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    if not values:
        return True  # nothing it could have made up
    numbers, text = _numbers(known) | set(spelled(known)), known.lower()
    vocabulary = set(re.findall(r"\w{3,}", text)) if words else set()
    for v in values:
        if isinstance(v, str) and not _NUMBER.search(v):
            if (v.strip() and v.strip().lower() in text) or vocabulary & set(re.findall(r"\w{3,}", v.lower())):
                return True
        elif (found := _numbers(str(v))) and all(any(same(n, k) for k in numbers) for n in _telling(found)):
            return True
    return False


# Numbers a text states in words, which a call working on it writes as figures.
WORD_FIGURES = {
    "half": 2, "halve": 2, "halved": 2, "double": 2, "doubled": 2, "twice": 2, "triple": 3, "tripled": 3,
    "thrice": 3, "quadrupled": 4, "third": 3, "quarter": 4,
    "dozen": 12, "percent": 100, "hundred": 100, "hundreds": 100, "thousand": 1000, "thousands": 1000,
    "million": 1000000, "millions": 1000000, "one": 1, "two": 2, "three": 3,
    "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}  # fmt: skip


def spelled(text: str) -> list[float]:
    """The figures a text states in words, in order, once each ("in thousands": 1000; "a dozen": 12)."""
    return list(dict.fromkeys(float(WORD_FIGURES[w]) for w in re.findall(r"[a-z]+", text.lower()) if w in WORD_FIGURES))


def figures_from_nowhere(call: Mapping[str, Any], known: str) -> list[float]:
    """The figures of a call's arguments that the known text holds neither in digits nor in words,
    where it takes no larger figure the text holds (a small whole number beside one is a count:
    "75 / 2" for half of the 75 found, "(18 + 20) / 2" for an average): "(5 + 2) * 4" for "If I
    buy 5 pears and 2 melons, what do I pay?", the 4 a 0.5B model's guess at a price."""
    stated = {n for v in argument_leaves(call) if not isinstance(v, bool) for n in _numbers(str(v))}
    have = _numbers(known) | set(spelled(known))
    unknown = {n for n in stated if not any(same(n, k) for k in have)}
    if any(not small_whole(n) for n in stated - unknown):
        return []
    return sorted(unknown)


def small_whole(n: float) -> bool:
    """Is a figure a small whole number (0-10), which tells nothing of where an expression came
    from ("75 / 2" for half of the 75 found; the library reads counts and positions so elsewhere
    too, ``answers.invented_numbers``)?"""
    return n.is_integer() and 0 <= n <= 10


def _telling(found: set[float]) -> set[float]:
    """The figures of an argument that tell where it came from: all but the small whole ones,
    where a larger figure stands beside them."""
    return {n for n in found if not small_whole(n)} or found


def prompt_texts() -> list[str]:
    """Every text this module puts in front of the model (for the vocabulary check)."""
    examples = [text for request, steps in EXAMPLES for text in (request, *steps)]
    examples += [text for request, found, steps in REPLAN_EXAMPLES for text in (request, found, *steps)]
    return [
        PLAN_SYSTEM,
        PLAN_CONTEXT,
        STEP,
        REPLAN_SYSTEM,
        REPLAN,
        UNTAKEN_STEP,
        RETRY_STEP,
        FOLLOW_STEP,
        UNWORKED_STEP,
        UNCHOSEN_STEP,
        ANSWER_SYSTEM,
        ANSWER,
        *examples,
    ]
