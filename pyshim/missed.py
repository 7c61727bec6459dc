"""What plan mode's check adds to what the model says is left, where something plainly is.

Once a plan's steps ran out, the model is asked what the request still needs (``planner``'s
replan turn). A 0.5B model answers "none" after the lookups of a chain whose last link is not
done: "the combined population of Lyon and Bergen" with both populations found and no sum, "the
temperature in Bergen in Fahrenheit" with the Celsius figure found and no conversion. Each rule
here reads the request, the tools' schemas and what ran, and turns one such miss into a step:

- ``chain.retry_steps``: a lookup that failed on the request's name, before one that returned a
  name (the chain taken in the wrong order);
- ``unlinked_steps``: a lookup that failed on the request's name with nothing found after it,
  and a tool the request names that never ran: that tool first, then the failed one for what
  it finds (the chain's first link skipped: "the population of the capital of Peru");
- ``planner.untaken_steps``: a name of the request no call took, after one a call did take;
- ``asked_of_steps``: a name the request asks a tool's own thing of ("the temperature in Kyoto":
  get_weather gives "the current temperature") that no call of that tool took;
- ``unchosen_steps``: a word of the request that is one of a tool's fixed choices (an ``enum``
  value: "Fahrenheit" of a unit slot, "apples" of an item slot) that no call of that tool took,
  unless the request pairs the choice with another tool in so many words ("the stock of apples,
  the price of coffee" asks no price of apples);
- ``unworked_steps``: arithmetic the request asks for ("combined", "times", "half", "in
  thousands", a count of things: "a dozen apples", or a figure it gives that no call took: "if
  we sell 5 loaves a day"), a tool that does arithmetic, figures found or a step above to find
  them, and no arithmetic run on what the run knew ("(5 + 2) * 4" before any price was found is
  a guess, not the sum asked).

The rules' steps follow the model's own (``joined``: those its steps leave out), and the agent
asks the rules again once the steps run out (``agent_core``'s ``_check_rules``): a 0.5B model's
check often names one part and leaves another ("By how much?" and no lookup of Lyon).

The invariant: a rule adds a step only from what the request says and what ran, never from a
task's wording, and its step texts share no word with any task the agent is scored on
(they live in ``planner`` with its other prompts, for the vocabulary check). A request with a
condition (not the asker's own supposing: "If I buy 5 pears" is none) gets no choice or
arithmetic step: it may rightly leave one unused. No I/O:
``agent_core`` asks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from . import chain, planner
from .conditions import branches
from .repeats import (
    asks_arithmetic,
    choice_owners,
    does_arithmetic,
    named_choices,
    named_tools,
    relevant_tools,
    things,
)

__all__ = [
    "asked_of_steps",
    "joined",
    "missed_steps",
    "unchosen_steps",
    "unlinked_steps",
    "unused_figures",
    "unworked_steps",
]

Finding = planner.Finding  # a tool call and its output


def missed_steps(
    question: str, results: Sequence[Finding], schemas: Sequence[Mapping[str, Any]], limit: int
) -> list[str]:
    """Every rule's steps, in the order a chain needs them (its links first, arithmetic last)."""
    choices = set(choice_owners(schemas))
    retried = chain.retry_steps(results, schemas)
    steps = retried + ([] if retried else unlinked_steps(question, results, schemas))
    steps += planner.untaken_steps(question, results, limit, choices) + asked_of_steps(question, results, schemas)
    steps += unchosen_steps(question, results, schemas)
    steps += unworked_steps(question, results, schemas, looking_up=bool(steps))
    return list(dict.fromkeys(steps))[:limit]


def joined(steps: Sequence[str], rules: Sequence[str], limit: int) -> list[str]:
    """The check's own steps, then each rule's step they leave out: the model's "By how much?"
    for "Is Paris or Lyon warmer, and by how much?" after only Paris's lookup does not look up
    Lyon, so the rule's lookup for Lyon follows it. A rule's step is left out where a step of
    the model's names its subject (the first name after "for") or, for arithmetic, asks for it;
    a chain's second link (``FOLLOW_STEP``) goes with its first."""
    out, kept = list(steps), False
    for rule in rules:
        if rule == planner.FOLLOW_STEP.format(tool=rule.split()[1]):
            if kept:
                out.append(rule)
            continue
        kept = not any(_covers(step, rule) for step in steps)
        if kept:
            out.append(rule)
    return list(dict.fromkeys(out))[:limit]


def _covers(step: str, rule: str) -> bool:
    """Does the model's step do what the rule's step asks (its subject, or arithmetic)?"""
    if " to work out: " in rule:
        return asks_arithmetic(step)
    subject = re.search(r"\bfor (.+?)(?:, as for |\.$)", rule)
    return subject is not None and subject.group(1).lower() in step.lower()


