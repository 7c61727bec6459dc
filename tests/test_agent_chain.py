"""Chains by construction (issue 56, item 2): once a lookup has returned a name, a planned step's
first call may put in a free string slot only the found names and the request's untaken ones, in
its grammar (``grammar_tools``) while the tools it is shown stay as given.

The bookkeeping runs on a scripted stand-in (tests/scripted.py); the grammar on the real model is
tested in test_tool_grammar.py, and what it changes on the agent tasks is measured by
``bench.agent_tasks`` (the development half decided it; the report half is reported, never tuned on).
"""

from __future__ import annotations

from typing import Any

from scripted import Scripted, tool_call

from pyshim import Agent
from pyshim.chain import choices, narrowed

KYOTO = "Which country is Kyoto in, and what is the population of that country's capital?"


def country_of(city: str) -> str:
    """Get the country a city is in.

    Args:
        city: the city name.
    """
    return {"Kyoto": "Japan"}[city]


def capital_of(country: str) -> str:
    """Get the capital city of a country.

    Args:
        country: the country name.
    """
    return {"Japan": "Tokyo"}[country]


def get_population(city: str) -> str:
    """Get the population of a city.

    Args:
        city: the city name.
    """
    return {"Tokyo": "13960000"}[city]


def _tool(name: str, properties: dict[str, Any], description: str = "") -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def test_the_found_name_is_offered_and_the_request_name_a_call_took_is_not() -> None:
    found = [(tool_call("country_of", '{"city": "Kyoto"}'), "Japan")]
    assert choices(KYOTO, found) == ["Japan"]
    later = "What country is Lyon in, and what is the temperature in Oslo?"
    assert choices(later, [(tool_call("country_of", '{"city": "Lyon"}'), "France")]) == ["France", "Oslo"]


def test_figures_echoes_and_failures_are_not_names() -> None:
    weather = (tool_call("get_weather", '{"city": "Oslo"}'), '{"city": "Oslo", "temperature_c": 7}')
    price = (tool_call("get_price", '{"item": "pear"}'), "0.55 EUR")
    failed = (tool_call("country_of", '{"city": "Narnia"}'), "error: KeyError: unknown city")
    assert choices("Oslo and pears", [weather, price, failed]) == []


def test_only_free_string_slots_are_narrowed_and_the_input_is_left_alone() -> None:
    schemas = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "unit": {"type": "string", "enum": ["c", "f"]},
                        "n": {"type": "number"},
                    },
                },
            },
        }
    ]
    out = narrowed(schemas, ["Japan"])
    assert out is not None
    props = out[0]["function"]["parameters"]["properties"]
    assert props["city"]["enum"] == ["Japan"]
    assert props["unit"]["enum"] == ["c", "f"] and "enum" not in props["n"]
    assert "enum" not in schemas[0]["function"]["parameters"]["properties"]["city"]
    assert narrowed(schemas, []) is schemas


def test_a_planned_step_after_a_lookup_is_offered_the_found_name() -> None:
    model = Scripted(
        [
            {"content": "Which country is Kyoto in?\nWhat is the capital of that country?\nWhat is its population?"},
            {"calls": [("country_of", '{"city": "Kyoto"}')]},
            {"calls": [("country_of", '{"city": "Kyoto"}')]},  # the step's repeat ends it
            {"calls": [("capital_of", '{"country": "Japan"}')]},
            {"calls": [("capital_of", '{"country": "Japan"}')]},
            {"calls": [("get_population", '{"city": "Tokyo"}')]},
            {"calls": [("get_population", '{"city": "Tokyo"}')]},
            {"content": "none"},
            {"content": "Kyoto is in Japan; its capital Tokyo has 13960000 people."},
        ]
    )
    result = Agent(model, [country_of, capital_of, get_population], plan=True).run(KYOTO)  # type: ignore[arg-type]
    assert result.stopped == "answer"

    def slot(turn: int, tool: str, name: str) -> dict[str, Any]:
        (schema,) = [s for s in model.schemas[turn] if s["function"]["name"] == tool]
        return schema["function"]["parameters"]["properties"][name]

    assert "enum" not in slot(1, "capital_of", "country")  # nothing found yet: free
    assert slot(3, "capital_of", "country")["enum"] == ["Japan"]  # not "Kyoto": a call took it
    assert "enum" not in slot(4, "capital_of", "country")  # after its calls a step ends by a repeat: free
    assert slot(5, "get_population", "city")["enum"] == ["Japan", "Tokyo"]


