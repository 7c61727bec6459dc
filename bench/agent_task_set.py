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


def _c(name: str, **args: Any) -> Call:
    return (name, args)


# The earlier benchmark's 22 tasks (the plan mode's prompts were revised against them): all dev.
EARLIER = [
    Task(
        "Use the tools to compute 12.5 times 3, and to convert 37.5 km to miles, then tell me both results.",
        (23.3014,),
        (_c("calculator"), _c("convert_units", value=37.5)),
    ),
    Task(
        "What is the price of a melon and how many melons are in stock?", (2.8, 18), (_c("get_price"), _c("get_stock"))
    ),
    Task(
        "Convert 10 kg to pounds and 5 miles to km.",
        (22.0462, 8.0467),
        (_c("convert_units", value=10), _c("convert_units", value=5)),
    ),
    Task(
        "What is the temperature in Oslo and in Cairo right now?",
        (7, 31),
        (_c("get_weather", city="Oslo"), _c("get_weather", city="Cairo")),
    ),
    Task(
        "What are the populations of Paris and Oslo?",
        (2102650, 709037),
        (_c("get_population", city="Paris"), _c("get_population", city="Oslo")),
    ),
    Task("Compute 144 / 12 and 17 * 23, then tell me both results.", (391,), (_c("calculator"),)),
    Task(
        "How many bananas and how many pears are in stock?",
        (240, 75),
        (_c("get_stock", item="banana"), _c("get_stock", item="pear")),
    ),
    Task(
        "What is the price of coffee? Then compute the cost of 4 of them with the calculator.",
        (7.5, 30),
        (_c("get_price", item="coffee"), _c("calculator")),
        family="chain",
    ),
    Task(
        "How many apples are in stock? Then use the calculator to compute that number times 0.4.",
        (120, 48),
        (_c("get_stock", item="apple"), _c("calculator")),
        family="chain",
    ),
    Task(
        "Convert 30 degrees Celsius to Fahrenheit and 100 feet to meters.",
        (86, 30.48),
        (_c("convert_units", value=30), _c("convert_units", value=100)),
    ),
    Task(
        "What is the temperature in Tokyo? Then convert it from Celsius to Fahrenheit.",
        (16, 60.8),
        (_c("get_weather", city="Tokyo"), _c("convert_units", value=16)),
        family="chain",
    ),
    Task("Compute 2 ** 10 and 1000 - 1, then tell me both results.", (1024, 999), (_c("calculator"),)),
    Task(
        "Get the price of bread and the price of a pear.",
        (2.2, 0.55),
        (_c("get_price", item="bread"), _c("get_price", item="pear")),
    ),
    Task(
        "What is the population of Lima? Then compute that number divided by 2.",
        (10004000, 5002000),
        (_c("get_population", city="Lima"), _c("calculator")),
        family="chain",
    ),
    Task(
        "Convert 3 gallons to liters and 42 km to miles.",
        (11.3562, 26.0976),
        (_c("convert_units", value=3), _c("convert_units", value=42)),
    ),
    Task(
        "How many melons are in stock, and what is the temperature in Oslo?",
        (18, 7),
        (_c("get_stock", item="melon"), _c("get_weather", city="Oslo")),
    ),
    Task(
        "Compute 19 * 21, then convert that many km to miles.",
        (399, 247.927),
        (_c("calculator"), _c("convert_units", value=399)),
        family="chain",
    ),
    Task(
        "What is the price of an apple, of a banana and of a melon?",
        (0.4, 0.25, 2.8),
        (_c("get_price", item="apple"), _c("get_price", item="banana"), _c("get_price", item="melon")),
    ),
    Task(
        "What is the temperature in Lima, in Oslo and in Tokyo?",
        (22, 7, 16),
        (_c("get_weather", city="Lima"), _c("get_weather", city="Oslo"), _c("get_weather", city="Tokyo")),
    ),
    Task("Compute 7 * 8, 81 / 9 and 15 + 27, then tell me all three results.", (56, 42), (_c("calculator"),)),
    Task(
        "How much coffee is in stock, and what does one coffee cost?",
        (42, 7.5),
        (_c("get_stock", item="coffee"), _c("get_price", item="coffee")),
    ),
    Task(
        "Convert 50 lb to kg and 2 liters to gallons.",
        (22.6796, 0.5283),
        (_c("convert_units", value=50), _c("convert_units", value=2)),
    ),
]

