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
