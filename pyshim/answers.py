"""Is a model's text an answer? Calls written as text, echoes, empty turns and invented figures (sans-IO).

Small models end a tool run with text that is not an answer: the tool calls they meant to make,
written out as JSON (one object, a list, one object per line, fenced, in ``<tool_call>`` tags, or
as ``name(arguments)``), the user's request repeated back, or nothing at all. An agent that calls
such a turn an answer hands its caller a non-answer as if it were one. The invariant this module
keeps: ``verdict`` says ``"answer"`` only for text that is none of those, and it decides from the
text and what the run knows alone, never from which task is being run (``pyshim.agent_core``
acts on it; the doors do not, since there the caller's own loop decides). ``unfounded`` keeps a
second one: an answer the agent returns says nothing about a subject whose lookup failed but that
it failed (``failed_subjects`` reads those from the run's results); ``with_findings`` a third: it
states something of every lookup that ended a chain (``findings``).
"""

from __future__ import annotations

import contextlib
import json
import re
import unicodedata
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .planner import argument_leaves, failed, leaves, same

__all__ = [
    "Finding",
    "calls_in_text",
    "failed_subjects",
    "findings",
    "invented_numbers",
    "numbers",
    "plain_text",
    "unfounded",
    "verdict",
    "with_findings",
    "without_copied_facts",
    "without_invented",
]

