"""A planned step that opens with a condition on a figure, decided by the figure found.

Plan mode keeps a condition whole as one step ("If it is under 10 degrees, also tell me the
temperature in Cairo; otherwise tell me the temperature in Oslo."). Asked to do such a step, a
0.5B model does both branches, or the one it reads first, whatever the figure: on the
development half it looked up Oslo as well as Cairo after Bergen's 9 degrees, and the price of a
melon with 18 in stock where "more than 50" asked for it. A comparison of a figure with a
number is not the model's to guess: once a result returned the figure the condition speaks of,
``decide`` reads the comparison and returns the branch to do (the step the model is then given)
and the one not to do (whose names no later step may bring back).

What is read: "if"/"when" (or "should", "in case", "provided", "as long as") and one comparison
in words ("under", "below", "fewer than", "more than", "over", "above", "at least", "at most" and
the like) with a number in digits or words ("one million"); the branch after it; and
"otherwise", "if not" or "else" before the other branch.
Anything else (no number, two comparisons, a condition on a word) is left to the model as before.

The figure is the last one a result returned: the step before the condition looked it up ("How
many melons are in stock? If there are more than 50, ..."). No I/O; ``agent_core`` asks.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = ["Decision", "branches", "decide", "nothing_to_do"]


class Decision(NamedTuple):
    chosen: str  # the branch to do, as a step ("" where it asks for nothing more)
    rejected: str  # the branch not to do ("" where there is none)
    held: bool  # did the condition hold (the branch after "if" is the one chosen)?


_LESS = r"under|below|less than|fewer than|lower than|smaller than|colder than|cheaper than|short of"
_MORE = r"over|above|more than|greater than|higher than|larger than|bigger than|warmer than|exceeds?|beyond"
# Each comparison's group in ``_CONDITION`` -> how the figure must stand to the number.
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "atmost": operator.le,
    "atleast": operator.ge,
    "less": operator.lt,
    "more": operator.gt,
}
_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "twenty": 20, "fifty": 50, "hundred": 100,
}  # fmt: skip
_SCALE = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUMBER = r"(?P<n>-?\d[\d,]*(?:\.\d+)?|" + "|".join(_WORDS) + r")(?:\s+(?P<scale>" + "|".join(_SCALE) + r"))?"
# The words that open a condition: "if", and the other ways English says it ("Should it exceed 200,
# ...", "In case it is under 10, ...").
_IF = r"(?:if|when|should|in case|provided(?: that)?|as long as)"
_CONDITION = re.compile(
    rf"^\s*{_IF}\b(?P<cond>[^,;]*?\b(?:(?P<atmost>at most|no more than)|(?P<atleast>at least)"
    rf"|(?P<less>{_LESS})|(?P<more>{_MORE}))\s+{_NUMBER}\b[^,;]*?)\s*,\s*(?:then\s+)?(?P<then>.+)$",
    re.IGNORECASE,
)
# Where the other branch begins: "; otherwise ...", ", if not, ...", ". Else ...", or the other
# condition spelled out (", but if it's 100 or more, ..."), read as the first one's complement.
_OTHERWISE = re.compile(
    r"\s*[;,.]?\s*(?:(?:and|but)\s+)?\b(?:otherwise|if not|else|or else)\b[\s,]*"
    r"|\s*[;,.]\s*(?:but\s+|and\s+)?(?:if|when)\b[^,;]*,\s*",
    re.IGNORECASE,
)
# A bound after the number ("100 or more"), written as the same bound before it ("at least 100").
_BOUND_AFTER = re.compile(
    rf"\b{_NUMBER}\s+or\s+(?:(?P<up>more|above|over|higher|greater|larger)|(?P<down>less|fewer|below|under|lower))\b",
    re.IGNORECASE,
)
# A condition a request sets on what is found (a comparison after "if" or "when", a state after
# "if"), or a branch in words: "If I buy 5 pears" or "if it doubled" supposes and decides nothing,
# nor does what the asker does ("if I spread it over 3 days": no figure found is compared).
_BRANCHES = re.compile(
    rf"\b{_IF}\b(?!\s+(?:I|we)\b)[^,;.?!]*?\b(?:at most|no more than|at least|{_LESS}|{_MORE})\s+{_NUMBER}"
    r"|\bif\b[^,;.?!]*?\b(?:is|are|isn't|aren't)\b"  # a state checked: "If Lyon is big"
    r"|\b(?:unless|otherwise|whether|if not|or else)\b",
    re.IGNORECASE,
)
# A step that is the other branch of the one before: "Otherwise, tell me the price of an apple."
_OPENS_OTHERWISE = re.compile(r"^\s*(?:otherwise|if not|else|or else)\b[\s,]*(?P<rest>.*)$", re.IGNORECASE)
# A branch that asks for nothing but what was found: "just tell me", "do nothing".
_NOTHING = re.compile(
    r"^(?:just\s+|simply\s+)?(?:tell me|say so|say it|report it|do nothing|leave it|nothing)\b[\s.!]*$", re.IGNORECASE
)


def _number(match: re.Match[str]) -> float:
    n = match.group("n").lower().replace(",", "")
    value = float(_WORDS[n]) if n in _WORDS else float(n)
    return value * _SCALE[match.group("scale").lower()] if match.group("scale") else value


def _holds(match: re.Match[str], figure: float) -> bool:
    compare = next(how for group, how in _COMPARE.items() if match.group(group))
    return compare(figure, _number(match))


def _branch(text: str) -> str:
    """A branch as a step of its own: trimmed, capitalised, ending in a full stop."""
    text = text.strip(" ,;.")
    return f"{text[0].upper()}{text[1:]}." if text else ""


def nothing_to_do(branch: str) -> bool:
    """Does the branch ask for nothing but what was found ("just tell me")?"""
    return not branch or bool(_NOTHING.match(branch))


def decide(step: str, figures: Sequence[float], held: bool | None = None) -> Decision | None:
    """The branch of a conditional step to do and the one not to do, by the last figure found;
    a step that opens with "otherwise" is the other branch of the condition before it (``held``:
    whether that one held). None where the step opens with no condition this reads, or nothing
    was found yet."""
    if held is not None and (other := _OPENS_OTHERWISE.match(step)):
        rest = other.group("rest")
        return Decision("", _branch(rest), held) if held else Decision(_doable(rest), "", held)
    match = _CONDITION.match(_bounds_first(step))
    if match is None or not figures:
        return None
    then, *rest = _OTHERWISE.split(match.group("then"), maxsplit=1)
    other_branch = rest[0] if rest else ""
    holds = _holds(match, figures[-1])
    chosen, rejected = (then, other_branch) if holds else (other_branch, then)
    return Decision(_doable(chosen), _branch(rejected), holds)


def _bounds_first(text: str) -> str:
    """The text with each bound after its number ("100 or more") written before it ("at least 100")."""

    def before(m: re.Match[str]) -> str:
        return f"{'at least' if m.group('up') else 'at most'} {m.group(0).split(' or ')[0]}"

    return _BOUND_AFTER.sub(before, text)


def branches(text: str) -> bool:
    """Does the text set a condition on something found ("If there are more than 50, ...",
    "when that's 100 or more", "otherwise ...")? A request that does may rightly leave a lookup
    or a sum undone; "If I buy 5 pears" or "if it doubled" is the asker supposing, no branch."""
    return bool(_BRANCHES.search(_bounds_first(text)))


def _doable(branch: str) -> str:
    return "" if nothing_to_do(branch.strip(" ,;.")) else _branch(branch)
