"""The lazy grammar for a tool call written as bare JSON (native/tool_grammar.cpp), on the
real default model: the demo's second turn, where qwen2.5-coder-0.5b writes its call as
bare JSON and, unconstrained, keeps writing calls until the token limit."""

from __future__ import annotations

import json
from typing import Any

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