def unlinked_steps(question: str, results: Sequence[Finding], schemas: Sequence[Mapping[str, Any]]) -> list[str]:
    """Two steps for a lookup that failed on a name of the request and never succeeded, where
    the request names a tool (a word of its name) that never ran: that tool for the name, then
    the failed one for what it finds ("the population of the capital of Peru": get_population(Peru)
    failed, and "capital" names capital_of; its result is then the name the next call may take)."""
    ran = {call["function"]["name"] for call, _ in results}
    succeeded = {call["function"]["name"] for call, out in results if not planner.failed(out)}
    names = {n.lower(): n for n in planner.NAME.findall(question.strip())}
    takes_names = {str((s.get("function") or {}).get("name")) for s in schemas if chain.name_slots(s)}
    # Named by the request, not merely described: "Which country is Springfield in?" points to
    # capital_of only by its description ("capital city of a country"), and that link is not asked.
    unused = [t for t in named_tools(question, schemas) if t not in ran and t in takes_names]
    for call, out in results:
        tool = call["function"]["name"]
        if not planner.failed(out) or tool in succeeded or not unused:
            continue
        for arg in planner.argument_leaves(call):
            if (name := names.get(str(arg).strip().lower())) is not None:
                return [
                    planner.RETRY_STEP.format(tool=unused[0], subject=name),
                    planner.FOLLOW_STEP.format(tool=tool),
                ]
    return []


# Capitalised words whose "'s" is "is" ("What's the population"), not a name's own.
_NOT_OWNERS = r"(?:It|That|What|Who|Where|How|When|Here|There|Let|He|She)"


def asked_of_steps(question: str, results: Sequence[Finding], schemas: Sequence[Mapping[str, Any]]) -> list[str]:
    """A step for each name the request asks a tool's own thing *of* (one of the tool's words,
    then "of", "in", "for" or "at" and the name, or the name's own: "Japan's capital") that no
    call of that tool took, for tools that
    take a name: "the population of Cusco and the temperature in Kyoto" with only
    get_population(Kyoto) run is get_population for Cusco and get_weather for Kyoto. "The country
    whose capital is Cairo" asks for no capital of anything. None for a request with a condition
    (a branch may rightly stay undone)."""
    if branches(question):
        return []
    took = planner.taken(results)
    steps = []  # (where the request asks it, the step): in the request's order
    for schema in schemas:
        tool = str((schema.get("function") or {}).get("name"))
        if not chain.name_slots(schema) or does_arithmetic(schema):
            continue
        said = _said(tool, schemas)
        # Not "the population of Peru's capital": that asks the capital's.
        of = rf"\b(?i:(?:{said})s?\s+(?:of|in|for|at)\s+(?:the\s+)?)({planner.NAME.pattern})(?!['’]s\b)"
        # Or the name's own, in so many words, at the request's start too: "Japan's capital city".
        owns = rf"\b(?!{_NOT_OWNERS}['’])([A-Z][a-z]+(?:\s[A-Z][a-z]+)*)['’]s\s+(?i:(?:{said})s?)\b"
        for m in [*re.finditer(of, question), *re.finditer(owns, question)]:
            if m.group(1).lower() not in took.get(tool, set()):
                steps.append((m.start(), planner.RETRY_STEP.format(tool=tool, subject=m.group(1))))
    return [step for _, step in sorted(steps)]


def unworked_steps(
    question: str, results: Sequence[Finding], schemas: Sequence[Mapping[str, Any]], looking_up: bool = False
) -> list[str]:
    """One step for arithmetic the request asks for and nothing did: a tool that does arithmetic
    exists, some result returned a figure, and no such tool ran successfully ("How much bigger is
    the population of Tokyo than that of Paris?" after both lookups). Arithmetic that ran, even
    before a later lookup, counts as done ("Compute 19 * 21, then convert that many km")."""
    tools = [str((s.get("function") or {}).get("name")) for s in schemas if does_arithmetic(s)]
    asked = asks_arithmetic(question) or _counted(question, schemas) or bool(unused_figures(question, results, schemas))
    if not tools or not asked or branches(question):
        return []
    if not chain.figures(results) and not looking_up:  # nothing found, and no step to find it
        return []
    for i, (call, out) in enumerate(results):
        # Arithmetic on figures from nowhere ("(5 + 2) * 4" before any price was found) is not it.
        known = "\n".join([question, *(o for _, o in results[:i])])
        arithmetic = call["function"]["name"] in tools and not planner.failed(out)
        if arithmetic and not planner.figures_from_nowhere(call, known):
            return []
    return [planner.UNWORKED_STEP.format(tool=tools[0], question=question.strip())]


