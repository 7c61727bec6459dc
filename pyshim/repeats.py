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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import planner

__all__ = [
    "AFFORDED",
    "COMPARED",
    "HALVED",
    "LOOK_UP",
    "LOWERED_BY",
    "NUDGE",
    "RAISED_BY",
    "RATE",
    "SCALED",
    "SPLIT",
    "TIMES_AS",
    "answered",
    "asks_arithmetic",
    "call_key",
    "choice_owners",
    "does_arithmetic",
    "fed_back",
    "named_choices",
    "named_tools",
    "nudge",
    "nudge_text",
    "relevant_tools",
    "repeats_only",
    "slots",
    "things",
    "told_text",
]


def _same_value(value: Any) -> Any:
    """A JSON value with each whole float as its int: ``399.0`` and ``399`` are one argument."""
    if isinstance(value, dict):
        return {k: _same_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_same_value(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def call_key(call: Mapping[str, Any]) -> tuple[str, str]:
    """A call's identity: its name and its arguments, whatever their formatting (``399.0`` is
    ``399``: a model that got 399.0 back and calls again with 399 repeats the call)."""
    fn = call["function"]
    try:
        args = json.dumps(_same_value(json.loads(fn["arguments"])), sort_keys=True)
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


def nudge_text(
    question: str | None,
    results: list[tuple[dict[str, Any], str]],
    unused: Sequence[str] = (),
    named: Sequence[str] | None = None,
) -> str:
    """The request for the answer after a stuck turn: the question and every result, so that a
    small model that lost the thread of a long transcript can still state them all. With tools
    off it says so; with ``unused`` (the tools still offered) it says a call may still be due,
    naming only ``named`` (all of ``unused`` when None): the tools the question gives a reason to
    call. (Naming a tool made a 0.5B model call it, whether or not the question needed it.)"""
    named = list(unused) if named is None else [t for t in named if t in unused]
    may_call = f"needs {' or '.join(named)}, call it now" if named else "needs another tool, call it now"
    if not results:
        if not question:
            return NUDGE
        if unused:
            return f"My question was: {question}\nIf it {may_call}. Otherwise answer it."
        return f"My question was: {question}\nAnswer it in plain text, in your own words."
    asked = f"My question was: {question}\n" if question else ""
    ending = "Now answer my question in plain text, stating every result. Do not call any more tools."
    if unused:
        ending = f"If my question still {may_call}. Otherwise answer my question in plain text, stating every result."
    return f"{asked}The tools returned:\n{planner.facts(results)}\n{ending}"


def nudge(messages: list[Mapping[str, Any]]) -> dict[str, str]:
    """``nudge_text`` as the user message that follows ``messages``."""
    return {"role": "user", "content": nudge_text(_question(messages), answered(messages))}


# An answer that states figures no lookup gave, with no lookup made: the next turn must call a tool.
LOOK_UP = "Do not answer from memory. Call a tool to look up what my question needs."


def told_text(question: str, failed: Sequence[Any]) -> str:
    """The turn before the answer when lookups failed: which failed and why, said plainly, so
    the answer reports them instead of filling the gap (``failed``: ``agent_core.ToolFailure``)."""
    lines = "\n".join(f"- {f.name}({f.arguments}) failed: {f.error}. It returned nothing." for f in failed)
    return (
        f"These lookups failed, so their results are unknown:\n{lines}\n"
        f"Answer my question again: {question}\nState the results the tools did return, and for each failed "
        "lookup say that it could not be found. Do not guess or make up a value for it."
    )


# Words that say nothing about what a tool is for.
_STOP = frozenset(
    [
        "what",
        "which",
        "when",
        "where",
        "with",
        "from",
        "that",
        "this",
        "then",
        "than",
        "them",
        "they",
        "their",
        "there",
        "these",
        "those",
        "tell",
        "give",
        "show",
        "have",
        "does",
        "each",
        "much",
        "many",
        "also",
        "into",
        "about",
        "please",
        "could",
        "would",
        "should",
        "your",
        "mine",
        "just",
        "only",
        "some",
        "same",
        "using",
        "used",
        "returns",
        "return",
        "value",
        "values",
        "result",
        "results",
        "number",
        "numbers",
        "given",
        "call",
        "tool",
        "tools",
    ]
)


def _stems(text: str) -> set[str]:
    """The words of a text that carry its topic, cut to five letters ("divided" and "divide")."""
    words = re.findall(r"[a-z]+", text.replace("_", " ").lower())
    return {w[:5] for w in words if len(w) >= 4 and w not in _STOP}


# Arithmetic asked for in words or symbols, and a tool that does arithmetic: "compute that number
# divided by 2" shares no word with "Evaluate an arithmetic expression".
# Ways a request asks for arithmetic in everyday words, one pattern each, shared with
# ``chain.asked_operation`` (which reads the operation from them): a comparison asked as a
# quantity ("By how many degrees is Alexandria hotter than Oslo?"), a change by a figure
# ("increase the result by 10"), a scaling ("if it doubled"), a budget ("How many apples could
# I buy for the price of one coffee?") and a share ("split between 4", "how many times bigger").
COMPARED = (
    r"\bhow (?:much|many)\b(?! times)[^.?!]*?"
    r"\b(?:(?:more|less)\s+\w+|(?!(?:other|rather|whether|either)\b)\w+er|more|less|fewer)\s+than\b"
)
RAISED_BY = r"\b(?:increas|rais|grow|grew|extend)\w*\b[^.?!]{0,40}?\bby\s+-?\d"
LOWERED_BY = r"\b(?:decreas|reduc|lower|cut|shrink|shrank)\w*\b[^.?!]{0,40}?\bby\s+-?\d"
SCALED = r"\b(?:doubled|doubles|doubling|tripled|triples|tripling|quadrupled|quadruples)\b"
HALVED = r"\b(?:halved|halves|halving)\b"
# A ratio of two figures found: "how many times bigger is Tokyo than Kyoto".
TIMES_AS = r"\bhow many times (?:\w+er|more|less|as)\b"
SPLIT = (
    r"\b(?:split|share|shared|sharing)\b[^.?!]{0,40}?\b(?:between|among)\s+(?:\d|two|three|four|five|six)"
    r"|\b(?:spread|spreading)\b[^.?!]{0,20}?\bover\s+(?:\d|two|three|four|five|six)"
)
# A rate asked for ("how many km per day") or a count of the rate's unit ("how many days would it
# last if we sell 5 a day"): what was found over the rate's figure.
RATE = r"\bhow (?:many|much) \w+(?: \w+)? per\b|\bhow many (?P<per>\w+?)s\b[^.?!]*\b(?:a|per|each) (?P=per)\b"
AFFORDED = r"\bhow many\b[^.?!]*\b(?:can|could)\s+(?:i|we|you)\s+(?:buy|afford|get|purchase)\b"
_ARITHMETIC_ASKED = re.compile(
    r"\b(?:comput\w*|calculat\w*|divid\w*|multipl\w*|add|adds|added|adding|subtract\w*|sum|times|plus|minus"
    r"|product|half|double|twice|percent\w*|combined|total|difference|average|ratio)\b"
    r"|\bin (?:hundreds|thousands|millions|billions)\b"
    r"|\bhow (?:much|many) (?:\w+ )?(?:bigger|larger|smaller|more|fewer|less|higher|lower|warmer|colder)\b"
    rf"|{COMPARED}|{RAISED_BY}|{LOWERED_BY}|{SCALED}|{HALVED}|{AFFORDED}|{SPLIT}|{RATE}|{TIMES_AS}"
    r"|\d\s*(?:[-+*/^%]|\*\*)\s*\d",
    re.IGNORECASE,
)
_ARITHMETIC_TOOL = re.compile(r"\b(?:calculat\w*|arithmetic\w*|math\w*|expression\w*)\b", re.IGNORECASE)


def asks_arithmetic(text: str) -> bool:
    """Does the text ask for arithmetic, in words or symbols ("combined", "how much bigger", "2 * 3")?"""
    return bool(_ARITHMETIC_ASKED.search(text))


def does_arithmetic(schema: Mapping[str, Any]) -> bool:
    """Does the tool do arithmetic (its name or description says so: "calculator")?"""
    fn = schema.get("function") or {}
    return bool(_ARITHMETIC_TOOL.search(f"{fn.get('name', '')} {fn.get('description', '')}".replace("_", " ")))


def slots(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool schema's parameters by name (its JSON schema's ``properties``; empty if none)."""
    return ((schema.get("function") or {}).get("parameters") or {}).get("properties") or {}


def choice_owners(schemas: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Each fixed choice a tool offers (an enum slot's string value, lowercased) -> the tool of
    each slot that offers it, once per slot (a unit both ``from_unit`` and ``to_unit`` offer is
    listed twice)."""
    owners: dict[str, list[str]] = {}
    for schema in schemas:
        fn = schema.get("function") or {}
        for prop in slots(schema).values():
            values = prop.get("enum") or () if isinstance(prop, Mapping) else ()
            for value in values:
                if isinstance(value, str) and value:
                    owners.setdefault(value.lower(), []).append(str(fn.get("name")))
    return owners


# Units as people write them, for the name a tool's choices give them ("50 lb": pounds). Not
# "pound" alone: it is a currency too ("Egyptian pound").
_UNITS_WRITTEN = {
    "pounds": ("lb", "lbs"),
    "kg": ("kgs", "kilo", "kilos", "kilogram", "kilograms"),
    "km": ("kilometer", "kilometers", "kilometre", "kilometres"),
    "miles": ("mi", "mile"),
    "feet": ("ft", "foot"),
    "meters": ("meter", "metre", "metres"),
    "liters": ("liter", "litre", "litres"),
    "gallons": ("gal", "gallon"),
}
_UNIT_OF = {written: unit for unit, ways in _UNITS_WRITTEN.items() for written in ways}


def things(schemas: Sequence[Mapping[str, Any]]) -> set[str]:
    """The fixed choices that name things (an item to look up), not units: a unit is a choice
    two slots of one tool offer ("kg" to convert from or to)."""
    return {c for c, tools in choice_owners(schemas).items() if len(set(tools)) == len(tools)}


def named_choices(text: str, owners: Mapping[str, Any]) -> list[str]:
    """The fixed choices the text names, in order: a word that is one (any case), or its plural
    ("apples" for "apple"), or a unit as people write it ("lb" for "pounds", "kilometres" for
    "km")."""
    out = []
    for word in re.findall(r"\w+", text.lower()):
        forms = (word, word[:-1] if word.endswith("s") else "", word[:-2] if word.endswith("es") else "")
        out += [form for form in (*forms, _UNIT_OF.get(word, "")) if form and form in owners][:1]
    return list(dict.fromkeys(out))


def named_tools(question: str, schemas: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tools a word of whose *name* the question uses ("the capital of Peru": ``capital_of``),
    a narrower reason than ``relevant_tools``' (a word of the description will do there: "Which
    country is Springfield in?" shares "country" with capital_of's "capital city of a country")."""
    asked = _stems(question)
    names = [str((s.get("function") or {}).get("name", "")) for s in schemas]
    return [name for name in names if _stems(name) & asked]


# Everyday words for what tool descriptions name in their own words: "What does a dozen apples
# cost?" shares no word with "Get the unit price of a shop item", nor "How warm is it there?"
# with "Get the current temperature in a city". General English, not any task's wording: each
# adds the description's word to the question's words, never takes one away.
_SAID_AS = {
    "price": r"cost|costs|costing|pay|paid|expensive|cheap|cheaper|dearer",
    "temperature": r"warm|warmer|hot|hotter|cold|colder|chilly",
    "currency": r"money|cash",
    "population": r"people|inhabitants|residents|populous",
}
_SAID_AS_RX = {word: re.compile(rf"\b(?:{alts})\b", re.IGNORECASE) for word, alts in _SAID_AS.items()}


def _asked(question: str) -> set[str]:
    """The question's topic words (``_stems``), and the description words its everyday words stand for."""
    return _stems(" ".join([question, *(w for w, rx in _SAID_AS_RX.items() if rx.search(question))]))


def relevant_tools(question: str, schemas: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tools the question gives a reason to call: a word of the tool's name or description
    shares its stem with a word of the question (first five letters; "divided" and "divide"; an
    everyday word stands for a description's: "cost" for "price", ``_SAID_AS``),
    the question names a fixed choice only that tool offers ("in Fahrenheit": a unit), or the
    question asks for arithmetic and the tool does arithmetic. A nudge names and offers only
    these, never a tool the run has no use for."""
    asked, arithmetic = _asked(question), asks_arithmetic(question)
    owners = choice_owners(schemas)
    chosen = {tools[0] for c in named_choices(question, owners) if len(set(tools := owners[c])) == 1}
    out = []
    for schema in schemas:
        fn = schema.get("function") or {}
        described = _stems(f"{fn.get('name', '')} {fn.get('description', '')}")
        if described & asked or str(fn.get("name")) in chosen or (arithmetic and does_arithmetic(schema)):
            out.append(str(fn.get("name")))
    return out


def _args(call: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except (json.JSONDecodeError, TypeError):
        return None
    return args if isinstance(args, dict) else None


def _fed(call: Mapping[str, Any], before: Mapping[str, Any], output: str) -> bool:
    """Is ``call`` the call ``before`` again, with one argument replaced by that call's output?"""
    now, then = _args(call), _args(before)
    if (
        now is None
        or then is None
        or call["function"]["name"] != before["function"]["name"]
        or now.keys() != then.keys()
    ):
        return False
    changed = [k for k in now if now[k] != then[k]]
    lead = _LEADING_FIGURE.match(output)  # "87.8 fahrenheit": the figure it starts with
    if lead is None:
        return len(changed) == 1 and str(now[changed[0]]).strip() == output.strip()
    value = float(lead.group(1))
    if len(changed) != 1:
        return False
    new, old = now[changed[0]], then[changed[0]]
    if isinstance(new, str) and isinstance(old, str):  # an expression that now holds the output
        return _holds(new, value) and not _holds(old, value)
    return isinstance(new, (int, float)) and _close(new, value)


_LEADING_FIGURE = re.compile(r"\s*(-?\d+(?:\.\d+)?)(?:\s+[A-Za-z]+)?\s*$")


def _close(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9 * max(1.0, abs(b))


def _holds(text: str, value: float) -> bool:
    return any(_close(float(n), value) for n in re.findall(r"\d+(?:\.\d+)?", text))


def fed_back(call: Mapping[str, Any], results: Sequence[tuple[Mapping[str, Any], str]]) -> bool:
    """Does the call feed the output of the last call of its tool back into it (``calculator("5002000.0
    / 2")`` after ``calculator("10004000 / 2")`` returned 5002000.0)?"""
    same = [(c, out) for c, out in results if c["function"]["name"] == call["function"]["name"]]
    return bool(same) and _fed(call, *same[-1])


def runaway(call: Mapping[str, Any], results: Sequence[tuple[Mapping[str, Any], str]]) -> bool:
    """Does the call feed a tool's output back into it for the second time running? A small model
    that got ``multiply(12, 7) = 84`` calls ``multiply(84, 7)``, then ``multiply(588, 7)``, to
    its step limit. Once is a chain a request may ask for ("square 2, then square the result");
    twice in a row is taken as a stuck turn."""
    same = [(c, out) for c, out in results if c["function"]["name"] == call["function"]["name"]]
    if len(same) < 2:
        return False
    (before, out1), (last, out2) = same[-2], same[-1]
    return _fed(call, last, out2) and _fed(last, before, out1)
