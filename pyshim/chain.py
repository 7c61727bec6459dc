"""Chains by construction: what a call may write in a name slot once a lookup found one.

A small model asked for the second link of a chain ("the capital of the country Kyoto is in")
writes the name it read in the request instead of the one the first call returned:
``country_of(city="Kyoto")`` returns Japan, then it calls ``capital_of(country="Kyoto")``. Offering
the found value *beside* free text changes nothing under greedy decoding (every token the model
would pick stays allowed), so once a lookup has returned a name, a free string slot of the call is
narrowed to a choice: the names results returned, and the names of the request that no call has
taken yet (a later part of the request may still need one: "the country Lyon is in, and the
temperature in Oslo"). The model picks; it cannot write a name from nowhere.

The narrowing reaches only the call's grammar (the ``grammar_tools`` option, ABI 1.14): the prompt
still shows the tools as given. Narrowing the tools the model is *shown* was tried first and lost a
task on the development half: the schemas in the system message moved the model's choice of tool,
and a prompt that changes with the choices loses the cached prefix each turn.

What counts as a name is deliberately narrow, so figures, units and expressions stay free: a
result value with no digit that is not an echo of its own call's arguments ("Tokyo" in
``{"city": "Tokyo", "temperature_c": 16}``), and a capitalised word of the request that does not
open a sentence. A slot is narrowed only when it is a plain string (no enum, pattern or format of
its own); a tool with no such slot is offered unchanged.

Figures follow the same rule where a step speaks of what an earlier one found ("convert that many
km to miles", "if it is above 25 degrees"): its first call's free number slots are narrowed to the
figures results returned (``figures``), so "that many" after 19 * 21 returned 399.0 is 399.0, not
the 19 of the request a 0.5B model wrote. A step that does not point back keeps its numbers free
(the figures of the step itself are what it works on). Such a step's expression slot (a free
string the tool calls an expression or formula: the calculator's) gets a ``pattern`` instead: arithmetic
on the figures results returned and the ones the step states, in digits or words ("half": 2), so
"compute that number times 3" after 10 miles came to 16.0934 km is ``16.0934 * 3``, not ``10 * 3``.
Where the step (or else the request) names one operation in words (``asked_operation``: "how much
warmer", "average", "times", "half of"), the pattern lists only the expressions of that operation
with each figure at most once: a difference the larger first, a mean over the count of figures
found. Where the step states figures of its own, the expression must take at least one figure
found ("12 * 12" for "a dozen apples" after the price was found is not arithmetic on it), and a
figure a call already took is not offered again (``fresh_figures``: "26.2 miles to km, then divide
that by 4" divides the 42.1648 found, not the 26.2 a round trip back returned).
Its fixed choices (enum slots: units) are offered only the values the step and the tools
that found its figures name, where they name two or more (``units_named``: "convert it to
Fahrenheit" after a lookup "in degrees Celsius"). An expression slot never takes a name.

The same reading of results serves plan mode once its steps ran out (``retry_steps``): a lookup
that failed on the request's name, before one that returned a name of the kind its slot takes
(``gives``: what a tool returns, by its name and description), is the chain taken in the wrong
order, and gets one more step with the found name.

The question as asked (a one-step plan) has no found values to narrow to; there a call's proper
name in a name slot must be one the run saw (``names_from_nowhere``: the example of a tool's own
description, "Paris", is no lookup asked for).

The invariant: this module only ever narrows a tool's schema, never widens it, and does no I/O
(``agent_core`` asks it for the next turn's ``grammar_tools`` and the check's missed steps).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from itertools import permutations
from typing import Any

from .planner import NAME, RETRY_STEP, WORD_FIGURES, argument_leaves, failed, leaves, same, spelled, taken
from .repeats import (
    AFFORDED,
    COMPARED,
    HALVED,
    LOWERED_BY,
    RAISED_BY,
    RATE,
    SCALED,
    SPLIT,
    TIMES_AS,
    named_choices,
    slots,
    things,
)

__all__ = [
    "asked_operation",
    "choices",
    "count_of",
    "counted",
    "digits",
    "figures",
    "fresh_figures",
    "gives",
    "grammar_tools",
    "name_slots",
    "names_from_nowhere",
    "narrowed",
    "retry_steps",
    "stated",
    "units_named",
]

_DIGIT = re.compile(r"\d")
_FIGURE = re.compile(r"-?\d+(?:\.\d+)?")
_LONGEST = 40  # longer result text is a sentence or a record, not a name to pass on


def _arguments(call: Mapping[str, Any]) -> list[str]:
    return [str(v) for v in argument_leaves(call)]


def _names(output: str, own: Sequence[str]) -> list[str]:
    try:
        parsed = json.loads(output)
    except json.JSONDecodeError:
        parsed = output
    taken = {a.strip().lower() for a in own}
    out = []
    for leaf in leaves(parsed):
        text = leaf.strip() if isinstance(leaf, str) else ""
        if text and len(text) <= _LONGEST and not _DIGIT.search(text) and text.lower() not in taken:
            out.append(text)
    return out


def choices(question: str, results: Sequence[tuple[Mapping[str, Any], str]]) -> list[str]:
    """The names a planned step may pass on: every name a successful result returned, then the
    request's names no successful call took. Empty until some result returned a name."""
    found: list[str] = []
    used: set[str] = set()
    for call, output in results:
        if failed(output):
            continue
        own = _arguments(call)
        used |= {a.strip().lower() for a in own}
        found += [n for n in _names(output, own) if n not in found]
    if not found:
        return []
    asked = [n for n in NAME.findall(question.strip()) if n.lower() not in used]
    return found + [n for n in asked if n not in found]