def test_a_name_no_call_took_gets_a_step_when_the_check_finds_nothing_left() -> None:
    """qwen2.5-coder-0.5b planned "the population of Lyon, of Oslo and of Tokyo" as one step,
    looked up Lyon, repeated it and answered the check with "none": the names no call took, after
    one a call did take, become steps that name the call they mirror; a name before any taken one
    (no call to mirror) and a name a failed call took do not."""
    model = Scripted(
        [
            {"content": "What is the population of Lyon, of Oslo and of Tokyo?"},  # one step
            {"calls": [("get_population", '{"city": "Lyon"}')]},
            {"calls": [("get_population", '{"city": "Lyon"}')]},  # a repeat ends the step
            {"content": "none"},  # the check finds nothing left
            {"calls": [("get_population", '{"city": "Oslo"}')]},
            {"calls": [("get_population", '{"city": "Oslo"}')]},
            {"calls": [("get_population", '{"city": "Tokyo"}')]},
            {"calls": [("get_population", '{"city": "Tokyo"}')]},
            {"content": "Lyon 522000, Oslo 709037, Tokyo 13960000."},
        ]
    )

    def population(city: str) -> str:
        """Get the population of a city.

        Args:
            city: the city name.
        """
        return {"Lyon": "522000", "Oslo": "709037", "Tokyo": "13960000"}[city]

    population.__name__ = "get_population"
    events: list[dict[str, Any]] = []
    question = "Dear Ann, what is the population of Lyon, of Oslo and of Tokyo?"
    result = Agent(model, [population], plan=True, on_event=events.append).run(question)  # type: ignore[arg-type]
    assert result.stopped == "answer"
    revised = [e["steps"] for e in events if e["type"] == "plan" and e.get("revised")]
    assert revised == [["Call get_population for Oslo, as for Lyon.", "Call get_population for Tokyo, as for Lyon."]]
    assert [c["function"]["arguments"] for c in result.tool_calls] == [
        '{"city": "Lyon"}', '{"city": "Oslo"}', '{"city": "Tokyo"}'
    ]  # fmt: skip


def test_untaken_steps_mirror_a_call_that_took_an_earlier_name() -> None:
    from pyshim import planner

    found = [({"function": {"name": "get_population", "arguments": '{"city": "Lyon"}'}}, "522000")]
    assert planner.untaken_steps("How many live in Lyon and in Oslo?", found, 6) == [
        "Call get_population for Oslo, as for Lyon."
    ]
    failed = [({"function": {"name": "get_population", "arguments": '{"city": "Oslo"}'}}, "error: KeyError")]
    assert planner.untaken_steps("How many live in Lyon and in Oslo?", failed, 6) == []  # Lyon is before
    assert planner.untaken_steps("How many live in Lyon and in Oslo?", [], 6) == []


def test_a_failed_link_is_retried_with_the_name_a_later_lookup_returned() -> None:
    """qwen2.5-coder-0.5b took "the currency of the country whose capital is Cairo" in the wrong
    order: currency_of(Cairo) failed, country_of(Cairo) returned Egypt, and the check said "none".
    The failed tool gets a step for the found name; not once it succeeded, and not for a name a
    call already took."""
    from pyshim.chain import retry_steps

    failed = (tool_call("currency_of", '{"country": "Cairo"}'), "error: KeyError: unknown country 'Cairo'")
    found = (tool_call("country_of", '{"city": "Cairo"}'), "Egypt")
    assert retry_steps([failed, found]) == ["Call currency_of for Egypt."]
    assert retry_steps([found, failed]) == []  # nothing found after the failure
    done = (tool_call("currency_of", '{"country": "Egypt"}'), "Egyptian pound")
    assert retry_steps([failed, found, done]) == []  # the tool succeeded
    echo = (tool_call("get_weather", '{"city": "Cairo"}'), '{"city": "Cairo", "temperature_c": 31}')
    assert retry_steps([failed, echo]) == []  # an echo of its own argument is no new name


def test_a_step_that_points_back_takes_a_figure_a_result_returned() -> None:
    """ "Compute 19 * 21, then convert that many km to miles": told "Convert that many km to
    miles.", the model wrote 19 (from the request); the number slot of a step that speaks of what
    was found is narrowed to the figures results returned (not an echo of a call's own argument)."""
    from pyshim.chain import figures

    product = (tool_call("calculator", '{"expression": "19 * 21"}'), "399.0")
    weather = (tool_call("get_weather", '{"city": "Cairo"}'), '{"city": "Cairo", "temperature_c": 31}')
    converted = (tool_call("convert_units", '{"value": 31}'), "87.8 fahrenheit")
    echo = (tool_call("convert_units", '{"value": 5}'), "5")
    assert figures([product, weather, converted, echo]) == [399.0, 31.0, 87.8]
    slots = {"value": {"type": "number"}, "count": {"type": "integer"}, "unit": {"type": "string"}}
    tool = _tool("convert_units", slots)
    (out,) = narrowed([tool], [], [399.0, 87.8])  # type: ignore[misc]
    props = out["function"]["parameters"]["properties"]
    assert props["value"]["enum"] == [399.0, 87.8] and props["count"]["enum"] == [399]
    assert "enum" not in props["unit"] and "enum" not in tool["function"]["parameters"]["properties"]["value"]


