"""What the planner got wrong on a fifth fresh batch of development tasks (issue 56): 22 tasks
("fifth" in bench/agent_tasks.json, every family in the report half's proportions) written in new
words without reading the report half, run once before anything was changed (10/22).

The three batches before were each fixed by rules for their own phrasings, and the report half
did not move; the changes here are meant to hold whatever the words:

- What the request gives is used: a figure the asker states that no call took asks for
  arithmetic ("if we sell 5 loaves a day", "over 3 days", "Triple the temperature"), unless a
  tool takes it as a quantity ("10 kg").
- A quotient by the request's figure (a rate, a split, a half, "in thousands") divides what was
  found: offered both ways, the model wrote "5 / 30" for the days 30 loaves last at 5 a day.
- The check's rules run beside the model's check, not only where it says "none": "By how much?"
  after only Paris's temperature does not look up Lyon's, the rule's step for Lyon follows it.
- Once the steps run out the rules read the request again (a round before the check where only
  failed calls ran: "Egypt's capital" as get_population(Egypt); a round after it, for a link its
  steps made possible: get_weather(Japan) failed before capital_of(Japan) found Tokyo).
- What the asker does ("if I spread it over 3 days") is no condition; a condition said another
  way than "if" ("Should it exceed 200, ...") is decided like one.
- A call written as text for the whole request is asked again once as a call (the tool it wrote
  on figures from nowhere not offered), as an answer from memory is.

The bookkeeping runs on a scripted stand-in replaying qwen2.5-coder-0.5b's turns; the quotient's
order runs on the real model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from scripted import Scripted, called

import pyshim
from bench.agent_task_set import TOOLS
from pyshim import Agent, chain, conditions, missed, planner
from pyshim.tools import function_schema

SCHEMAS = [function_schema(f) for f in TOOLS]
BREAD = "How many days would the bread in stock last if we sell 5 loaves a day?"
HIKE = "A hike is 15 miles long. How many km per day is that if I spread it over 3 days?"


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"function": {"name": name, "arguments": arguments}}


def test_a_figure_the_request_gives_is_used() -> None:
    stock = (_call("get_stock", '{"item": "bread"}'), "30")
    assert missed.unused_figures(BREAD, [stock], SCHEMAS) == [5.0]
    assert missed.unworked_steps(BREAD, [stock], SCHEMAS) == [
        planner.UNWORKED_STEP.format(tool="calculator", question=BREAD)
    ]
    converted = (_call("convert_units", '{"value": 15, "from_unit": "miles", "to_unit": "km"}'), "24.1402 km")
    assert missed.unused_figures(HIKE, [converted], SCHEMAS) == [3.0]
    assert missed.unused_figures("Triple the temperature of Tokyo.", [], SCHEMAS) == [3.0]
    weather = (_call("get_weather", '{"city": "Tokyo"}'), '{"city": "Tokyo", "temperature_c": 16}')
    triple = "Triple the temperature of Tokyo: what number do you get?"
    assert missed.unworked_steps(triple, [weather], SCHEMAS) == [
        planner.UNWORKED_STEP.format(tool="calculator", question=triple)
    ]
    # A quantity a tool takes, a count of the request's parts, a figure a call took: not left over.
    assert missed.unused_figures("Convert 10 kg to pounds.", [], SCHEMAS) == []
    assert missed.unused_figures("Two lookups: Peru's currency, and the capital of France.", [], SCHEMAS) == []
    worked = (_call("calculator", '{"expression": "30 / 5"}'), "6.0")
    assert missed.unworked_steps(BREAD, [stock, worked], SCHEMAS) == []


def test_what_the_asker_does_is_no_condition() -> None:
    assert not conditions.branches(HIKE)
    assert conditions.branches("If it is over 3 degrees, tell me the price of coffee.")
    assert not conditions.branches("If we share it over 4 days, how much is that a day?")


def test_a_condition_said_without_if_is_decided() -> None:
    ask = "How many bananas are there? Should it exceed 200, tell me Kyoto's population, and otherwise Bergen's."
    first, step = planner.parse_steps(ask, 6)  # the condition is a step of its own, whole
    assert first == "How many bananas are there?" and conditions.branches(ask)
    assert conditions.decide(step, [240.0]) == ("Tell me Kyoto's population.", "Bergen's.", True)
    assert conditions.decide("In case it is under 10, tell me the price of coffee.", [7.0]) == (
        "Tell me the price of coffee.",
        "",
        True,
    )


def test_a_quotient_by_the_requests_figure_divides_what_was_found() -> None:
    for text in (BREAD, HIKE, "Compute half of that number.", "Split the price of a melon between 4 friends."):
        assert chain.asked_operation(text) == "over", text
    assert chain.asked_operation("How many times bigger is Tokyo than Kyoto?") == "/"
    calc = next(s for s in SCHEMAS if s["function"]["name"] == "calculator")
    (held,) = chain.narrowed([calc], [], [30.0], [30.0, 5.0], "over")
    pattern = held["function"]["parameters"]["properties"]["expression"]["pattern"]
    assert re.fullmatch(pattern, "30 / 5") and not re.fullmatch(pattern, "5 / 30")
    (both,) = chain.narrowed([calc], [], [30.0], [30.0, 5.0], "/")
    assert re.fullmatch(both["function"]["parameters"]["properties"]["expression"]["pattern"], "5 / 30")


def test_the_quotient_is_written_the_right_way_on_the_real_model(qwen: pyshim.Model) -> None:
    """Offered both orders, the model divides the request's figure by the stock ("5 / 30", 0.17
    days); offered the stock first, "30 / 5"."""
    calc = next(s for s in SCHEMAS if s["function"]["name"] == "calculator")
    step = planner.UNWORKED_STEP.format(tool="calculator", question=BREAD)
    chat = [
        {"role": "user", "content": BREAD},
        called("c0", "get_stock", '{"item": "bread"}'),
        {"role": "tool", "tool_call_id": "c0", "name": "get_stock", "content": "30"},
        planner.step_message(step),
    ]
    expressions = []
    for operation in ("/", chain.asked_operation(step)):  # before, and now
        qwen.reset()
        held = chain.narrowed([calc], [], [30.0], [30.0, 5.0], operation)
        r = qwen.generate(chat, SCHEMAS, max_tokens=40, tool_choice="required", grammar_tools=held)
        (call,) = r["tool_calls"]
        expressions.append(json.loads(call["function"]["arguments"])["expression"].replace(" ", ""))
    assert expressions == ["5/30", "30/5"]


def test_the_rules_join_the_models_check() -> None:
    lyon = planner.UNTAKEN_STEP.format(tool="get_weather", subject="Lyon", like="Paris")
    worked = planner.UNWORKED_STEP.format(tool="calculator", question="Is Paris or Lyon warmer, and by how much?")
    assert missed.joined(["By how much?"], [lyon, worked], 6) == ["By how much?", lyon, worked]
    # A step of the model's that names the rule's subject, or asks for the arithmetic, does it.
    assert missed.joined(["Find the temperature in Lyon.", "Subtract the two."], [lyon, worked], 6) == [
        "Find the temperature in Lyon.",
        "Subtract the two.",
    ]
    # A chain's second link goes with its first.
    first = planner.RETRY_STEP.format(tool="capital_of", subject="Egypt")
    follow = planner.FOLLOW_STEP.format(tool="get_population")
    assert missed.joined(["Look up Egypt's capital."], [first, follow], 6) == ["Look up Egypt's capital."]
    assert missed.joined([], [first, follow], 6) == [first, follow]


def test_after_failed_calls_and_after_the_check_the_rules_read_the_request_again() -> None:
    """qwen2.5-coder-0.5b's turns for "Egypt's capital has how many residents?": the plan is
    the request; get_population(Egypt) fails; the check writes a claim ("... 2,500 residents."),
    which names Egypt and so stands for the rules' lookup of Egypt's capital. Once that step
    found nothing, the rules read the request again: capital_of for Egypt; once that found
    Cairo, again: the failed get_population for Cairo. Before, the run ended after the claim:
    "every tool call failed"."""
    ask = "Egypt's capital has how many residents?"
    model = Scripted(
        [
            {"content": ask},
            {"calls": [("get_population", '{"city": "Egypt"}')]},
            {"content": "I could not find it."},
            {"content": "Egypt's capital has 2,500 residents."},
            {"content": "Egypt's capital has 2,500 residents."},
            {"calls": [("capital_of", '{"country": "Egypt"}')]},
            {"content": "The capital of Egypt is Cairo."},
            {"calls": [("get_population", '{"city": "Cairo"}')]},
            {"content": "Cairo has 10230350 people."},
            {"content": "Cairo, the capital of Egypt, has 10230350 residents."},
        ]
    )
    events: list[dict[str, Any]] = []
    result = Agent(model, TOOLS, plan=True, on_event=events.append).run(ask)  # type: ignore[arg-type]
    assert [m["name"] for m in result.tools_ran] == ["get_population", "capital_of", "get_population"]
    assert result.stopped == "answer" and "10230350" in (result.content or "")
    plans = [e["steps"] for e in events if e["type"] == "plan"]
    assert plans[2:] == [["Call capital_of for Egypt."], ["Call get_population for Cairo."]]


def test_a_lookup_the_check_left_out_follows_its_steps() -> None:
    """qwen2.5-coder-0.5b's turns for "Is Paris or Lyon warmer, and by how much?": the plan is
    the request, one lookup ran (Paris), and the check answered "By how much?". Before, that was
    the only step: Lyon was never looked up and the answer made Paris warmer "by 18 degrees"."""
    ask = "Is Paris or Lyon warmer, and by how much?"
    model = Scripted(
        [
            {"content": ask},
            {"calls": [("get_weather", '{"city": "Paris"}')]},
            {"content": "It is 18 degrees in Paris."},
            {"content": "By how much?"},
            {"content": "I need both temperatures."},
            {"calls": [("get_weather", '{"city": "Lyon"}')]},
            {"content": "It is 20 degrees in Lyon."},
            {"content": "Lyon is warmer, by 2 degrees."},
        ]
    )
    events: list[dict[str, Any]] = []
    result = Agent(model, TOOLS, plan=True, on_event=events.append).run(ask)  # type: ignore[arg-type]
    assert [e["steps"] for e in events if e["type"] == "plan"][1] == [
        "By how much?",
        planner.UNTAKEN_STEP.format(tool="get_weather", subject="Lyon", like="Paris"),
    ]
    assert [c["function"]["arguments"] for c in result.tool_calls] == ['{"city": "Paris"}', '{"city": "Lyon"}']
    assert result.stopped == "answer" and (result.content or "").startswith("Lyon is warmer, by 2 degrees.")


def test_a_call_written_as_text_for_the_whole_request_is_asked_again_as_a_call() -> None:
    """qwen2.5-coder-0.5b's first turn for "Four coffees and a melon: what's the bill?" (a
    one-step plan) was the calculator's call written as text, on figures from nowhere. Before,
    that text was the run's last turn (``call_as_text``); now the request is asked again once with
    a call required, that tool not offered."""
    ask = "Four coffees and a melon: what's the bill?"
    written = '{"name": "calculator", "arguments": {"expression": "4 + 1.5 * 2.5"}}'
    model = Scripted(
        [
            {"content": ask},
            {"content": written},
            {"calls": [("get_price", '{"item": "coffee"}')]},
            {"calls": [("get_price", '{"item": "melon"}')]},
            {"content": "Coffee is 7.5 EUR and a melon 2.8 EUR."},
            {"content": "none"},
            {"calls": [("calculator", '{"expression": "4 * 7.5 + 2.8"}')]},
            {"content": "32.8"},
            {"content": "The bill is 32.8 EUR."},
        ]
    )
    result = Agent(model, TOOLS, plan=True).run(ask)  # type: ignore[arg-type]
    barred = [s["function"]["name"] for s in model.schemas[2]]
    assert model.options[2].get("tool_choice") == "required" and "calculator" not in barred
    assert [c["function"]["name"] for c in result.tool_calls] == ["get_price", "get_price", "calculator"]
    assert (result.stopped, result.content) == ("answer", "The bill is 32.8 EUR.")
