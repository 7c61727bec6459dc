"""Tool-call recovery in the native library: JSON calls written as text become tool_calls;
prose and code that merely mention a tool stay text. The text is injected through the
library's test hook, so each case checks the real parsing path on exact input."""

from __future__ import annotations

import json

import pytest
from conftest import WEATHER_TOOL, user

import pyshim

CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'

CONVERTED = [
    CALL,
    f"```json\n{CALL}\n```",
    f"```\n{CALL}\n```",
    f"  \n{CALL}\n\n",
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '{"type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}',
    f"[{CALL}, {CALL}]",
    f"{CALL}\n{CALL}",
    f"{CALL},\n{CALL}",
]

LEFT_ALONE = [
    "The weather in Paris is sunny.",
    f"I would call get_weather like this: {CALL}",
    "```python\nget_weather(city='Paris')\n```",
    f"```json\n{CALL}\n```\nThat is how you would call it.",
    '{"name": "get_time", "arguments": {"city": "Paris"}}',  # not an offered tool
    '{"name": "get_weather"}',  # no arguments object
    '{"name": "get_weather", "arguments": [1, 2]}',
    '{"city": "Paris"}',
    '{"name": "get_weather", "arguments": {"city": "Paris"}',  # truncated
    f"[{CALL}, 42]",
    f", {CALL}",
    f"{CALL} and {CALL}",
]


def canned(m: pyshim.Model, output: str, tools=(WEATHER_TOOL,), **options) -> dict:
    return m.generate(user("weather?"), list(tools) or None, max_tokens=4, _test={"output": output}, **options)


@pytest.mark.parametrize("output", CONVERTED)
def test_json_calls_become_tool_calls(smol: pyshim.Model, output: str) -> None:
    r = canned(smol, output)
    assert r["finish_reason"] == "tool_calls", r
    assert r["content"] is None
    assert r["tool_calls"]
    for call in r["tool_calls"]:
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
        assert call["id"].startswith("call_")
    assert len({c["id"] for c in r["tool_calls"]}) == len(r["tool_calls"])


@pytest.mark.parametrize("output", LEFT_ALONE)
def test_prose_and_code_stay_text(smol: pyshim.Model, output: str) -> None:
    r = canned(smol, output)
    assert r["tool_calls"] == [] and r["finish_reason"] == "stop"
    assert r["content"] == output


def test_recovery_can_be_turned_off(smol: pyshim.Model) -> None:
    assert canned(smol, CALL, tool_call_recovery=False)["tool_calls"] == []
    assert canned(smol, CALL, tools=())["tool_calls"] == []  # no tools offered, nothing to call
    assert canned(smol, CALL, tool_choice="none")["tool_calls"] == []


def test_real_model_fenced_call_is_recovered(qwen: pyshim.Model) -> None:
    """qwen2.5-coder-0.5b writes this call as JSON text in content, without its template's
    <tool_call> tags (FACTS.md); recovery, not the template's own parser, makes it a call."""
    ask = user("What is the weather in Paris?")
    qwen.reset()
    off = qwen.generate(ask, [WEATHER_TOOL], max_tokens=80, tool_call_recovery=False)
    # unrecovered, the native parser finds no call: the text is what the peers return
    assert off["tool_calls"] == [] and off["finish_reason"] == "stop", off
    assert "get_weather" in off["content"] and "<tool_call>" not in off["content"], off["content"]
    qwen.reset()  # the same state, so greedy decoding writes the same text again
    r = qwen.generate(ask, [WEATHER_TOOL], max_tokens=80)
    assert r["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in r["tool_calls"]] == ["get_weather"]
    assert json.loads(r["tool_calls"][0]["function"]["arguments"])["city"] == "Paris"

    # and that very text, fed back through the parsing path, is a call only with recovery on
    def calls(res: dict) -> list[tuple[str, str]]:
        return [(c["function"]["name"], c["function"]["arguments"]) for c in res["tool_calls"]]

    assert calls(canned(qwen, off["content"])) == calls(r)
    assert canned(qwen, off["content"], tool_call_recovery=False)["tool_calls"] == []


LONDON = '{"name": "get_weather", "arguments": {"city": "London"}}'


@pytest.mark.parametrize(
    "output",
    [
        f'{CALL}\n{LONDON}\n{{"name": "get_weather", "argu',  # one call per line, the last cut off
        f'[{CALL}, {LONDON}, {{"name": "get_w',  # a list whose closing bracket never came
        f'```json\n{CALL}\n{LONDON}\n{{"name"',  # inside a fence that never closed
        f"{CALL}\n{LONDON}\n{CALL}\n{LONDON}\n{CALL}",  # a runaway of exact repeats
    ],
)
def test_leading_complete_calls_are_recovered_once(smol: pyshim.Model, output: str) -> None:
    r = canned(smol, output)
    cities = [json.loads(c["function"]["arguments"])["city"] for c in r["tool_calls"]]
    assert cities == ["Paris", "London"], r
    assert r["content"] is None and r["invalid_tool_calls"] == []


UNIT_TOOL = {
    "type": "function",
    "function": {
        "name": "convert",
        "parameters": {
            "type": "object",
            "properties": {"value": {"type": "number"}, "to": {"enum": ["km", "mi"]}},
            "required": ["value", "to"],
        },
    },
}


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"value": 3, "to": "miles"}, 'arguments.to must be one of ["km","mi"]'),
        ({"value": "3", "to": "mi"}, "arguments.value must be of type number"),
        ({"to": "mi"}, 'arguments lacks the required "value"'),
    ],
)
def test_a_call_that_fails_its_schema_is_invalid_not_a_call(smol: pyshim.Model, arguments: dict, why: str) -> None:
    output = json.dumps({"name": "convert", "arguments": arguments})
    r = canned(smol, output, tools=(UNIT_TOOL,))
    assert r["tool_calls"] == [] and r["finish_reason"] == "stop"
    assert r["content"] == output  # a caller that ignores invalid_tool_calls sees the text
    [bad] = r["invalid_tool_calls"]
    assert bad["function"]["name"] == "convert" and json.loads(bad["function"]["arguments"]) == arguments
    assert bad["error"].startswith(why) and bad["id"].startswith("call_")
    # beside a valid call, the valid one is the turn's call and the bad one is reported
    good = json.dumps({"name": "convert", "arguments": {"value": 3, "to": "mi"}})
    r = canned(smol, f"{good}\n{output}", tools=(UNIT_TOOL,))
    assert [json.loads(c["function"]["arguments"]) for c in r["tool_calls"]] == [{"value": 3, "to": "mi"}]
    assert len(r["invalid_tool_calls"]) == 1 and r["content"] is None


def test_template_syntax_calls_are_checked_too(qwen: pyshim.Model) -> None:
    bad = '<tool_call>\n{"name": "convert", "arguments": {"value": 3, "to": "miles"}}\n</tool_call>'
    r = canned(qwen, bad, tools=(UNIT_TOOL,))
    assert r["tool_calls"] == [] and r["invalid_tool_calls"][0]["error"].startswith("arguments.to must be one of")
    good = bad.replace('"miles"', '"mi"')
    assert canned(qwen, good, tools=(UNIT_TOOL,))["tool_calls"][0]["function"]["name"] == "convert"
