"""The lazy grammar for a tool call written as bare JSON (native/tool_grammar.cpp), on the
real default model: the demo's second turn, where qwen2.5-coder-0.5b writes its call as
bare JSON and, unconstrained, keeps writing calls until the token limit."""

from __future__ import annotations

import json

import pyshim
from pyshim.cli import DEMO_SYSTEM, DEMO_TASK
from pyshim.demo_tools import DEMO_TOOLS
from pyshim.tools import as_tool

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
