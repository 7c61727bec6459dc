"""The agent benchmark's tools and tasks, split once into a development half and a report half.

The invariant: **no prompt, example or heuristic of the library is developed against the
report half.** The split was fixed (and committed, 2026-12-03) before any of the planner work
it scores: the 22 tasks of the earlier benchmark, which the planner's prompts were revised
against, are all in the development half with the new families' development tasks; the report
half holds only tasks written at the same time and never run while tuning. The report gives
both halves and the gap between them (`bench/agent_tasks.py`).

Each task lists what a right answer must state (numbers or words, each derived by the tools and
absent from the question: `tests/test_agent_tasks.py` checks it), the calls that must have run,
and the calls that must not. Families: independent parts, data-dependent chains (a call's
argument is an earlier call's result), a step no tool fits, a question that needs no tool, a
tool that fails, and a result that changes the plan.

The tools are deterministic and answer from the tables below; a city, country or item they do
not know raises, as a real lookup would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pyshim.demo_tools import calculator, convert_units

PRICES = {"apple": 0.4, "pear": 0.55, "banana": 0.25, "melon": 2.8, "coffee": 7.5, "bread": 2.2}
STOCK = {"apple": 120, "pear": 75, "banana": 240, "melon": 18, "coffee": 42, "bread": 30}
CITIES = {
    "Paris": {"population": 2102650, "country": "France", "temperature_c": 18},
    "Oslo": {"population": 709037, "country": "Norway", "temperature_c": 7},
    "Lima": {"population": 10004000, "country": "Peru", "temperature_c": 22},
    "Cairo": {"population": 10230350, "country": "Egypt", "temperature_c": 31},
    "Tokyo": {"population": 13960000, "country": "Japan", "temperature_c": 16},
    "Lyon": {"population": 522250, "country": "France", "temperature_c": 20},
    "Bergen": {"population": 291940, "country": "Norway", "temperature_c": 9},
    "Cusco": {"population": 428450, "country": "Peru", "temperature_c": 13},
    "Alexandria": {"population": 5200000, "country": "Egypt", "temperature_c": 26},
    "Kyoto": {"population": 1464890, "country": "Japan", "temperature_c": 14},
}
CAPITALS = {"France": "Paris", "Norway": "Oslo", "Peru": "Lima", "Egypt": "Cairo", "Japan": "Tokyo"}
CURRENCIES = {
    "France": "euro",
    "Norway": "Norwegian krone",
    "Peru": "Peruvian sol",
    "Egypt": "Egyptian pound",
    "Japan": "Japanese yen",
}
Item = Literal["apple", "pear", "banana", "melon", "coffee", "bread"]


def get_price(item: Item) -> str:
    """Get the unit price of a shop item in euros.

    Args:
        item: the item, singular.
    """
    return f"{PRICES[item]} EUR"


def get_stock(item: Item) -> str:
    """Get how many units of a shop item are in stock.

    Args:
        item: the item, singular.
    """
    return str(STOCK[item])


def _city(city: str) -> dict[str, Any]:
    if city not in CITIES:
        raise KeyError(f"unknown city {city!r}; known: {', '.join(CITIES)}")
    return CITIES[city]


def _country(country: str) -> str:
    if country not in CAPITALS:
        raise KeyError(f"unknown country {country!r}; known: {', '.join(CAPITALS)}")
    return country


def get_weather(city: str) -> str:
    """Get the current temperature in a city, in degrees Celsius.

    Args:
        city: the city name, e.g. "Paris".
    """
    return json.dumps({"city": city, "temperature_c": _city(city)["temperature_c"]})


def get_population(city: str) -> str:
    """Get the population of a city.

    Args:
        city: the city name, e.g. "Paris".
    """
    return str(_city(city)["population"])


def country_of(city: str) -> str:
    """Get the country a city is in.

    Args:
        city: the city name, e.g. "Paris".
    """
    return str(_city(city)["country"])


def capital_of(country: str) -> str:
    """Get the capital city of a country.

    Args:
        country: the country name, e.g. "France".
    """
    return CAPITALS[_country(country)]


def currency_of(country: str) -> str:
    """Get the currency used in a country.

    Args:
        country: the country name, e.g. "France".
    """
    return CURRENCIES[_country(country)]


TOOLS: list[Callable[..., Any]] = [
    calculator,
    convert_units,
    get_price,
    get_stock,
    get_weather,
    get_population,
    country_of,
    capital_of,
    currency_of,
]

Call = tuple[str, dict[str, Any]]  # a tool's name and the arguments that matter (a subset)
Family = Literal["parts", "chain", "no-tool step", "no tool", "tool fails", "result decides"]


@dataclass(frozen=True)
class Task:
    prompt: str
    expect: tuple[float | str, ...]  # every value the answer must state, each from a tool
    needs: tuple[Call, ...] = ()  # calls that must have run (a tool may run more than once)
    forbid: tuple[Call, ...] = ()  # calls that must not run
    family: Family = "parts"
    half: Literal["dev", "report"] = "dev"
    # Calls of other tools than `needs` names fail the task unless listed here.
    allow: tuple[str, ...] = ()
    no_invented: bool = False  # every number the answer states must come from a tool or the question
    # Names a lookup fails for: the answer must say it found nothing for each, with no number beside it.
    fails: tuple[str, ...] = ()
    # Which batch of tasks it was written in ("" for the first): `--batch` runs one batch alone.
    batch: str = ""


DATA = Path(__file__).with_name("agent_tasks.json")


def _task(row: dict[str, Any], half: Literal["dev", "report"]) -> Task:
    """One task as the data file writes it: lists for tuples, each call as [name, {args}]."""
    calls = {k: tuple((name, args) for name, args in row[k]) for k in ("needs", "forbid") if k in row}
    rest = {k: tuple(v) if isinstance(v, list) else v for k, v in row.items() if k not in calls}
    return Task(**{**rest, **calls, "expect": tuple(row["expect"]), "half": half})


_DATA = json.loads(DATA.read_text())
# Report tasks that were seen all the same. The first was tuned on: a development copy of it, word
# for word, was added in 74c6fc1 and taken out on 2026-12-07 (tests/test_agent_tasks.py now keeps
# the halves apart). The others were printed by mistake (seven lines of the data file, this one
# among them) in the twelfth session, on 2026-12-07, before that session's changes: not tuned on,
# but no longer unseen. The report gives the report half with and without them.
SEEN = frozenset(
    {
        "What is the population of the capital of Peru?",
        "How many bananas are in stock? Multiply that number by the price of one banana.",
        "Get the population of Oslo, then divide it by 1000 with the calculator.",
        "What currency is used in the country Bergen is in?",
        "Convert 5 gallons to liters, then multiply the liters by 3 with the calculator.",
        "Write one word that rhymes with cat, then tell me the price of coffee.",
        "Tell me a fun fact about the sea, and the temperature in Cairo.",
    }
)
EARLIER = [_task(row, "dev") for row in _DATA["earlier"]]
DEV_NEW = [_task(row, "dev") for row in _DATA["dev"]]
REPORT = [_task(row, "report") for row in _DATA["report"]]
TASKS = EARLIER + DEV_NEW + REPORT


@dataclass(frozen=True)
class Single:
    prompt: str
    tool: str | None  # None: no tool fits, the answer must be text
    args: dict[str, Any] = field(default_factory=dict)  # checked by value (numbers within 1e-6)
    half: Literal["dev", "report"] = "dev"


# The single-call set, older than the split and never tuned against: alternate tasks report.
_SINGLE = [Single(row["prompt"], row["tool"], row.get("args", {})) for row in _DATA["single"]]
SINGLE = [Single(s.prompt, s.tool, s.args, "report" if i % 2 else "dev") for i, s in enumerate(_SINGLE)]