def _free_string(prop: Any) -> bool:
    return (
        isinstance(prop, dict)
        and prop.get("type") == "string"
        and not ({"enum", "const", "pattern", "format", "anyOf", "oneOf"} & prop.keys())
    )


def name_slots(schema: Mapping[str, Any]) -> list[str]:
    """The slots of a tool that may take a name (free strings)."""
    return [k for k, p in slots(schema).items() if _free_string(p)]


# A value written as a proper name: capitalised words ("Paris", "New York", "Saint-Malo").
_PROPER = re.compile(r"[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*)*")


def names_from_nowhere(call: Mapping[str, Any], known: str, schemas: Sequence[Mapping[str, Any]]) -> list[str]:
    """The proper names a call writes in its name slots that share no word with what the run
    knows (the request, the conversation, what was found): a 0.5B model asked "Can you recommend
    a dish to make with bread?" called ``country_of(city="Paris")``, the example of the tool's
    own description. Text in the model's own words (a query: "opening hours museum") is not a
    proper name and is not judged here. A thing a slot offers as a fixed choice (an item) is a
    name too: asked about bananas and bread, the model called ``get_price(item="apple")``; a
    unit (a choice two slots of the tool offer) is not, the result's unit is the tool's own."""
    fn = call.get("function") or {}
    schema = next((s for s in schemas if (s.get("function") or {}).get("name") == fn.get("name")), None)
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except (json.JSONDecodeError, TypeError):
        return []
    if schema is None or not isinstance(args, dict):
        return []
    vocabulary = set(re.findall(r"\w{2,}", known.casefold()))
    out = []
    for slot in name_slots(schema):
        value = args.get(slot)
        words = set(re.findall(r"\w{2,}", str(value).casefold()))
        if isinstance(value, str) and _PROPER.fullmatch(value.strip()) and not words & vocabulary:
            out.append(value.strip())
    items = things([schema])
    for slot, prop in slots(schema).items():
        value = args.get(slot)
        if not (isinstance(value, str) and isinstance(prop, Mapping) and value in (prop.get("enum") or ())):
            continue
        if value.lower() in items and not named_choices(known, {value.lower(): value}):
            out.append(value)
    return out


def _free_number(prop: Any) -> bool:
    return (
        isinstance(prop, dict)
        and prop.get("type") in ("number", "integer")
        and not ({"enum", "const", "anyOf", "oneOf"} & prop.keys())
    )


def figures(results: Sequence[tuple[Mapping[str, Any], str]]) -> list[float]:
    """The numbers successful results returned, that are not echoes of their own call's arguments
    ("399.0" from ``calculator("19 * 21")``, 31 from ``{"city": "Cairo", "temperature_c": 31}``)."""
    out: list[float] = []
    for call, output in results:
        if failed(output):
            continue
        own = {str(a).strip() for a in _arguments(call)}
        try:
            parsed = json.loads(output)
        except json.JSONDecodeError:
            parsed = _FIGURE.findall(output)
        for leaf in leaves(parsed):
            if isinstance(leaf, bool) or str(leaf).strip() in own:
                continue
            try:
                value = float(leaf)
            except (TypeError, ValueError):
                continue
            if value not in out:
                out.append(value)
    return out


