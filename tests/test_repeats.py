"""pyshim/repeats.py on its own, and the doors' repeat guard on a real server (qwen2.5-coder, which
answers a tool's result by calling the same tool again)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from conftest import QWEN, WEATHER_TOOL

from pyshim import repeats


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


ASKED: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", '{"city": "Paris"}')]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 24 C"},
]


def test_only_a_turn_of_answered_calls_counts_as_stuck() -> None:
    again = {"tool_calls": [call("c2", "get_weather", '{ "city":"Paris" }')]}  # other formatting, same call
    assert repeats.repeats_only(ASKED, again)
    assert not repeats.repeats_only(ASKED, {"tool_calls": [call("c2", "get_weather", '{"city": "Rome"}')]})
    mixed = {"tool_calls": [*again["tool_calls"], call("c3", "add", '{"a": 1, "b": 2}')]}
    assert not repeats.repeats_only(ASKED, mixed)  # one new call: the turn goes out as it is
    assert not repeats.repeats_only(ASKED, {"content": "It is sunny.", "tool_calls": []})
    unanswered = ASKED[:2]  # a call with no tool message yet is not answered
    assert not repeats.repeats_only(unanswered, again)


def test_a_whole_number_written_as_a_float_is_the_same_argument() -> None:
    """399.0 and 399 are one call (a model that got 399.0 back called convert(399.0), then
    convert(399): the second ran and its duplicate result went to the answer); 399.5 is another."""
    first = repeats.call_key(call("c1", "convert", '{"value": 399.0, "unit": "km"}'))
    assert repeats.call_key(call("c2", "convert", '{"unit": "km", "value": 399}')) == first
    assert repeats.call_key(call("c3", "convert", '{"value": 399.5, "unit": "km"}')) != first
    nested = repeats.call_key(call("c4", "f", '{"xs": [1.0, 2.5], "o": {"n": 3.0}}'))
    assert nested == repeats.call_key(call("c5", "f", '{"xs": [1, 2.5], "o": {"n": 3}}'))


def test_the_nudge_restates_the_question_and_every_result() -> None:
    text = repeats.nudge(ASKED)["content"]
    assert "What is the weather in Paris?" in text and 'get_weather(city="Paris") returned: sunny, 24 C' in text
    assert text.endswith("Do not call any more tools.")


@pytest.fixture(scope="module")
def qwen_url(start_server: Any) -> str:
    return str(start_server(QWEN, "--n-ctx", "4096", "--temperature", "0"))


def test_the_door_answers_instead_of_repeating_a_call(qwen_url: str) -> None:
    body = {"model": QWEN, "messages": ASKED, "tools": [WEATHER_TOOL], "max_tokens": 60}
    r = httpx.post(f"{qwen_url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200 and r.headers["x-pyshim-repeat-nudges"] == "1"
    message = r.json()["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    assert not repeats.repeats_only(ASKED, {"tool_calls": calls}), message
    # A forced call is the caller's choice: never guarded.
    forced = httpx.post(f"{qwen_url}/v1/chat/completions", json={**body, "tool_choice": "required"}, timeout=120)
    assert "x-pyshim-repeat-nudges" not in forced.headers
    repeated = forced.json()["choices"][0]["message"]["tool_calls"]
    assert json.loads(repeated[0]["function"]["arguments"]) == {"city": "Paris"}  # what the guard catches


def test_an_expression_that_holds_the_last_output_is_fed_back() -> None:
    from pyshim.repeats import fed_back

    def call(expression: str) -> dict[str, Any]:
        return {"function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}

    done = [(call("10004000 / 2"), "5002000.0")]
    assert fed_back(call("5002000.0 / 2"), done) and fed_back(call("5002000 / 2"), done)
    assert not fed_back(call("10004000 / 4"), done)  # another call, not the output
    assert not fed_back(call("5002000.0 / 2"), [(call("5002000 / 2"), "2501000.0")])  # it was there before
