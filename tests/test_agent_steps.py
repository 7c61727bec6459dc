"""A planned step's first call is one that serves the step (issue 56): the tools its words point
to, and, when the first turn does not serve it, the step once more with that tool out of reach.

The bookkeeping runs on a scripted stand-in (tests/scripted.py) replaying the turns
qwen2.5-coder-0.5b took on the benchmark's development half; what it changes on the agent tasks
is measured by ``bench.agent_tasks`` (the development half decided it, the report half is
reported, never tuned on).
"""

from __future__ import annotations

from scripted import Scripted

from bench.agent_task_set import TOOLS  # the benchmark's own tools: the turns replayed are its tasks'
from pyshim import Agent

CAIRO = "Check the temperature in Cairo. If it is above 25 degrees, convert it to Fahrenheit."
CAIRO_PLAN = "Check the temperature in Cairo.\nIf it is above 25 degrees, convert it to Fahrenheit."
WEATHER = ("get_weather", '{"city": "Cairo"}')
CONVERT_31 = ("convert_units", '{"value": 31, "from_unit": "celsius", "to_unit": "fahrenheit"}')


def _names(schemas: list[dict[str, object]]) -> list[str]:
    return [s["function"]["name"] for s in schemas]  # type: ignore[index]


def test_a_steps_first_call_is_one_of_the_tools_its_words_point_to() -> None:
    """ "Convert 50 lb to kg.": the model called the calculator; the step's grammar now offers
    convert_units alone, and "compute that number divided by 2" the calculator alone (arithmetic
    asked for, a tool that does arithmetic), while the prompt still shows every tool."""
    model = Scripted(
        [
            {"content": "Convert 50 lb to kg.\nThen compute that number divided by 2."},
            {"calls": [("convert_units", '{"value": 50, "from_unit": "pounds", "to_unit": "kg"}')]},
            {"calls": [("convert_units", '{"value": 50, "from_unit": "pounds", "to_unit": "kg"}')]},
            {"calls": [("calculator", '{"expression": "22.6796 / 2"}')]},
            {"calls": [("calculator", '{"expression": "22.6796 / 2"}')]},
            {"content": "none"},
            {"content": "22.6796 kg; half is 11.3398."},
        ]
    )
    ask = "Convert 50 lb to kg, then compute that number divided by 2."
    result = Agent(model, TOOLS, plan=True).run(ask)  # type: ignore[arg-type]
    assert result.stopped == "answer" and len(result.tools_ran) == 2
    assert _names(model.schemas[1]) == ["convert_units"] and len(model.offered[1]) == len(TOOLS)
    assert _names(model.schemas[2]) == model.offered[2]  # the turn after a step's calls: every tool
    assert _names(model.schemas[3]) == ["calculator"]


def test_a_step_that_repeats_an_earlier_lookup_is_taken_again_without_that_tool() -> None:
    """ "Convert that temperature to Fahrenheit": the model looked Cairo up again, which ended
    the step; now the step is asked once more with get_weather out of its grammar. A repeat that
    takes from the step ("Compute 17 * 23.", done by the step before) ends it. (The step was first
    "If it is above 25 degrees, convert it to Fahrenheit"; a condition is now decided before the
    model sees the step, test_agent_families.py.)"""
    model = Scripted(
        [
            {"content": "Check the temperature in Cairo.\nConvert that temperature to Fahrenheit."},
            {"calls": [WEATHER]},
            {"calls": [WEATHER]},  # the repeat ends step 1
            {"calls": [WEATHER]},  # step 2: the lookup again
            {"calls": [CONVERT_31]},
            {"calls": [CONVERT_31]},
            {"content": "none"},
            {"content": "It is 31 degrees, 55.8 Fahrenheit."},
        ]
    )
    result = Agent(model, TOOLS, plan=True).run("Check the temperature in Cairo and convert it to Fahrenheit.")  # type: ignore[arg-type]
    assert [c["function"]["name"] for c in result.tool_calls] == ["get_weather", "convert_units"]
    assert "get_weather" in _names(model.schemas[3]) and "get_weather" not in _names(model.schemas[4])
    assert model.seen[4] == model.seen[3]  # the same step again: nothing added to the transcript
    model = Scripted(
        [
            {"content": "Compute 144 / 12.\nCompute 17 * 23."},
            {"calls": [("calculator", '{"expression": "144 / 12"}')]},
            {"calls": [("calculator", '{"expression": "17 * 23"}')]},  # step 1 runs on into step 2
            {"calls": [("calculator", '{"expression": "17 * 23"}')]},  # the repeat ends step 1
            {"calls": [("calculator", '{"expression": "17 * 23"}')]},  # step 2: served already
            {"content": "none"},
            {"content": "12 and 391."},
        ]
    )
    result = Agent(model, TOOLS, plan=True).run("Compute 144 / 12 and 17 * 23.")  # type: ignore[arg-type]
    assert result.stopped == "answer" and len(result.tools_ran) == 2


