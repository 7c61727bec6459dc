"""The conversation goes to the library by orjson (``pyshim._lib.encode_messages``): the same JSON
as the standard encoder for what the standard encoder takes, and the standard encoder's
conversions and refusals for what orjson does not take. Results and deltas come back by orjson
(``pyshim._lib.read_json``), and what it refuses is read as the standard parser reads it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pyshim._lib import encode, encode_messages, ffi, read_json
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


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"content": MESSAGES[0]["content"], "n": [1, 2.5, None, True]}).encode(),
        b'{"content": "caf\xc3"}',  # a character split by a token: invalid UTF-8, replaced
        b'{"n": [18446744073709551615, -9223372036854775808]}',  # the library's widest integers
        b'{"content": "\\ud83d alone"}',  # a lone surrogate, as the standard parser keeps it
    ],
)
def test_results_read_as_the_standard_parser_reads_them(raw: bytes) -> None:
    assert read_json(ffi.new("char[]", raw)) == json.loads(raw.decode("utf-8", errors="replace"))