def test_only_a_step_that_points_back_has_its_number_slots_narrowed() -> None:
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: the expression.
        """
        return "399.0"

    def convert_units(value: float, unit: str) -> str:
        """Convert a quantity between units of length.

        Args:
            value: the quantity.
            unit: the unit wanted.
        """
        return "247.927"

    model = Scripted(
        [
            {"content": "Compute 19 * 21.\nConvert that many km to miles."},
            {"calls": [("calculator", '{"expression": "19 * 21"}')]},
            {"calls": [("calculator", '{"expression": "19 * 21"}')]},
            {"calls": [("convert_units", '{"value": 399.0, "unit": "miles"}')]},
            {"calls": [("convert_units", '{"value": 399.0, "unit": "miles"}')]},
            {"content": "none"},
            {"content": "399, or 247.927 miles."},
        ]
    )
    ask = "Compute 19 * 21, then convert that many km to miles."
    Agent(model, [calculator, convert_units]).run(ask)  # type: ignore[arg-type]
    (tool,) = model.schemas[3]
    assert tool["function"]["parameters"]["properties"]["value"]["enum"] == [399.0]
    assert "enum" not in str(model.schemas[1]) and "enum" not in str(model.schemas[2])  # before a result; a later turn


def test_the_operation_a_step_asks_for_in_words_shapes_its_expression() -> None:
    """Seen on the development half: "how much warmer Lima is" after 13 and 22 were found came as
    calculator("13 + 22"); "How much bigger is Tokyo than Paris" as "2102650 - 13960000"; the
    average of 18 and 20 as "((20 + 18) * 20) / 20"; a price times a stock as "120 * 120". Where a
    step names one operation, its expression slot allows only that operation, each figure once, a
    difference larger first and a mean over the count."""
    import re

    from pyshim.chain import asked_operation

    assert asked_operation("Tell me how much warmer Lima is.") == "-"
    assert asked_operation("What is the average temperature of Paris and Lyon?") == "mean"
    assert asked_operation("Multiply it by the number of apples in stock.") == "*"
    assert asked_operation("Compute half of that number.") == "over"
    assert asked_operation("What is the combined population of Lyon and Bergen?") == "+"
    for free in ("Square that number.", "Compute the total cost of 4 of them.", "Add 3, then divide by 2."):
        assert asked_operation(free) is None, free
    calc = _tool("calculator", {"expression": {"type": "string"}}, "Evaluate an arithmetic expression.")

    def pattern(found: list[float], stated: list[float], operation: str | None) -> str:
        (out,) = narrowed([calc], [], found, found + stated, operation)  # type: ignore[misc]
        return str(out["function"]["parameters"]["properties"]["expression"]["pattern"])

    cases = [
        ([13.0, 22.0], [], "-", ["22 - 13", "(22.0 - 13)"], ["13 + 22", "13 - 22", "((22 - 13)", "22 -   13"]),
        ([13960000.0, 2102650.0], [], "-", ["13960000 - 2102650"], ["2102650 - 13960000"]),
        ([18.0, 20.0], [], "mean", ["(20 + 18) / 2", "(18+20)/2.0"], ["((20 + 18) * 20) / 20", "20 + 18"]),
        ([0.4, 120.0], [], "*", ["120 * 0.4", "0.4*120"], ["120 * 120", "120 + 0.4"]),
        ([75.0], [2.0], "/", ["75 / 2"], ["75 / 75", "75 * 2"]),
        ([75.0], [2.0], None, ["75 / 2", "75 * 2 - 75"], ["76 / 2"]),  # no operation named: any
    ]
    for found, said, operation, right, wrong in cases:
        p = pattern(found, said, operation)
        assert all(re.match(p, e) for e in right), (operation, right)
        assert not any(re.match(p, e) for e in wrong), (operation, wrong)


def test_a_conversion_of_a_figure_found_is_offered_the_units_named_by_the_step_and_its_finder() -> None:
    """ "Get the temperature in Lima and convert it to Fahrenheit": the model converted 22 *km* to
    Fahrenheit (walking the unit enum from its first value). get_weather says its figure is in
    degrees Celsius; with the step's Fahrenheit, the unit slots offer those two. One unit named
    narrows nothing."""
    from pyshim.chain import units_named

    units = ["km", "miles", "kg", "pounds", "celsius", "fahrenheit"]
    slots = {"value": {"type": "number"}, "from_unit": {"enum": units}, "to_unit": {"enum": units}}
    tool = _tool("convert_units", slots)
    said = "Convert it to Fahrenheit.\nGet the current temperature in a city, in degrees Celsius."
    (out,) = units_named([tool], said)  # type: ignore[misc]
    props = out["function"]["parameters"]["properties"]
    assert props["from_unit"]["enum"] == props["to_unit"]["enum"] == ["celsius", "fahrenheit"]
    assert tool["function"]["parameters"]["properties"]["from_unit"]["enum"] == units  # the input is left alone
    assert units_named([tool], "Convert it to kg.") == [tool]