def test_a_step_naming_a_city_is_not_served_by_a_call_that_takes_neither_it_nor_a_result() -> None:
    """ "Check the temperature in Cairo.": the model called convert_units(25, ...) with the 25 of
    the request's condition; the step is asked once more with convert_units out of reach. A
    call that takes a result is the step's (a later link of a chain)."""
    model = Scripted(
        [
            {"content": CAIRO_PLAN},
            {"calls": [("convert_units", '{"value": 25, "from_unit": "celsius", "to_unit": "fahrenheit"}')]},
            {"calls": [WEATHER]},
            {"calls": [WEATHER]},
            {"calls": [CONVERT_31]},
            {"calls": [CONVERT_31]},
            {"content": "none"},
            {"content": "It is 31 degrees, 55.8 Fahrenheit."},
        ]
    )
    result = Agent(model, TOOLS, plan=True).run(CAIRO)  # type: ignore[arg-type]
    assert [c["function"]["name"] for c in result.tool_calls] == ["get_weather", "convert_units"]
    assert "convert_units" not in _names(model.schemas[2])
    assert [f.name for f in result.failures] == []  # the barred call was never run


def test_a_step_that_feeds_its_own_output_back_ends_unless_it_asks_for_a_chain() -> None:
    """ "Then compute that number divided by 2.": after 10004000 / 2 the model went on with
    5002000.0 / 2, then 2501000.0 / 2, under the required tool choice; the step now ends at the
    first such call (not run). A plan line that asks for a chain is two steps, and the second
    takes what the first found."""
    model = Scripted(
        [
            {"content": "What is the population of Lima?\nThen compute that number divided by 2."},
            {"calls": [("get_population", '{"city": "Lima"}')]},
            {"calls": [("get_population", '{"city": "Lima"}')]},
            {"calls": [("calculator", '{"expression": "10004000 / 2"}')]},
            {"calls": [("calculator", '{"expression": "5002000.0 / 2"}')]},  # runs on
            {"content": "none"},
            {"content": "Lima has 10004000 people; half is 5002000."},
        ]
    )
    ask = "What is the population of Lima? Then compute that number divided by 2."
    result = Agent(model, TOOLS, plan=True).run(ask)  # type: ignore[arg-type]
    assert [m["content"] for m in result.tools_ran] == ["10004000", "5002000.0"]
    model = Scripted(
        [
            {"content": "Divide 40 by 2, then divide that by 2."},  # one line, two steps (parse_steps)
            {"calls": [("calculator", '{"expression": "40 / 2"}')]},
            {"calls": [("calculator", '{"expression": "20.0 / 2"}')]},  # runs on: step 1 ends
            {"calls": [("calculator", '{"expression": "20.0 / 2"}')]},  # step 2 takes it
            {"calls": [("calculator", '{"expression": "20.0 / 2"}')]},
            {"content": "none"},
            {"content": "20, then 10."},
        ]
    )
    result = Agent(model, TOOLS, plan=True).run("Divide 40 by 2, then divide that by 2.")  # type: ignore[arg-type]
    assert [m["content"] for m in result.tools_ran] == ["20.0", "10.0"]
    assert model.seen[3][-1]["content"].endswith("Divide that by 2.")


def test_a_call_written_out_to_the_token_limit_is_taken_again_with_another_tool() -> None:
    """ "Use the calculator to multiply it by the number of melons in stock.": the model wrote
    '{"name": "calculator", "arguments": {"expression": "2.8 * 1000000...' to its token limit
    before it knew the stock; the step is asked once more with the calculator out of reach."""

    model = Scripted(
        [
            {"content": "Look up the price of a melon.\nUse the calculator to multiply it by the melons in stock."},
            {"calls": [("get_price", '{"item": "melon"}')]},
            {"calls": [("get_price", '{"item": "melon"}')]},
            {"content": '{"name": "calculator", "arguments": {"expression": "2.8 * 1000000000000'},  # cut
            {"calls": [("get_stock", '{"item": "melon"}')]},
            {"calls": [("calculator", '{"expression": "2.8 * 18"}')]},
            {"calls": [("calculator", '{"expression": "2.8 * 18"}')]},
            {"content": "none"},
            {"content": "18 melons at 2.8 EUR: 50.4 EUR."},
        ]
    )
    ask = "Look up the price of a melon, then use the calculator to multiply it by the number of melons in stock."
    result = Agent(model, TOOLS, plan=True).run(ask)  # type: ignore[arg-type]
    assert [m["content"] for m in result.tools_ran] == ["2.8 EUR", "18", "50.4"]
    assert "calculator" in _names(model.schemas[3]) and "calculator" not in _names(model.schemas[4])


def test_a_step_done_in_text_that_wrote_a_call_out_is_noted_in_words() -> None:
    """ "Give me a short motto for a bakery.": tools off, the model wrote '{"name": "Bakery Motto",
    "arguments": {"motto": ...}}' and the answer turn copied the JSON; the answer turn now sees the
    call's name and the text of its arguments."""
    motto = '{"name": "Bakery Motto", "arguments": {"motto": "Fresh every morning."}}'
    model = Scripted(
        [
            {"content": "Give me a short motto for a bakery.\nWhat is the population of Lima?"},
            {"calls": [("get_weather", '{"city": "Paris"}')]},  # nothing from the run: not run
            {"content": motto},  # the step again, tools off
            {"calls": [("get_population", '{"city": "Lima"}')]},
            {"calls": [("get_population", '{"city": "Lima"}')]},
            {"content": "none"},
            {"content": "Fresh every morning. Lima has 10004000 people."},
        ]
    )
    ask = "Give me a short motto for a bakery, and then the population of Lima."
    result = Agent(model, TOOLS, plan=True).run(ask)  # type: ignore[arg-type]
    asked = model.seen[-1][-1]["content"]
    assert "Give me a short motto for a bakery. -> Bakery Motto: Fresh every morning." in asked and motto not in asked
    assert result.stopped == "answer"
