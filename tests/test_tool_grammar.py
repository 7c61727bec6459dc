"""The lazy grammar for a tool call written as bare JSON (native/tool_grammar.cpp), on the
real default model: the demo's second turn, where qwen2.5-coder-0.5b writes its call as
bare JSON and, unconstrained, keeps writing calls until the token limit."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import pyshim
from pyshim.cli import DEMO_SYSTEM, DEMO_TASK
from pyshim.demo_tools import DEMO_TOOLS
from pyshim.tools import as_tool

QWEN = "qwen2.5-coder-0.5b-instruct"

SCHEMAS = [as_tool(t).schema for t in DEMO_TOOLS]
SECOND_TURN = [
    {"role": "system", "content": DEMO_SYSTEM},
    {"role": "user", "content": DEMO_TASK},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "12.5 * 3"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "37.5"},
]


def test_bare_json_call_is_one_valid_call_and_the_output_ends(qwen: pyshim.Model) -> None:
    qwen.reset()
    r = qwen.generate(SECOND_TURN, SCHEMAS, max_tokens=100)
    assert r["finish_reason"] == "tool_calls", r
    [call] = r["tool_calls"]
    assert call["function"]["name"] == "convert_units"
    assert json.loads(call["function"]["arguments"]) == {"value": 37.5, "from_unit": "km", "to_unit": "miles"}
    assert r["n_decoded"] < 60  # it stopped where the JSON ended
    # Without the grammar (recovery off turns it off too) the same model runs on.
    qwen.reset()
    off = qwen.generate(SECOND_TURN, SCHEMAS, max_tokens=60, tool_call_recovery=False)
    assert off["finish_reason"] == "length" and off["content"].count('{"name"') >= 2


def test_an_answer_that_is_not_a_call_stays_free(qwen: pyshim.Model) -> None:
    """Text first, then no constraint: the grammar waits for a call at the start."""
    qwen.reset()
    r = qwen.generate(
        [{"role": "user", "content": "Say hello in French, in one short sentence."}], SCHEMAS, max_tokens=30
    )
    assert r["tool_calls"] == [] and r["invalid_tool_calls"] == []
    assert r["content"] and not r["content"].lstrip().startswith("{")


# Four grammars: a forced call (any tool), a named tool, the lazy grammar of tool_choice auto,
# and a json_schema response.
GRAMMAR_VARIANTS: list[dict[str, Any]] = [
    {"tool_choice": "required"},
    {"tool_choice": {"type": "function", "function": {"name": "convert_units"}}},
    {"tool_choice": "auto"},
    {
        "tool_choice": "none",
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "count",
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            },
        },
    },
]


def _answer(r: dict[str, Any]) -> tuple[Any, ...]:
    """What the model wrote (a call's id is random)."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in r.get("tool_calls") or []]
    return r["content"], calls, r["n_decoded"], r["finish_reason"]


def test_a_grammar_cloned_from_the_handle_cache_constrains_as_a_fresh_parse() -> None:
    """A handle parses each grammar once and clones it for later calls
    (native/patches/common-sampling-grammar-cache.patch). On a new handle, four grammars are
    each parsed by their first call; the same four calls again take clones and must answer
    exactly as the parsed ones did. Each call starts from an empty cache (reset), so prefix
    reuse plays no part."""
    prompt = [{"role": "user", "content": "Say hello to Ada in five words."}]
    with pyshim.Model(QWEN, n_ctx=4096, temperature=0) as m:

        def answer(variant: dict[str, Any]) -> tuple[Any, ...]:
            m.reset()
            return _answer(m.generate(prompt, SCHEMAS, max_tokens=40, **variant))

        parsed = [answer(v) for v in GRAMMAR_VARIANTS]
        assert len(set(map(str, parsed))) >= 3  # different answers, so that a mix-up shows (auto calls too)
        for variant, expected in zip(GRAMMAR_VARIANTS, parsed, strict=True):
            assert answer(variant) == expected, variant


def test_the_forced_call_grammar_follows_the_tools_of_each_call(qwen: pyshim.Model) -> None:
    """Forced-call grammars are kept per exact tools JSON (native/tool_grammar.cpp): the same
    question forced to a call with one tool set, then another, then the first again, calls a tool
    of each call's own set, with arguments of that tool's schema."""
    by_name = {s["function"]["name"]: s for s in SCHEMAS}
    question = [{"role": "user", "content": "Convert 37.5 km to miles, then compute 2 + 2."}]
    for names in (["calculator"], ["convert_units"], ["calculator"]):
        tools = [by_name[n] for n in names]
        qwen.reset()
        r = qwen.generate(question, tools, max_tokens=60, temperature=0, tool_choice="required")
        [call] = r["tool_calls"]
        assert call["function"]["name"] in names, (names, call)
        required = set(by_name[call["function"]["name"]]["function"]["parameters"].get("required", []))
        assert required <= set(json.loads(call["function"]["arguments"]))


# The second link of a chain (issue 56): country_of(Kyoto) returned Japan, and the model, free,
# calls country_of(Kyoto) again.
KYOTO = [
    {"role": "user", "content": "Which country is Kyoto in, and what is the population of that country's capital?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "country_of", "arguments": '{"city": "Kyoto"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "country_of", "content": "Japan"},
]


def _place_tool(name: str, slot: str, what: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"Get the {what}.",
            "parameters": {"type": "object", "properties": {slot: {"type": "string"}}, "required": [slot]},
        },
    }


PLACES = [
    _place_tool("country_of", "city", "country a city is in"),
    _place_tool("capital_of", "country", "capital city of a country"),
    _place_tool("get_population", "city", "population of a city"),
]


def _narrowed(tools: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    out = json.loads(json.dumps(tools))
    for t in out:
        for prop in t["function"]["parameters"]["properties"].values():
            prop["enum"] = names
    return out


def _calls(r: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in r.get("tool_calls") or []]


def test_grammar_tools_narrow_the_call_and_leave_the_prompt_alone(qwen: pyshim.Model) -> None:
    """The ``grammar_tools`` option (ABI 1.14): the call's grammar is built from narrowed copies of
    the tools while the prompt shows the tools as given. Free, the model repeats the request's name
    (Kyoto); with the slots narrowed to the name the lookup found, the call's argument is Japan,
    whether the template's lazy grammar catches the call (tool_choice auto) or the forced one does;
    and with the grammar narrowed to one tool, the forced call is that tool. The rendered prompt
    (text and tokens) is the same with and without, so the cached prefix is too."""
    narrowed = _narrowed(PLACES, ["Japan"])
    qwen.reset()
    assert _calls(qwen.generate(KYOTO, PLACES, max_tokens=60)) == [("country_of", {"city": "Kyoto"})]
    for choice in ("auto", "required"):
        r = qwen.generate(KYOTO, PLACES, max_tokens=60, tool_choice=choice, grammar_tools=narrowed)
        assert [args for _, args in _calls(r)] in ([{"city": "Japan"}], [{"country": "Japan"}]), (choice, r)
    only = qwen.generate(KYOTO, PLACES, max_tokens=60, tool_choice="required", grammar_tools=narrowed[1:2])
    assert _calls(only) == [("capital_of", {"country": "Japan"})]
    hook = {"prepare_only": True}
    free = qwen.generate(KYOTO, PLACES, max_tokens=1, _test=hook)["prepared"]
    held = qwen.generate(KYOTO, PLACES, max_tokens=1, grammar_tools=narrowed, _test=hook)["prepared"]
    assert (held["prompt"], held["tokens"]) == (free["prompt"], free["tokens"])
    assert held["grammar_triggers"] == free["grammar_triggers"]
    # Each alternative's slots (the template's <tool_call> grammar, tpl-*, and the bare-JSON one,
    # bare-*) take Japan alone; free, they take any string.
    slots = dict(re.findall(r"^(\S+-(?:city|country)) ::= (.*)$", held["grammar"], re.MULTILINE))
    assert {name.split("-")[0] for name in slots} == {"tpl", "bare"}, held["grammar"]
    assert set(slots.values()) == {'("\\"Japan\\"")'}, slots
    assert "Japan" not in free["grammar"]


@pytest.mark.parametrize(
    ("grammar_tools", "extra", "says"),
    [
        ([], {}, "non-empty array of tools"),
        ("capital_of", {}, "non-empty array of tools"),
        ([_place_tool("get_weather", "city", "weather")], {}, 'grammar_tools[0] names "get_weather"'),
        ([{"type": "function", "function": {"name": "capital_of", "parameters": "x"}}], {}, "[0].function.parameters"),
        (PLACES[1:2], {"tool_choice": {"type": "function", "function": {"name": "country_of"}}}, "not among the"),
    ],
)
def test_grammar_tools_that_do_not_fit_the_tools_are_refused(
    qwen: pyshim.Model, grammar_tools: Any, extra: dict[str, Any], says: str
) -> None:
    with pytest.raises(pyshim.InvalidRequest, match=re.escape(says)):
        qwen.generate(KYOTO, PLACES, max_tokens=1, grammar_tools=grammar_tools, **extra)
    assert _calls(qwen.generate(KYOTO, PLACES, max_tokens=60)) == [("country_of", {"city": "Kyoto"})]