def passed_on(results: Sequence[tuple[Mapping[str, Any], str]]) -> list[float]:
    """The figures successful calls took as arguments (a value, or the numbers of an expression)."""
    out: list[float] = []
    for call, output in results:
        if not failed(output):
            out += [float(f) for a in _arguments(call) if not isinstance(a, bool) for f in _FIGURE.findall(a)]
    return out


def fresh_figures(results: Sequence[tuple[Mapping[str, Any], str]], step: str) -> tuple[list[float], list[float]]:
    """The figures a step pointing back may work on: those results returned, less any an earlier
    call took (a round trip), and those the step states, less any a call took ("Convert 26.2
    miles to km and then divide that by 4": 26.2 went into the conversion, so "that" is its
    42.1648; a 0.5B model converted 42.1648 back, got 26.2 as a result, and divided that)."""

    def among(value: float, values: Sequence[float]) -> bool:
        return any(same(value, u) for u in values)

    fresh: list[float] = []
    earlier: list[float] = []  # what the calls before this result took
    for result in results:
        fresh += [f for f in figures([result]) if not among(f, earlier) and f not in fresh]
        earlier += passed_on([result])
    return fresh, [f for f in stated(step) if not among(f, earlier)]


# A string slot that holds arithmetic: the calculator's "expression".
_EXPRESSION = re.compile(r"\b(?:expression|formula|equation|arithmetic)s?\b", re.IGNORECASE)


def digits(text: str) -> list[float]:
    """The figures a text writes in digits, in order."""
    return [float(f) for f in _FIGURE.findall(text)]


def stated(text: str) -> list[float]:
    """The figures a text states, in digits or in words ("half of that number": 2). "One" in
    words is what one thing is ("the price of one coffee"), no figure to work on: offered as
    one, the model divided the price by it."""
    return list(dict.fromkeys(digits(text) + [f for f in spelled(text) if f != 1]))


def _written(value: float) -> str:
    """A figure as a pattern of the ways it is written ("75" or "75.0"; "16.0934")."""
    if value.is_integer():
        return rf"{int(value)}(?:\.0)?"
    text = repr(value) if "e" not in repr(value) else f"{value:f}".rstrip("0")
    return re.escape(text)


# The operation a step asks for in words, where it asks for one ("how much warmer": a difference).
# "total" is not here: "the total cost of 4 coffees" is a product.
_OPERATIONS = {
    "-": re.compile(
        r"\b(?:difference|minus|subtract\w*)\b|\bhow (?:much|many) (?!times )(?:\w+ )?"
        r"(?:bigger|larger|smaller|more|fewer|less|higher|lower|warmer|colder|older|younger|longer|shorter|heavier"
        r"|lighter|cheaper|dearer)\b"
        rf"|{COMPARED}|{LOWERED_BY}",
        re.IGNORECASE,
    ),
    "+": re.compile(rf"\b(?:sum|combined|together|altogether|plus|add|adds|added|adding)\b|{RAISED_BY}", re.I),
    "*": re.compile(rf"\b(?:(?<!how many )times|multipl\w*|product)\b|{SCALED}", re.IGNORECASE),
    "/": re.compile(rf"\b(?:divid\w*|ratio|quotient)\b|{AFFORDED}|{TIMES_AS}", re.IGNORECASE),
    # A quotient of what was found by the request's figure: half of it, it in thousands, it over
    # 3 days, it at 5 a day ("5 / 30" for "how many days would 30 last at 5 a day" is the wrong way).
    "over": re.compile(
        rf"\b(?:half|halve)\b|\bin (?:hundreds|thousands|millions)\b|{HALVED}|{SPLIT}|{RATE}", re.IGNORECASE
    ),
    "mean": re.compile(r"\b(?:average|mean)\b", re.IGNORECASE),
}
# Words of arithmetic that use a figure more than once, or an operator the words above do not name.
_FREE_FORM = re.compile(r"\b(?:squared?|cubed?|itself|power|percent\w*|twice|double)\b", re.IGNORECASE)
_SPELLED_OUT = 5  # more terms than this and the expressions are not listed one by one
_ANY_OPERATOR = r"\*\*|//|[-+*/%^]"