_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)\s*```", re.DOTALL)
_TAG = re.compile(r"</?tool_call>")
_MALFORMED_CALL = re.compile(r'"(?:name|function)"\s*:.*"(?:arguments|parameters)"\s*:', re.DOTALL)
_PY_CALL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*;?\s*$", re.DOTALL)


def _json_values(text: str) -> list[Any] | None:
    """The JSON values the text is made of, one after another (whitespace, commas or newlines
    between them), or None when anything else is in it."""
    decoder, values, i = json.JSONDecoder(), [], 0
    text = text.strip()
    while i < len(text):
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        values.append(value)
        while i < len(text) and text[i] in " \t\r\n,;":
            i += 1
    return values or None


def _unwrapped(content: str) -> str:
    """The text without code fences and ``<tool_call>`` tags around what they hold."""
    text = _FENCE.sub(lambda m: "\n" + m.group(1) + "\n", content)
    return _TAG.sub("\n", text).strip()


def _call_items(content: str) -> list[dict[str, Any]] | None:
    """The call-shaped objects the whole text consists of (``{"name": ..., "arguments" |
    "parameters": ...}``, or OpenAI's ``{"function": {...}}``), or None when it is anything else."""
    text = _unwrapped(content)
    values = _json_values(text)
    if values is None:
        # Not JSON, but a call's shape all the same: small models leave quotes unescaped
        # ('{"name": "f(city="Lyon")", "arguments": ...}'). Not runnable, and not an answer.
        return [] if text.startswith(("{", "[")) and _MALFORMED_CALL.search(text) else None
    items = [item for v in values for item in (v if isinstance(v, list) else [v])]
    out = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("function"), dict):
            item = item["function"]
        if not (isinstance(item, dict) and isinstance(item.get("name"), str)):
            return None
        if not ({"arguments", "parameters"} & item.keys() or len(item) == 1):
            return None
        out.append(item)
    return out or None  # [] is returned only for the malformed shape above


def _as_call(name: str, args: Any) -> dict[str, Any] | None:
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    function = {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}


def _python_call(content: str, tools: Collection[str]) -> list[dict[str, Any]] | None:
    """``name(key=value, ...)`` or ``name("value")`` naming one of the tools, as a call; None otherwise."""
    match = _PY_CALL.match(_unwrapped(content))
    if not match or match.group(1) not in tools:
        return None
    inner = match.group(2).strip()
    pairs = re.findall(r"([A-Za-z_]\w*)\s*=\s*(\"[^\"]*\"|'[^']*'|[-\d.eE]+)", inner)
    if not pairs:
        return [] if inner else [c for c in [_as_call(match.group(1), {})] if c]
    args = {k: (v[1:-1] if v[0] in "\"'" else float(v) if any(ch in v for ch in ".eE") else int(v)) for k, v in pairs}
    call = _as_call(match.group(1), args)
    return [call] if call else []


def calls_in_text(content: str | None, tools: Collection[str]) -> list[dict[str, Any]]:
    """The tool calls a turn wrote as its whole text, in any of the shapes small models write,
    each naming one of ``tools``, as OpenAI tool calls; [] when the text is anything else, or
    when any call in it names no tool (that text is still not an answer: see ``verdict``)."""
    if not content or not content.strip():
        return []
    items = _call_items(content)
    if items is None:
        return _python_call(content, tools) or []
    calls = [_as_call(item["name"], item.get("arguments", item.get("parameters", {}))) for item in items]
    if any(c is None for c in calls) or any(item["name"] not in tools for item in items):
        return []
    return [c for c in calls if c is not None]


def _words(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.findall(r"\w+", text)


def echoes(content: str, request: str) -> bool:
    """Does the text repeat the request back (all of it, or a sentence of it, as the reply)?"""
    said, asked = _words(content), _words(request)
    if not said or not asked:
        return False
    if said == asked:
        return True
    # The reply is one of the request's own sentences, or the request with a word changed.
    sentences = [_words(s) for s in re.split(r"(?<=[.!?])\s+", request)]
    if any(said == s for s in sentences if len(s) >= 3):
        return True
    common = sum(1 for w in said if w in set(asked))
    return len(said) >= 4 and common == len(said) and len(said) >= 0.8 * len(asked)


def verdict(content: str | None, request: str, tools: Collection[str]) -> str:
    """What a turn's text is: ``"answer"``, ``"empty"``, ``"echo"`` (the request repeated back) or
    ``"call_as_text"`` (a tool call written as text, runnable or not)."""
    if not content or not content.strip():
        return "empty"
    if _call_items(content) is not None or _python_call(content, tools) is not None:
        return "call_as_text"
    if _MALFORMED_CALL.search(content):  # a call's shape inside text ("Name a fruit. -> {"name": ...}")
        return "call_as_text"
    if echoes(content, request):
        return "echo"
    return "answer"


_SCALE = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_FIGURE = re.compile(
    r"(-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?)(?:\s*(thousand|million|billion|trillion)\b)?", re.IGNORECASE
)


def _figures(text: str) -> list[tuple[float, int]]:
    """Each number a text states, with the decimal place it was written to (negative for
    "2.1 million": to the hundred thousand)."""
    out = []
    for m in _FIGURE.finditer(text or ""):
        raw, scale = m.group(1).replace(",", ""), _SCALE.get((m.group(2) or "").lower(), 0)
        try:
            value = float(raw)
        except ValueError:
            continue
        places = len(raw.split(".")[1]) if "." in raw and "e" not in raw.lower() else 0
        out.append((value * 10**scale, places - scale))
    return out


def numbers(text: str) -> list[float]:
    """The numbers a text states (thousands separators and "million"-style scales read)."""
    return [value for value, _ in _figures(text)]


def _same(stated: float, places: int, known: float) -> bool:
    """A stated figure is a known one, or that one rounded to the place it was written to
    ("26.1" for 26.0976, "2.1 million" for 2102650)."""
    if abs(stated - known) <= 1e-9 * max(1.0, abs(known)):
        return True
    return abs(round(known, places) - stated) <= 1e-9 * max(1.0, abs(stated))


def invented_numbers(content: str, known: Iterable[str]) -> list[float]:
    """The figures a text states that none of the known texts holds (the request, the tool
    results): what a model wrote from memory, or made up. Whole numbers 0-10 written without a
    decimal point (counts, list positions) are never counted."""
    found = [n for text in known for n in numbers(text)]
    return [
        value
        for value, places in _figures(content)
        if not (places == 0 and 0 <= value <= 10) and not any(_same(value, places, k) for k in found)
    ]


_SENTENCE_END = re.compile(r"((?<=[.!?;])[ \t]+|\n+)")
# Words with which a sentence says a lookup gave nothing ("could not find", "unknown", "failed").
_NOTHING = re.compile(
    r"\b(?:not|no|none|nothing|unknown|unable|cannot|can't|couldn't|n't|fail\w*|error|unavailable)\b", re.I
)


def _names(sentence: str, subjects: Iterable[str]) -> list[str]:
    return [s for s in subjects if re.search(rf"(?<!\w){re.escape(s)}(?!\w)", sentence, re.IGNORECASE)]


def _nothing_for(subject: str, tool: str) -> str:
    return f"{tool} found nothing for {subject}, so I cannot say."


def unfounded(content: str, failed: dict[str, str]) -> tuple[str, list[str]]:
    """The text with each sentence (or line) that names a subject whose lookup failed and either
    states a figure or does not say the lookup failed, replaced by one that says so, and that
    sentence added for such a subject the text does not name; and the sentences replaced.
    ``failed``: each such subject (a name the request gave that no lookup answered) and the tool
    that failed on it.

    A small model told plainly that a lookup failed still writes a figure for it, often one a
    lookup returned for another subject ("Atlantis: 10004000" beside Lima's 10004000), which no
    check of the figures alone can catch, or leaves the subject out; the reply about a failed
    lookup is then the library's sentence, not the model's."""
    parts = _SENTENCE_END.split(content)
    replaced, named_at_all = [], set()
    for i in range(0, len(parts), 2):
        sentence = parts[i]
        named = _names(sentence, failed)
        named_at_all.update(named)
        if not named or (not numbers(sentence) and _NOTHING.search(sentence)):
            continue
        replaced.append(sentence)
        parts[i] = " ".join(_nothing_for(s, failed[s]) for s in named)
    unnamed = [_nothing_for(s, tool) for s, tool in failed.items() if s not in named_at_all]
    text = "".join(parts).rstrip()
    return (" ".join([text, *unnamed]).strip() if unnamed else "".join(parts)), replaced


def without_invented(content: str, known: Iterable[str]) -> tuple[str, list[str]]:
    """The text less each sentence (or line) that states a figure none of the known texts holds,
    and those sentences. The answer turn of a 0.5B model, given "calculator for 1464890 / 1000:
    1464.89", wrote "The population of Kyoto is 1464.89 million": the finding is the library's
    to state (``with_findings``), the made-up scale is dropped."""
    parts = _SENTENCE_END.split(content)
    dropped = []
    for i in range(0, len(parts), 2):
        if invented_numbers(parts[i], known):
            dropped.append(parts[i])
            parts[i] = ""
    return ("".join(parts).strip() if dropped else content), dropped


# The answer turn's own prompt: its heading lines ("Request: ...", "Findings:").
_HEADING = re.compile(r"^\s*(?:request|findings)\s*:.*$|\s*\bfindings\s*:\s*$", re.IGNORECASE | re.MULTILINE)


def without_copied_facts(content: str, tools: Collection[str]) -> tuple[str, list[str]]:
    """The text less the lines that copy the findings block the answer turn was shown, and those
    lines: a 0.5B model answered "Can you recommend a dish? Findings:\n1. country_of(city=
    "Paris") returned: France", and "1. get_stock(item="apple") returned: 120" line by line. The
    findings are the library's to state (``with_findings``); the prompt's own lines are no answer."""
    if not tools:
        return content, []
    names = "|".join(re.escape(t) for t in sorted(tools, key=len, reverse=True))
    copy = re.compile(rf"^\s*(?:\d+[.)]\s*)?(?:{names})\s*\(.*\)\s*(?:returned\b|failed\b).*$", re.IGNORECASE)
    copied: list[str] = []
    kept: list[str] = []
    for line in content.splitlines():
        (copied if copy.match(line) else kept).append(line)
    return (_HEADING.sub("", "\n".join(kept)).strip(), copied) if copied else (content, [])


@dataclass(frozen=True)
class Finding:
    """A lookup that answered, as an answer must state it: ``label`` names it ("currency_of for
    Egypt"), ``values`` are what it returned beyond its own arguments, ``shown`` its output."""

    label: str
    values: tuple[Any, ...]
    shown: str


def _states(content: str, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return any(_same(stated, places, float(value)) for stated, places in _figures(content))
    text = str(value).strip()
    if not text:
        return False
    if figures := numbers(text):  # "2.8 EUR", "87.8 fahrenheit": the figure is the finding
        return any(_same(stated, places, figures[0]) for stated, places in _figures(content))
    return re.search(rf"(?<!\w){re.escape(text)}(?:e?s)?(?!\w)", content, re.IGNORECASE) is not None  # "pounds"


def with_findings(content: str, findings: Iterable[Finding]) -> str:
    """The text, with a sentence for each finding it states nothing of ("Also found: currency_of
    for Egypt: Egyptian pound."). A small model writing the answer from its findings drops one
    (the last link of a chain, "Egypt" for the currency of Egypt) or states another in its place;
    the lookup ran and answered, so the caller gets its result."""
    missing = [f for f in findings if f.values and not any(_states(content, v) for v in f.values)]
    lead = "Also found" if content.strip() else "Found"
    lines = [f"{lead}: {f.label}: {f.shown}." for f in missing]
    return "\n".join([c for c in (content.rstrip(), *lines) if c]) if lines else content


Results = Sequence[tuple[Mapping[str, Any], str]]  # each call of a run and its output ("error: ..." when it failed)


def _proper_name(text: str) -> bool:
    """A name as a request gives one ("Lima", "Buenos Aires"): capitalised, no digits, short."""
    return 2 <= len(text) <= 40 and text[0].isupper() and not any(ch.isdigit() for ch in text)


def failed_subjects(question: str, results: Results, refused: Collection[str] = ()) -> dict[str, str]:
    """The names the request gave that a call which ran failed on and no call answered, each with
    the tool that failed on it (what ``unfounded`` keeps an answer from stating a finding for).
    ``refused``: ids of calls not run, whose arguments were made up, so not the request's subject."""
    answered = {str(v).lower() for c, out in results if not failed(out) for v in argument_leaves(c)}
    out: dict[str, str] = {}
    for call, output in results:
        if not failed(output) or call.get("id") in refused:
            continue
        for v in argument_leaves(call):
            name = str(v).strip()
            asked = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", question)
            if isinstance(v, str) and name.lower() not in answered and _proper_name(name) and asked:
                out.setdefault(name, call["function"]["name"])
    return out


def _passes(output: str, argument: str) -> bool:
    """Does a later call's argument hold this output (its figure, or its text)?"""
    figures = numbers(output)
    if len(figures) == 1:
        return any(same(n, figures[0]) for n in numbers(argument))
    text = output.strip().lower()
    return bool(text) and (text == argument.strip() or (not figures and text in argument))


def findings(results: Results, asked: Collection[int] = ()) -> list[Finding]:
    """Each call that answered and whose result no later call took (the end of a chain: what the
    request asked for; a link passed on need not be stated), or that the request asked for itself
    (``asked``: indexes into ``results``; "Check the temperature in Cairo. If it is above 25
    degrees, convert it": 31 was passed on, and the answer gave only 87.8), with what it returned
    beyond its own arguments (what ``with_findings`` has an answer state)."""
    out = []
    for i, (call, output) in enumerate(results):
        later = [str(v).lower() for c, _ in results[i + 1 :] for v in argument_leaves(c)]
        if failed(output) or (i not in asked and any(_passes(output, arg) for arg in later)):
            continue
        own = [str(v).strip() for v in argument_leaves(call)]
        try:
            parsed = json.loads(output)
        except json.JSONDecodeError:
            parsed = output
        values = tuple(v for v in leaves(parsed) if str(v).strip() not in own and str(v).strip())
        shown = output if not isinstance(parsed, dict) else ", ".join(f"{k} {v}" for k, v in parsed.items())
        out.append(Finding(f"{call['function']['name']} for {', '.join(own)}", values, shown.strip()[:200]))
    return out


def plain_text(content: str) -> str:
    """A reply written as a call's JSON, in words: its name and the text of its arguments
    ('{"name": "Bakery Motto", "arguments": {"motto": "Fresh"}}' is "Bakery Motto: Fresh",
    '{"name": "apple"}' is "apple"); any other text as it is. A step done in text, tools off,
    came back so from a 0.5B model, and the answer turn copied the JSON."""
    items = _call_items(content)
    if not items:
        return content
    parts = []
    for item in items:
        args = item.get("arguments", item.get("parameters"))
        if isinstance(args, str):
            with contextlib.suppress(json.JSONDecodeError):
                args = json.loads(args)
        words = [str(v).strip() for v in leaves(args) if isinstance(v, str) and v.strip()] if args else []
        parts.append(f"{item['name']}: {'; '.join(words)}" if words else str(item["name"]))
    return "\n".join(parts)