# The new families' development tasks: tuned against, like EARLIER.
DEV_NEW = [
    Task(
        "Which country is Bergen in, and what is the capital of that country?",
        ("Norway",),
        (_c("country_of", city="Bergen"), _c("capital_of", country="Norway")),
        family="chain",
    ),
    Task(
        "What is the temperature in the capital of the country Lyon is in?",
        (18,),
        (_c("country_of", city="Lyon"), _c("capital_of", country="France"), _c("get_weather", city="Paris")),
        family="chain",
    ),
    Task(
        "Look up the price of a melon, then use the calculator to multiply it by the number of melons in stock.",
        (2.8, 18, 50.4),
        (_c("get_price", item="melon"), _c("get_stock", item="melon"), _c("calculator")),
        family="chain",
    ),
    Task(
        "What currency is used in the country whose capital is Cairo? Find the country first.",
        ("Egyptian pound",),
        (_c("country_of", city="Cairo"), _c("currency_of", country="Egypt")),
        family="chain",
    ),
    Task(
        "Name a fruit, then tell me the temperature in Tokyo.",
        (16,),
        (_c("get_weather", city="Tokyo"),),
        family="no-tool step",
    ),
    Task(
        "Give me a short motto for a bakery, and then the price of bread.",
        (2.2,),
        (_c("get_price", item="bread"),),
        family="no-tool step",
    ),
    Task("Hello! Who are you?", (), family="no tool"),
    Task("Thank you, that is all for today.", (), family="no tool"),
    Task(
        "What is the population of Atlantis and of Lima?",
        (10004000,),
        (_c("get_population", city="Atlantis"), _c("get_population", city="Lima")),
        family="tool fails",
        no_invented=True,
        fails=("Atlantis",),
    ),
    Task(
        "What is the temperature in Narnia? Also tell me how many pears are in stock.",
        (75,),
        (_c("get_weather", city="Narnia"), _c("get_stock", item="pear")),
        family="tool fails",
        no_invented=True,
        fails=("Narnia",),
    ),
    Task(
        "How many pears are in stock? If fewer than 100, tell me the price of a pear; otherwise the price of an apple.",
        (75, 0.55),
        (_c("get_stock", item="pear"), _c("get_price", item="pear")),
        forbid=(_c("get_price", item="apple"),),
        family="result decides",
    ),
    Task(
        "Check the temperature in Cairo. If it is above 25 degrees, convert it to Fahrenheit; if not, just tell me.",
        (31, 87.8),
        (_c("get_weather", city="Cairo"), _c("convert_units", value=31)),
        family="result decides",
    ),
]