def asked_operation(text: str) -> str | None:
    """The one operation the text asks for in words: "-" ("how much warmer", "difference"), "+",
    "*", "/" ("divided by"), "over" (a quotient of what was found: "half of"), or "mean"
    ("average"); None where it names none or several, or arithmetic that takes a figure twice
    ("square it")."""
    if _FREE_FORM.search(text):
        return None
    ops = list(dict.fromkeys("/" if op == "over" else op for op, rx in _OPERATIONS.items() if rx.search(text)))
    if ops == ["/"] and not _OPERATIONS["/"].search(text):
        return "over"
    return "mean" if "mean" in ops else ops[0] if len(ops) == 1 else None


def _term(value: float, signed: bool = False) -> str:
    """One figure of a spelled-out expression, a space either side or none: its own sign, or any
    (``signed`` off). At most one space: where the pattern allowed any number, the model wrote
    "((22 - 13)", found nothing it could close with, and wrote spaces to the token limit."""
    sign = ("-" if value < 0 else "") if signed else "-?"
    return rf" ?{sign}(?:{_written(abs(float(value)))}) ?"


def _spelled(terms: list[float], operation: str, found: list[float]) -> list[str]:
    """Each expression the operation allows, each figure at most once: a difference the larger
    first (a "how much bigger" is never negative), a mean the sum of found figures over their
    count, a sum, product or quotient of two or three distinct figures."""
    if operation == "-":
        return [f"{_term(a, True)}-{_term(b, True)}" for a, b in permutations(terms, 2) if a > b]
    if operation == "mean":
        sums = [(len(seq), r"\+".join(_term(v, True) for v in seq)) for k in (2, 3) for seq in permutations(found, k)]
        return [rf" ?\({added}\) ?/ ?{_written(float(k))} ?" for k, added in sums]
    if operation == "over":  # what was found first, where anything was
        return [f"{_term(a)}/{_term(b)}" for a, b in permutations(terms, 2) if a in found or not found]
    lengths = (2,) if operation == "/" else (2, 3)
    return [re.escape(operation).join(_term(v) for v in seq) for k in lengths for seq in permutations(terms, k)]


def _arithmetic(figures: Sequence[float], operation: str | None = None, found: Sequence[float] = ()) -> str:
    """A pattern for an expression over ``figures`` only (operators, brackets and spaces between),
    the way ``operation`` combines them where the step asks for one (``asked_operation``)."""
    terms = list(dict.fromkeys(figures))
    if operation and len(terms) <= _SPELLED_OUT and (alts := _spelled(terms, operation, list(dict.fromkeys(found)))):
        return r"^\(?(?:" + "|".join(alts) + r")\)?$"  # one pair of brackets round it, or none
    ops = {None: _ANY_OPERATOR, "mean": r"[+/]", "over": "/"}.get(operation, re.escape(operation or ""))
    term = _any_term(terms)
    if not found or not set(terms) - set(found):
        return rf"^{term}(?:(?:{ops}){term})*$"
    # At least one figure found, after at most one other: "(5 + 2) * 2" for "5 pears and 2
    # melons" after both prices were found works on nothing found, "12 * 12" for "a dozen apples"
    # neither; allowed any number first, the model wrote "12 * " to the token limit. The terms
    # after it are bounded too, by how many there are to take.
    after = rf"(?:(?:{ops}){term}){{0,{len(terms)}}}"
    return rf"^(?:{term}(?:{ops}))?{_any_term(found)}{after}$"


def _any_term(figures: Sequence[float]) -> str:
    """One of the figures as a term: its brackets and spaces either side, any sign."""
    return r" ?\(* ?-?(?:" + "|".join(dict.fromkeys(_written(abs(f)) for f in figures)) + r") ?\)* ?"


def _expression_slot(name: str, prop: Any, tool: Mapping[str, Any]) -> bool:
    text = f"{name} {prop.get('description', '')} {tool.get('description', '')}" if isinstance(prop, dict) else ""
    return _free_string(prop) and bool(_EXPRESSION.search(text.replace("_", " ")))


# A count of two or more of a thing ("one coffee" is what one costs: the lookup itself).
_COUNTS = r"(?!1\b)\d+(?:\.\d+)?|two|three|four|five|six|seven|eight|nine|ten|dozen"


def count_of(question: str, thing: str) -> float | None:
    """How many of the thing the request counts ("5 pears": 5; "a dozen apples": 12; "3 loaves of
    bread": 3, a measure of it), if any."""
    measure = r"(?:[a-z]+\s+of\s+)?"
    m = re.search(rf"\b({_COUNTS})\s+{measure}{re.escape(thing.strip())}(?:e?s)?\b", question, re.IGNORECASE)
    if m is None:
        return None
    word = m.group(1).lower()
    return float(word) if word[0].isdigit() else float(WORD_FIGURES[word])