# Words that are a figure to work with, not a count of the request's parts ("Two lookups: ...")
# or a magnitude ("over 10 million"): what a found figure is to be multiplied or divided by.
_FACTORS = ("half", "halve", "halved", "double", "doubled", "twice", "triple", "tripled", "thrice", "quadrupled",
            "third", "quarter", "dozen")  # fmt: skip


def unused_figures(question: str, results: Sequence[Finding], schemas: Sequence[Mapping[str, Any]]) -> list[float]:
    """The figures the request gives (in digits, or a factor in words: "Triple the temperature")
    that no call took and that are no quantity a tool takes (a figure before one of a tool's
    fixed choices: "10 kg" is convert_units' to take). A figure the asker gives is there to be
    used: "how many days would the stock last if we sell 5 a day" with only the stock looked up
    leaves 5 for arithmetic, whatever the words that ask for it."""
    owners = choice_owners(schemas)
    quantities = {
        float(m.group(1))
        for m in re.finditer(r"(-?\d+(?:\.\d+)?)\s+([A-Za-z]+)", question)
        if named_choices(m.group(2), owners)
    }
    spelled = [float(planner.WORD_FIGURES[w]) for w in re.findall(r"[a-z]+", question.lower()) if w in _FACTORS]
    used = chain.passed_on(results)
    given = [f for f in dict.fromkeys(chain.digits(question) + spelled) if f not in quantities]
    return [f for f in given if not any(planner.same(f, u) for u in used)]


def _counted(question: str, schemas: Sequence[Mapping[str, Any]]) -> bool:
    """Does the request count one of a tool's fixed choices ("3 melons", "a dozen apples", "5
    pears and 2 melons")? What so many of a thing come to is arithmetic on what it is looked up as."""
    return any(chain.count_of(question, thing) is not None for thing in things(schemas))


def unchosen_steps(question: str, results: Sequence[Finding], schemas: Sequence[Mapping[str, Any]]) -> list[str]:
    """A step for each word of the request that is a fixed choice of a tool (an enum value,
    matched whole, in any case, or as its plural) that no call of that tool took, where the
    request asked for that tool: its words point to the tool, or the choice is that tool's alone
    ("in Fahrenheit", with only the Celsius lookup run; "the number of apples in stock", with
    only the price looked up)."""
    if branches(question):
        return []
    took = planner.taken(results)
    owners = choice_owners(schemas)  # a choice -> the tool of each slot that offers it
    named = named_choices(question, owners)
    # A tool that took another choice the request names is pointed to as well: "how much does a
    # banana cost, and how much does bread cost?" after get_price(banana) is get_price for bread.
    pointed = set(relevant_tools(question, schemas)) | {t for t, took_ in took.items() if took_ & set(named)}
    pairs = _paired(question, named, owners, schemas)
    steps = []
    for choice in named:
        tools = list(dict.fromkeys(owners[choice]))
        for tool in tools if len(tools) == 1 else [t for t in tools if t in pointed]:
            if choice in took.get(tool, set()) or _elsewhere(tool, choice, pairs):
                continue
            # A choice two slots of one tool offer (a unit to convert from or to) is what the
            # result should be in; a choice of one slot is what to look up.
            two_ways = owners[choice].count(tool) > 1
            template = planner.UNCHOSEN_STEP if two_ways else planner.RETRY_STEP
            steps.append(template.format(tool=tool, choice=choice, subject=choice))
    return list(dict.fromkeys(steps))


def _paired(
    question: str, named: Sequence[str], owners: Mapping[str, list[str]], schemas: Sequence[Mapping[str, Any]]
) -> set[tuple[str, str]]:
    """The (tool, choice) pairs the request makes in so many words: one of the tool's words, then
    "of" or "for" and the choice ("the stock of apples", "the price of coffee")."""
    out = set()
    for choice in named:
        for tool in set(owners[choice]):
            said = _said(tool, schemas)
            if said and re.search(
                rf"\b(?:{said})s?\s+(?:of|for)\s+(?:the\s+|an?\s+|one\s+)?{re.escape(choice)}(?:e?s)?\b",
                question,
                re.IGNORECASE,
            ):
                out.add((tool, choice))
    return out


def _said(tool: str, schemas: Sequence[Mapping[str, Any]]) -> str:
    """The words a tool says it gives (``chain.gives``), as a regex alternation."""
    return "|".join(re.escape(w) for w in sorted(chain.gives(tool, schemas)))


def _elsewhere(tool: str, choice: str, pairs: set[tuple[str, str]]) -> bool:
    """Does the request pair the tool with another choice, and the choice with another tool, but
    not these two? "the stock of apples, the price of coffee": no price of apples is asked."""
    if (tool, choice) in pairs:
        return False
    return any(t == tool and c != choice for t, c in pairs) and any(c == choice and t != tool for t, c in pairs)