# Never run while tuning anything.
REPORT = [
    Task(
        "What does a pear cost, and what is the temperature in Lima?",
        (0.55, 22),
        (_c("get_price", item="pear"), _c("get_weather", city="Lima")),
        half="report",
    ),
    Task(
        "Convert 12 liters to gallons, and compute 65 * 4.",
        (3.1701, 260),
        (_c("convert_units", value=12), _c("calculator")),
        half="report",
    ),
    Task(
        "How many apples and how much bread are in stock?",
        (120, 30),
        (_c("get_stock", item="apple"), _c("get_stock", item="bread")),
        half="report",
    ),
    Task(
        "Which country is Kyoto in, and what is the population of that country's capital?",
        ("Japan", 13960000),
        (_c("country_of", city="Kyoto"), _c("capital_of", country="Japan"), _c("get_population", city="Tokyo")),
        family="chain",
        half="report",
    ),
    Task(
        "What is the capital of the country that Cusco is in?",
        ("Lima",),
        (_c("country_of", city="Cusco"), _c("capital_of", country="Peru")),
        family="chain",
        half="report",
    ),
    Task(
        "Find the temperature in the capital of the country Alexandria is in, and convert it to Fahrenheit.",
        (31, 87.8),
        (
            _c("country_of", city="Alexandria"),
            _c("capital_of", country="Egypt"),
            _c("get_weather", city="Cairo"),
            _c("convert_units", value=31),
        ),
        family="chain",
        half="report",
    ),
    Task(
        "How many bananas are in stock? Multiply that number by the price of one banana.",
        (240, 60),
        (_c("get_stock", item="banana"), _c("get_price", item="banana"), _c("calculator")),
        family="chain",
        half="report",
    ),
    Task(
        "Get the population of Oslo, then divide it by 1000 with the calculator.",
        (709037, 709.037),
        (_c("get_population", city="Oslo"), _c("calculator")),
        family="chain",
        half="report",
    ),
    Task(
        "What currency is used in the country Bergen is in?",
        ("krone",),
        (_c("country_of", city="Bergen"), _c("currency_of", country="Norway")),
        family="chain",
        half="report",
    ),
    Task(
        "What is the population of the capital of Peru?",
        (10004000,),
        (_c("capital_of", country="Peru"), _c("get_population", city="Lima")),
        family="chain",
        half="report",
    ),
    Task(
        "Convert 5 gallons to liters, then multiply the liters by 3 with the calculator.",
        (18.927, 56.781),
        (_c("convert_units", value=5), _c("calculator")),
        family="chain",
        half="report",
    ),
    Task(
        "Write one word that rhymes with cat, then tell me the price of coffee.",
        (7.5,),
        (_c("get_price", item="coffee"),),
        family="no-tool step",
        half="report",
    ),
    Task(
        "Tell me a fun fact about the sea, and the temperature in Cairo.",
        (31,),
        (_c("get_weather", city="Cairo"),),
        family="no-tool step",
        half="report",
    ),
    Task("Good morning! How are you today?", (), family="no tool", half="report"),
    Task("Please write a short greeting for my friend Ana.", (), family="no tool", half="report"),
    Task(
        "What is the temperature in Gotham and in Oslo?",
        (7,),
        (_c("get_weather", city="Gotham"), _c("get_weather", city="Oslo")),
        family="tool fails",
        half="report",
        no_invented=True,
        fails=("Gotham",),
    ),
    Task(
        "What is the population of Springfield? Then tell me the population of Paris.",
        (2102650,),
        (_c("get_population", city="Springfield"), _c("get_population", city="Paris")),
        family="tool fails",
        half="report",
        no_invented=True,
        fails=("Springfield",),
    ),
    Task(
        "Check the temperature in Tokyo. If it is above 20 degrees, get the population of Tokyo; "
        "otherwise get the population of Lima.",
        (16, 10004000),
        (_c("get_weather", city="Tokyo"), _c("get_population", city="Lima")),
        forbid=(_c("get_population", city="Tokyo"),),
        family="result decides",
        half="report",
    ),
    Task(
        "How many melons are in stock? If fewer than 50, compute with the calculator what 10 more melons would cost.",
        (18, 28),
        (_c("get_stock", item="melon"), _c("get_price", item="melon"), _c("calculator")),
        family="result decides",
        half="report",
    ),
    Task(
        "How much do 6 melons cost? Look up the price and use the calculator.",
        (2.8, 16.8),
        (_c("get_price", item="melon"), _c("calculator")),
        family="chain",
        half="report",
    ),
    Task(
        "What is the temperature in Paris in Fahrenheit?",
        (18, 64.4),
        (_c("get_weather", city="Paris"), _c("convert_units", value=18)),
        family="chain",
        half="report",
    ),
    Task(
        "Which country is Lyon in? Then give me that country's currency.",
        ("France", "euro"),
        (_c("country_of", city="Lyon"), _c("currency_of", country="France")),
        family="chain",
        half="report",
    ),
]

TASKS = EARLIER + DEV_NEW + REPORT


@dataclass(frozen=True)
class Single:
    prompt: str
    tool: str | None  # None: no tool fits, the answer must be text
    args: dict[str, Any] = field(default_factory=dict)  # checked by value (numbers within 1e-6)
    half: Literal["dev", "report"] = "dev"


# The single-call set, older than the split and never tuned against: alternate tasks report.
_SINGLE = [
    Single("What is 37 times 43?", "calculator"),
    Single("Compute (15 + 9) / 4.", "calculator"),
    Single("Convert 12 miles to kilometers.", "convert_units", {"value": 12, "from_unit": "miles", "to_unit": "km"}),
    Single("Convert 70 kg to pounds.", "convert_units", {"value": 70, "from_unit": "kg", "to_unit": "pounds"}),
    Single("How warm is it in Oslo?", "get_weather", {"city": "Oslo"}),
    Single("What is the weather in Tokyo?", "get_weather", {"city": "Tokyo"}),
    Single("How many people live in Cairo?", "get_population", {"city": "Cairo"}),
    Single("What is the population of Lima?", "get_population", {"city": "Lima"}),
    Single("How much does a melon cost?", "get_price", {"item": "melon"}),
    Single("What is the price of bread?", "get_price", {"item": "bread"}),
    Single("How many pears are in stock?", "get_stock", {"item": "pear"}),
    Single("How many units of coffee do we have in stock?", "get_stock", {"item": "coffee"}),
    Single(
        "Convert 20 Celsius to Fahrenheit.",
        "convert_units",
        {"value": 20, "from_unit": "celsius", "to_unit": "fahrenheit"},
    ),
    Single("Say hello in French.", None),
    Single("Write a haiku about autumn.", None),
    Single("What is the capital of Italy?", None),
    Single("Thank you, that is all.", None),
    Single("Explain in one sentence what a tool call is.", None),
]
SINGLE = [Single(s.prompt, s.tool, s.args, "report" if i % 2 else "dev") for i, s in enumerate(_SINGLE)]