def counted(question: str, results: Sequence[tuple[Mapping[str, Any], str]]) -> list[tuple[float, float]]:
    """Each count the request gives of a thing a lookup took, with the one figure that lookup
    returned ("If I buy 5 pears and 2 melons": (5, 0.55) and (2, 2.8) once both prices were found):
    what so many of it come to is their product."""
    out = []
    for call, output in results:
        things = [a for a in argument_leaves(call) if isinstance(a, str) and not _DIGIT.search(a)]
        found = figures([(call, output)])
        if len(things) != 1 or len(found) != 1:
            continue
        if (n := count_of(question, things[0])) is not None:
            out.append((n, found[0]))
    return list(dict.fromkeys(out))


def _products(pairs: Sequence[tuple[float, float]]) -> str:
    """A pattern for the sum of the products, in any order: "5 * 0.55 + 2 * 2.8"."""
    alts = []
    for seq in permutations(pairs):
        sums = [[f"{_term(a)}\\*{_term(b)}" for a, b in ((n, f), (f, n))] for n, f in seq]
        alts += [r"\+".join(rf" ?\(?(?:{'|'.join(p)})\)? ?" for p in sums)]
    return r"^(?:" + "|".join(alts) + r")$"


def narrowed(
    schemas: list[dict[str, Any]] | None,
    names: Sequence[str],
    numbers: Sequence[float] = (),
    terms: Sequence[float] = (),
    operation: str | None = None,
    products: Sequence[tuple[float, float]] = (),
) -> list[dict[str, Any]] | None:
    """The tools with each free string slot limited to ``names``, each free number slot to
    ``numbers`` (an integer slot to the whole ones), and each expression slot to arithmetic on
    ``terms`` only (combined by ``operation``, where one was asked; the sum of ``products``, where
    the request counted things whose figures were found), where there are any; unchanged otherwise."""
    if not schemas or not (names or numbers or terms):
        return schemas
    out = []
    for schema in schemas:
        fn, props = schema.get("function") or {}, slots(schema)
        # An expression slot never takes a name: "what is 45 * 12?" after a lookup found Egypt
        # came as calculator("Egypt").
        arithmetic = [k for k, p in props.items() if _expression_slot(k, p, fn)]
        choices: dict[str, Any] = {
            k: list(names) for k, p in props.items() if names and _free_string(p) and k not in arithmetic
        }
        pattern = _products(products) if products else _arithmetic(terms, operation, numbers) if terms else ""
        patterns = dict.fromkeys(arithmetic, pattern) if pattern else {}
        for k, p in props.items():
            if not _free_number(p):
                continue
            whole = p["type"] == "integer"
            if fit := [int(n) if whole else n for n in numbers if not whole or n == int(n)]:
                choices[k] = fit
        if not (choices or patterns):
            out.append(schema)
            continue
        schema = copy.deepcopy(schema)
        for k, values in choices.items():
            schema["function"]["parameters"]["properties"][k]["enum"] = values
        for k, pattern in patterns.items():
            schema["function"]["parameters"]["properties"][k]["pattern"] = pattern
        out.append(schema)
    return out


def units_named(schemas: list[dict[str, Any]] | None, text: str) -> list[dict[str, Any]] | None:
    """The tools with each fixed choice (a string enum) limited to the values ``text`` names, where
    it names two or more of them; unchanged otherwise. ``text`` is a step that works on a figure
    found and what the tools that found it say of it: "Convert it to Fahrenheit" after
    ``get_weather`` ("in degrees Celsius") offers celsius and fahrenheit, where a 0.5B model
    walked the enum from its first value and converted 22 km to Fahrenheit. One value named
    narrows nothing: the other end of a conversion is still the model's to pick."""
    if not schemas:
        return schemas
    out = []
    for schema in schemas:
        fit = {}
        for k, p in slots(schema).items():
            values = p.get("enum") if isinstance(p, dict) else None
            if values and all(isinstance(v, str) for v in values):
                said = set(named_choices(text, {v.lower(): v for v in values}))
                named = [v for v in values if v.lower() in said]
                if 2 <= len(named) < len(values):
                    fit[k] = _directed(k, named, text)
        if fit:
            schema = copy.deepcopy(schema)
            for k, values in fit.items():
                schema["function"]["parameters"]["properties"][k]["enum"] = values
        out.append(schema)
    return out


