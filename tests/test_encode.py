"""The conversation goes to the library by orjson (``pyshim._lib.encode_messages``): the same JSON
as the standard encoder for what the standard encoder takes, and the standard encoder's
conversions and refusals for what orjson does not take."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pyshim._lib import encode, encode_messages
from pyshim.errors import InvalidRequest

MESSAGES: list[Any] = [
    {"role": "system", "content": 'Réponds en français, s\'il te plaît. 日本語も OK. \u2028 "quotes" \\ \n\t'},
    {"role": "user", "content": [{"type": "text", "text": "emoji 🙂 and \x00 control"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1.5}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "22.5", "extra": [True, False, 3, -2.25e-7]},
]


def test_messages_encode_to_the_same_json_as_the_standard_encoder() -> None:
    assert json.loads(encode_messages(MESSAGES)) == json.loads(encode(MESSAGES)) == MESSAGES


def test_what_orjson_does_not_take_goes_to_the_standard_encoder() -> None:
    odd = [{"role": "user", "content": "hi", "meta": {1: "int key", "big": 2**70}}]
    assert json.loads(encode_messages(odd)) == json.loads(json.dumps(odd))
    loop: dict[str, Any] = {"role": "user"}
    loop["content"] = loop
    with pytest.raises(InvalidRequest, match="as JSON"):
        encode_messages([loop])
    with pytest.raises(InvalidRequest, match="as JSON"):
        encode_messages([{"role": "user", "content": object()}])
