"""The Anthropic door (``POST /v1/messages``), driven by the real ``anthropic`` client against real
``python -m pyshim serve`` processes.

Two servers, each started once for this file on a free port: smollm2 (fast; with an API key and a
small request limit) for text, and qwen2.5-coder (tool use). The last tests need no server: the
translation in ``pyshim/anthropic_api.py`` on its own.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from conftest import QWEN, SMOL

from pyshim import anthropic_api
from pyshim.openai_api import ApiError

KEY = "test-key"
SHORT = [{"role": "user", "content": "Reply with just the word: yes"}]
COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city name"}},
        "required": ["city"],
    },
}
ADD = {
    "name": "add",
    "description": "Add two numbers",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
}


@pytest.fixture(scope="module")
def smol_url(start_server: Any) -> str:
    args = ("--n-ctx", "2048", "--temperature", "0", "--api-key", KEY, "--max-request-bytes", "200000")
    return str(start_server(SMOL, *args))


@pytest.fixture(scope="module")
def qwen_url(start_server: Any) -> str:
    return str(start_server(QWEN, "--n-ctx", "4096", "--temperature", "0"))


def client(url: str, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=120)


def post(url: str, body: Any, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = {"x-api-key": KEY, "content-type": "application/json", **headers}
    return httpx.post(f"{url}/v1/messages", content=content, headers=head, timeout=120)


def text_of(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


# -- text: plain, streamed, stop sequences, prefill, sessions, count_tokens ----------------------


def test_plain_message_has_anthropic_shape(smol_url: str) -> None:
    raw = client(smol_url).messages.with_raw_response.create(
        model=SMOL, max_tokens=8, messages=[{"role": "user", "content": "Say hello"}],
        system=[{"type": "text", "text": "You are terse."}], metadata={"user_id": "someone"},
        extra_body={"temperature": 0, "top_p": 0.9, "top_k": 40},  # not create()'s own arguments in anthropic 2.x
    )  # fmt: skip
    body = raw.http_response.json()
    assert set(body) == {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
    m = raw.parse()
    assert m.id.startswith("msg_") and m.type == "message" and m.role == "assistant" and m.model == SMOL
    assert [b.type for b in m.content] == ["text"] and text_of(m)
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert 0 < m.usage.output_tokens <= 8 and m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 0
    assert float(raw.http_response.headers["x-pyshim-model-ms"]) > 0


def test_streamed_message_matches_the_plain_one(smol_url: str) -> None:
    c = client(smol_url)
    plain = c.messages.create(model=SMOL, max_tokens=30, messages=SHORT)
    with c.messages.stream(model=SMOL, max_tokens=30, messages=SHORT) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop" and "content_block_delta" in events
    assert events.index("content_block_start") < events.index("content_block_stop") < events.index("message_delta")
    assert text_of(final) == text_of(plain) and final.stop_reason == plain.stop_reason == "end_turn"
    assert final.usage.output_tokens == plain.usage.output_tokens
    prompt = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert prompt == plain.usage.input_tokens + (plain.usage.cache_read_input_tokens or 0)


def test_stop_sequences_plain_and_streamed(smol_url: str) -> None:
    c = client(smol_url)
    args: dict[str, Any] = {"model": SMOL, "max_tokens": 40, "messages": COUNT, "stop_sequences": ["never", "5"]}
    plain = c.messages.create(**args)
    assert plain.stop_reason == "stop_sequence" and plain.stop_sequence == "5"
    assert "4" in text_of(plain) and "5" not in text_of(plain)
    with c.messages.stream(**args) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence, text_of(final)) == ("stop_sequence", "5", text_of(plain))
    # Without a stop sequence met, the turn ends as it would have.
    other = c.messages.create(**{**args, "stop_sequences": ["zebra"], "max_tokens": 6})
    assert other.stop_reason == "max_tokens" and other.stop_sequence is None


def test_a_final_assistant_message_is_continued(smol_url: str) -> None:
    c = client(smol_url)
    messages = [*COUNT, {"role": "assistant", "content": "1, 2, 3,"}]
    plain = c.messages.create(model=SMOL, max_tokens=4, messages=messages)
    assert not text_of(plain).startswith("1, 2, 3") and text_of(plain).strip().startswith("4")
    with c.messages.stream(model=SMOL, max_tokens=4, messages=messages) as stream:
        assert text_of(stream.get_final_message()) == text_of(plain)


def test_session_header_keeps_the_cache_and_count_tokens(smol_url: str) -> None:
    c = client(smol_url)
    history: list[dict[str, Any]] = [{"role": "user", "content": "My name is Ada. Remember it."}]
    session = {"X-Session-Id": "ada"}
    counted = c.messages.count_tokens(model=SMOL, messages=history, extra_headers=session)
    first = c.messages.create(model=SMOL, max_tokens=8, messages=history, extra_headers=session)
    assert counted.input_tokens == first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    assert (first.usage.cache_read_input_tokens or 0) > 0  # the count evaluated the prompt, in the session
    c.messages.create(model=SMOL, max_tokens=4, messages=[{"role": "user", "content": "Unrelated"}])
    history += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "What is my name?"}]
    second = c.messages.create(model=SMOL, max_tokens=8, messages=history, extra_headers=session)
    assert (second.usage.cache_read_input_tokens or 0) >= counted.input_tokens


# -- tools --------------------------------------------------------------------------------------


def test_tool_use_round_trip(qwen_url: str) -> None:
    c = client(qwen_url)
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    args: dict[str, Any] = {"model": QWEN, "max_tokens": 60, "tools": [WEATHER], "tool_choice": {"type": "any"}}
    m = c.messages.create(messages=question, **args)
    assert m.stop_reason == "tool_use" and [b.type for b in m.content] == ["tool_use"]
    call = m.content[0]
    assert call.name == "get_weather" and "paris" in call.input["city"].lower() and call.id
    with c.messages.stream(messages=question, **args) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert "input_json" in events and final.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [(call.name, call.input)]

    result = {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "Sunny, 24 C"}]}
    nudge = {"type": "text", "text": "Using the tool result above, answer my question in plain text."}
    turn = [*question, {"role": "assistant", "content": m.content}, {"role": "user", "content": [result, nudge]}]
    answer = c.messages.create(model=QWEN, max_tokens=40, tools=[WEATHER], messages=turn)
    assert answer.stop_reason == "end_turn" and "24" in text_of(answer)


def test_two_tool_loop_runs_to_the_end(qwen_url: str) -> None:
    """An agent loop on the SDK: run each tool_use, send the results back, until end_turn. A call
    the model repeats is answered with its result and a request for the answer (as pyshim.Agent's
    nudge does for small models)."""
    c = client(qwen_url)
    run = {"get_weather": lambda city: f"Sunny, 24 C in {city}", "add": lambda a, b: str(a + b)}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 17 + 25? And what is the weather in Paris?"}]
    done: dict[str, str] = {}
    for _ in range(6):
        m = c.messages.create(model=QWEN, max_tokens=60, tools=[WEATHER, ADD], messages=messages)
        if m.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": m.content})
        results: list[dict[str, Any]] = []
        repeated = False
        for block in m.content:
            if block.type == "tool_use":
                key = f"{block.name}({json.dumps(block.input, sort_keys=True)})"
                repeated |= key in done
                done[key] = run[block.name](**block.input)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": done[key]})
        if repeated:
            facts = "; ".join(f"{k} = {v}" for k, v in done.items())
            ask = f"The tools returned: {facts}. Now answer my questions in plain text, stating every result."
            results.append({"type": "text", "text": ask})
        messages.append({"role": "user", "content": results})
    assert m.stop_reason == "end_turn", m
    assert {k.split("(")[0] for k in done} == {"add", "get_weather"}, done
    assert "42" in done.values()
    assert "42" in text_of(m) or "24" in text_of(m), text_of(m)


# -- errors -------------------------------------------------------------------------------------


def test_auth_failures_have_anthropic_shape(smol_url: str) -> None:
    with pytest.raises(anthropic.AuthenticationError) as bad:
        client(smol_url, key="wrong").messages.create(model=SMOL, max_tokens=4, messages=SHORT)
    assert bad.value.status_code == 401
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    body = {"model": SMOL, "max_tokens": 2, "messages": SHORT}
    nokey = httpx.post(f"{smol_url}/v1/messages", json=body)
    assert nokey.status_code == 401 and nokey.json()["error"]["type"] == "authentication_error"
    bearer = httpx.post(f"{smol_url}/v1/messages", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert bearer.status_code == 200 and bearer.json()["type"] == "message"


def test_hostile_bodies_get_400(smol_url: str) -> None:
    ok: dict[str, Any] = {"model": SMOL, "max_tokens": 4, "messages": SHORT}
    deep_schema = {"type": "object", "properties": {"x": json.loads("[" * 600 + "]" * 600)}}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    cases: list[Any] = [
        b"{not json",
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the JSON parser follows
        [ok],
        {k: v for k, v in ok.items() if k != "max_tokens"},
        {**ok, "max_tokens": 0},
        {**ok, "max_tokens": "4"},
        {**ok, "messages": []},
        {**ok, "messages": [{"role": "wizard", "content": "hi"}]},
        {**ok, "messages": [{"role": "user", "content": [image]}]},
        {**ok, "system": 7},
        {**ok, "stop_sequences": "5"},
        {**ok, "tools": [{"name": "x", "input_schema": deep_schema}]},
        {**ok, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        {**ok, "tool_choice": {"type": "sometimes"}},
        {**ok, "top_p": 7},  # the library's own check
        {**ok, "top_p": 7, "stream": True},  # a stream the library refuses still gets its status
    ]
    for body in cases:
        r = post(smol_url, body)
        assert r.status_code == 400, (body if not isinstance(body, bytes) else body[:20], r.text)
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error" and err["error"]["message"]
    c = client(smol_url)
    with pytest.raises(anthropic.NotFoundError) as gone:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=SHORT)
    assert gone.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.APIStatusError) as big:
        c.messages.create(model=SMOL, max_tokens=4, messages=[{"role": "user", "content": "x" * 300_000}])
    assert big.value.status_code == 413 and big.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    assert text_of(c.messages.create(**ok))  # and the model is still fine


# -- the translation alone ----------------------------------------------------------------------


def test_request_mapping() -> None:
    body = {
        "model": "m", "max_tokens": 5, "temperature": 0, "top_k": 3, "metadata": {"user_id": "u"},
        "system": [{"type": "text", "text": "Be"}, {"type": "text", "text": "brief"}],
        "stop_sequences": ["x", ""],
        "tools": [WEATHER], "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True},
                {"type": "text", "text": "And?", "cache_control": {"type": "ephemeral"}},
            ]},
        ],
    }  # fmt: skip
    req = anthropic_api.parse_request(body, "s1", "key-a")
    assert req.messages == [
        {"role": "system", "content": "Be\nbrief"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "error: boom"},
        {"role": "user", "content": "And?"},
    ]
    assert req.tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER["input_schema"],
                "description": WEATHER["description"],
            },
        }
    ]
    session = req.options.pop("session")
    assert req.options == {
        "max_tokens": 5, "temperature": 0, "top_k": 3, "stop": ["x"], "logprobs": True,
        "tool_choice": "required", "parallel_tool_calls": False,
    }  # fmt: skip
    # The client's own session name: the route puts every call in its key's scope, where the library
    # keeps one key's sessions from another's (tests/test_scopes.py, through the real door).
    assert session == "s1" == anthropic_api.parse_request(body, "s1", "key-b").options["session"]
    assert "session" not in anthropic_api.parse_request(body, None, "key-a").options
    for choice, mapped in [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ]:
        assert anthropic_api.parse_request({**body, "tool_choice": choice}).options["tool_choice"] == mapped
    counted = anthropic_api.parse_request({k: v for k, v in body.items() if k != "max_tokens"}, count=True)
    assert counted.options["max_tokens"] == 1 and "stop" not in counted.options and not counted.stream


def test_response_and_stream_events_from_results() -> None:
    req = anthropic_api.parse_request(
        {
            "model": "m",
            "max_tokens": 9,
            "stop_sequences": ["END"],
            "messages": [*SHORT, {"role": "assistant", "content": "Sure:"}],
        }
    )
    assert req.prefill == "Sure:"
    msg = anthropic_api.Message("m", req)
    tokens = [{"token": t} for t in [" yes", " E", "ND"]]
    result = {
        "content": "Sure: yes", "finish_reason": "stop", "logprobs": {"content": tokens},
        "n_prompt": 20, "n_reused": 15, "usage": {"completion_tokens": 3},
    }  # fmt: skip
    out = msg.response(result)
    assert out["content"] == [{"type": "text", "text": " yes"}]
    assert (out["stop_reason"], out["stop_sequence"]) == ("stop_sequence", "END")
    assert out["usage"] == {
        "input_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 15, "output_tokens": 3,
    }  # fmt: skip

    stream = anthropic_api.MessageStream(msg)
    text = stream.start() + stream.delta({"prompt_progress": {"processed": 1, "total": 2}})
    text += stream.delta({"content": "Sur"}) + stream.delta({"content": "e: y"}) + stream.delta({"content": "es"})
    calls = [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]
    text += stream.delta({"tool_calls": [*calls, {"index": 0, "function": {"arguments": '{"a": 1}'}}]})
    text += stream.finish({**result, "finish_reason": "tool_calls", "tool_calls": [{"id": "c1"}]})
    events = [
        (c.split("\n")[0].removeprefix("event: "), json.loads(c.split("\n")[1][6:])) for c in text.split("\n\n") if c
    ]
    assert [e for e, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert all(name == data["type"] for name, data in events)
    assert "".join(d["delta"].get("text", "") for e, d in events if e == "content_block_delta") == " yes"
    assert events[6][1]["content_block"] == {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    assert events[7][1] == {
        "type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'},
    }  # fmt: skip
    assert events[9][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}


def test_errors_map_to_anthropic_types() -> None:
    from pyshim import aio
    from pyshim.door_relay import api_error as _error

    assert anthropic_api.error_response(_error(aio.Overloaded("full"))) == (
        {"type": "error", "error": {"type": "overloaded_error", "message": _error(aio.Overloaded("full")).message}},
        529,
    )
    assert anthropic_api.error_response(ApiError(404, "no"))[0]["error"]["type"] == "not_found_error"
    body, status = anthropic_api.error_response(_error(RuntimeError("boom")))
    assert status == 500 and body["error"]["type"] == "api_error"
    headers = {"authorization": "Bearer k2"}
    assert anthropic_api.api_key({"x-api-key": "k1", **headers}) == "k1"
    assert anthropic_api.api_key(headers) == "k2" and anthropic_api.api_key({}) is None


def test_message_start_carries_the_input_tokens(smol_url: str) -> None:
    """Issue 58: message_start said input_tokens 0, the real count coming only in message_delta
    (llama.cpp's own test_anthropic_messages_streaming fails on it; Anthropic counts at the start)."""
    c = client(smol_url)
    with c.messages.stream(model=SMOL, max_tokens=8, messages=SHORT) as stream:
        start = next(e for e in stream if e.type == "message_start")
        for _ in stream:
            pass
        final = stream.get_final_message()
    at_start = start.message.usage.input_tokens + (start.message.usage.cache_read_input_tokens or 0)
    assert at_start > 0
    assert at_start == final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)


def test_an_unknown_argument_is_refused_in_anthropics_shape(smol_url: str) -> None:
    """Issue 58: the Messages door passed "temprature" with a 200; Anthropic answers 400
    ("Extra inputs are not permitted"). Its fields that mean nothing here are accepted."""
    c = client(smol_url)
    ask: Any = [{"role": "user", "content": "Hi"}]
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model=SMOL, max_tokens=2, messages=ask, extra_body={"temprature": 0.2})
    assert "temprature: Extra inputs are not permitted" in str(e.value) and "did you mean 'temperature'" in str(e.value)
    assert e.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    ok = c.messages.create(model=SMOL, max_tokens=2, messages=ask, metadata={"user_id": "u1"})
    assert ok.content is not None