# Which end of a conversion a slot is, by its name ("from_unit", "to_unit").
_FROM_SLOT = re.compile(r"(?:^|_)(?:from|source|src)(?:_|$)", re.IGNORECASE)
_TO_SLOT = re.compile(r"(?:^|_)(?:to|target|dest|into)(?:_|$)", re.IGNORECASE)


def _directed(slot: str, named: list[str], text: str) -> list[str]:
    """The named units a slot may take: where the text states the figure's unit ("50 lb") and
    the one wanted ("to kg"), a slot named for one end takes that one alone (offered both
    pounds and kg for "Convert 50 lb to kg", a 0.5B model converted kg to pounds); else both."""
    ends = {v.lower(): v for v in named}

    def unit(pattern: str) -> str | None:
        said = [u for m in re.finditer(pattern, text, re.IGNORECASE) for u in named_choices(m.group(1), ends)]
        return ends[said[0]] if said else None

    source, target = unit(r"\d\s*([a-z]+)"), unit(r"\b(?:to|into|in)\s+([a-z]+)")
    if source is None or target is None or source == target:
        return named
    if _FROM_SLOT.search(slot):
        return [source]
    return [target] if _TO_SLOT.search(slot) else named


def grammar_tools(schemas: list[dict[str, Any]] | None, names: Sequence[str]) -> list[dict[str, Any]] | None:
    """The ``grammar_tools`` option for a turn offered ``schemas``: the narrowed tools, or None
    when nothing is narrowed (no names found yet, or no free string slot)."""
    out = narrowed(schemas, names)
    return out if out is not None and out != schemas else None


def _words(text: str) -> set[str]:
    """The words of a text, lowercased and singular ("units": unit), less the short ones."""
    return {w.removesuffix("s") for w in re.findall(r"[a-z]+", text.replace("_", " ").lower()) if len(w) > 3}


def gives(tool: str, schemas: Sequence[Mapping[str, Any]]) -> set[str]:
    """What a tool returns, as words: those of its name, and the last of its description before
    the first word that says what it takes ("Get the capital city of a country": capital, city;
    "Get the current temperature in a city": weather, temperature, not "current", which would
    read as "currency" cut short)."""
    fns = [s.get("function") or {} for s in schemas]
    described = next((str(fn.get("description") or "") for fn in fns if fn.get("name") == tool), "")
    head = re.split(r"\b(?:of|in|for|from|used|by|at|to|on|a|an)\b", described, maxsplit=1)[0].split()
    return _words(tool) - {"get", "list", "find", "fetch", "look"} | _words(head[-1] if head else "")


def _slots(call: Mapping[str, Any]) -> set[str]:
    """The words of the slots a call filled ("country" of ``capital_of(country=...)``)."""
    try:
        args = json.loads(call["function"].get("arguments") or "{}")
    except (json.JSONDecodeError, TypeError):
        return set()
    return _words(" ".join(args)) if isinstance(args, dict) else set()


def retry_steps(
    results: Sequence[tuple[Mapping[str, Any], str]], schemas: Sequence[Mapping[str, Any]] = ()
) -> list[str]:
    """Plan mode's steps for failed lookups a later result can feed: a tool that failed and never
    succeeded, once more with the first name a later successful call returned that no call of
    that tool took (the second link of a chain the model took in the wrong order; another tool
    given the name, ``country_of(city="Egypt")`` after it returned Egypt, does not count), where
    the later call returns what the failed call's slot takes: a country from ``country_of`` for
    ``currency_of(country=...)``, not the "Peruvian sol" ``currency_of`` returned for
    ``capital_of(country=...)``."""
    took = taken(results)
    succeeded = {call["function"]["name"] for call, out in results if not failed(out)}
    steps: list[str] = []
    for i, (call, out) in enumerate(results):
        tool = call["function"]["name"]
        if not failed(out) or tool in succeeded:
            continue
        slots = _slots(call)
        later = [
            n
            for c, o in results[i + 1 :]
            if not failed(o) and (not slots or slots & gives(c["function"]["name"], schemas))
            for n in _names(o, _arguments(c))
        ]
        fresh = [n for n in later if n.lower() not in took[tool]]
        if fresh and (step := RETRY_STEP.format(tool=tool, subject=fresh[0])) not in steps:
            steps.append(step)
    return steps
