"""The Responses door (``POST /v1/responses``), driven by the real ``openai`` client and by
openai-agents' default model class (``OpenAIResponsesModel``) against real ``python -m pyshim serve``
processes.

Every response body and every stream event is validated against the ``openai`` package's own
pydantic types (``Response``, ``ResponseStreamEvent``), strictly: a missing required field fails.
Two servers, each started once for this file: smollm2 (fast; with an API key) for text, and
qwen2.5-coder for tools. The last tests need no server: the translation in
``pyshim/responses_api.py`` on its own.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from conftest import QWEN, SMOL
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from pyshim import responses_api
from pyshim.openai_api import ApiError
from pyshim.response_store import ResponseStore

KEY = "test-key"
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def smol_url(start_server: Any) -> str:
    return str(start_server(SMOL, "--n-ctx", "2048", "--temperature", "0", "--api-key", KEY))


@pytest.fixture(scope="module")
def qwen_url(start_server: Any) -> str:
    return str(start_server(QWEN, "--n-ctx", "4096", "--temperature", "0"))


def client(url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def post(url: str, body: Any, key: str = KEY) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    return httpx.post(f"{url}/v1/responses", content=content, headers=head, timeout=120)


def raw_events(url: str, body: dict[str, Any], key: str = KEY) -> list[dict[str, Any]]:
    """The stream's events as sent, each checked strictly against the openai package's types."""
    head = {"authorization": f"Bearer {key}"}
    events = []
    with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, headers=head, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                EVENTS.validate_python(event, strict=False)
                events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


# -- text: plain, streamed, incomplete, follow-ups, json_schema ----------------------------------


def test_plain_response_parses_as_the_openai_type(smol_url: str) -> None:
    body = {"model": SMOL, "input": "Say hello", "instructions": "You are terse.", "max_output_tokens": 30}
    r = post(smol_url, body)
    assert r.status_code == 200, r.text
    parsed = Response.model_validate(r.json())
    assert parsed.id.startswith("resp_") and parsed.status == "completed" and parsed.object == "response"
    assert parsed.output[0].type == "message" and parsed.output[0].id.startswith("msg_") and parsed.output_text
    assert parsed.instructions == "You are terse." and parsed.usage is not None
    assert 0 < parsed.usage.output_tokens <= 30 and parsed.usage.input_tokens > 0
    via_client = client(smol_url).responses.create(**body)  # type: ignore[call-overload]
    assert via_client.output_text == parsed.output_text


def test_stream_events_parse_and_match_the_plain_response(smol_url: str) -> None:
    body = {"model": SMOL, "input": [{"role": "user", "content": "Count from 1 to 5."}], "max_output_tokens": 120}
    plain = client(smol_url).responses.create(**body)  # type: ignore[call-overload]
    events = raw_events(smol_url, body)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    order = ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
             "response.output_text.done", "response.content_part.done", "response.output_item.done"]  # fmt: skip
    assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order)
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = Response.model_validate(events[-1]["response"])
    assert text == final.output_text == plain.output_text
    item_ids = {e["item_id"] for e in events if "item_id" in e}
    assert item_ids == {final.output[0].id}
    # The SDK's own stream helper accumulates the same response.
    with client(smol_url).responses.stream(**body) as s:  # type: ignore[arg-type]
        assert s.get_final_response().output_text == plain.output_text


def test_streamed_logprobs_come_with_their_tokens(smol_url: str) -> None:
    body = {"model": SMOL, "input": "Count from 1 to 5.", "max_output_tokens": 20, "top_logprobs": 2}
    plain = client(smol_url).responses.create(**body)  # type: ignore[call-overload]
    part = plain.output[0].content[0]  # type: ignore[union-attr]
    assert part.logprobs and all(len(t.top_logprobs) == 2 for t in part.logprobs)
    deltas = [e for e in raw_events(smol_url, body) if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and all(d["logprobs"] for d in deltas)
    streamed = [t["token"] for d in deltas for t in d["logprobs"]]
    assert streamed == [t.token for t in part.logprobs][: len(streamed)]


def test_a_cut_response_is_incomplete(smol_url: str) -> None:
    r = client(smol_url).responses.create(model=SMOL, input="Write a long story about a dragon.", max_output_tokens=5)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens" and r.usage is not None and r.usage.output_tokens == 5


def test_previous_response_id_continues_on_the_same_cache(smol_url: str) -> None:
    c = client(smol_url)
    first = c.responses.create(model=SMOL, input="My name is Ada. Reply with OK.", max_output_tokens=8)
    second = c.responses.create(
        model=SMOL, input="What is my name?", previous_response_id=first.id, max_output_tokens=16
    )
    assert second.previous_response_id == first.id and "Ada" in second.output_text
    assert first.usage is not None and second.usage is not None
    # All of the first exchange was in the slot the chain's session keeps.
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    assert c.responses.retrieve(second.id).output_text == second.output_text
    # Streamed follow-ups are stored too, and chain on.
    events = raw_events(smol_url, {"model": SMOL, "input": "Say it again.", "previous_response_id": second.id,
                                   "max_output_tokens": 16})  # fmt: skip
    third = Response.model_validate(events[-1]["response"])
    assert c.responses.retrieve(third.id).id == third.id
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=SMOL, input="hi", previous_response_id="resp_unknown")
    assert e.value.code == "previous_response_not_found" and e.value.param == "previous_response_id"
    c.responses.delete(third.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(third.id)
    unstored = c.responses.create(model=SMOL, input="hi", store=False, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(unstored.id)


def test_text_format_json_schema(smol_url: str) -> None:
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}
    r = client(smol_url).responses.create(
        model=SMOL, input="Is the sky blue?", max_output_tokens=30,
        text={"format": {"type": "json_schema", "name": "yn", "schema": schema, "strict": True}},
    )  # fmt: skip
    assert json.loads(r.output_text)["answer"] in ("yes", "no")


# -- tools: a call, its output, a streamed call, openai-agents ------------------------------------


def test_function_call_round_trip(qwen_url: str) -> None:
    c = client(qwen_url)
    first = c.responses.create(model=QWEN, input="What is the weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    assert calls[0].call_id and calls[0].id and calls[0].id.startswith("fc_")
    output = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 24 C"}
    nudge = {"role": "user", "content": "Using the tool result above, answer my question in plain text."}
    second = c.responses.create(model=QWEN, input=[output, nudge], previous_response_id=first.id, tools=[WEATHER])  # type: ignore[list-item]
    assert "24" in second.output_text and second.usage is not None and first.usage is not None
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    # The same exchange sent whole, without previous_response_id, gives the same answer.
    items = [{"role": "user", "content": "What is the weather in Paris?"}, calls[0].model_dump(), output, nudge]
    whole = c.responses.create(model=QWEN, input=items, tools=[WEATHER])  # type: ignore[arg-type,list-item]
    assert whole.output_text == second.output_text


def test_streamed_function_call(qwen_url: str) -> None:
    events = raw_events(qwen_url, {"model": QWEN, "input": "What is the weather in Tokyo?", "tools": [WEATHER]})
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["item"]["type"] for e in added] == ["function_call"] and added[0]["item"]["name"] == "get_weather"
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert json.loads(args) == json.loads(done["arguments"]) == {"city": "Tokyo"}
    final = Response.model_validate(events[-1]["response"])
    assert final.output[0].type == "function_call" and final.output[0].arguments == done["arguments"]


def test_openai_agents_runs_a_two_tool_loop_on_its_default_responses_model(qwen_url: str) -> None:
    """openai-agents' Runner with its default model class, OpenAIResponsesModel, through the door."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    ran: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        ran.append(f"weather:{city}")
        return f"The weather in {city} is sunny, 24 C."

    @agents.function_tool
    def add(a: float, b: float) -> str:
        """Add two numbers."""
        ran.append(f"add:{a}+{b}")
        return f"{a + b:g}"

    model = agents.OpenAIResponsesModel(QWEN, openai.AsyncOpenAI(base_url=f"{qwen_url}/v1", api_key="unused"))
    agent = agents.Agent(name="helper", instructions="Use the tools to answer.", model=model, tools=[get_weather, add])
    # The model repeats its last call instead of answering; the door's repeat guard asks for the
    # answer (pyshim/repeats.py), so the framework's loop ends with an answer within max_turns.
    result = agents.Runner.run_sync(agent, "What is 17 + 25? And what is the weather in Paris?", max_turns=6)
    assert "add:17.0+25.0" in ran and "weather:Paris" in ran, ran
    assert "24" in str(result.final_output) or "42" in str(result.final_output), result.final_output


# -- errors -----------------------------------------------------------------------------------------


def test_auth_and_hostile_bodies(smol_url: str) -> None:
    assert post(smol_url, {"model": SMOL, "input": "hi"}, key="wrong").status_code == 401
    cases: list[tuple[Any, str]] = [
        (b"{not json", "JSON"),
        (b"[" * 5000 + b"]" * 5000, "deeply"),
        ([1, 2], "object"),
        ({"input": "hi", "model": 7}, "model"),  # no model is the served one; a non-string is refused
        ({"model": SMOL}, "input"),
        ({"model": SMOL, "input": 3}, "input"),
        ({"model": SMOL, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "text only"),
        ({"model": SMOL, "input": [{"type": "file_search_call"}]}, "not supported"),
        ({"model": SMOL, "input": "hi", "tools": [{"type": "web_search"}]}, "function tool"),
        ({"model": SMOL, "input": "hi", "background": True}, "background"),
        ({"model": SMOL, "input": "hi", "truncation": "auto"}, "truncation"),
        ({"model": SMOL, "input": "hi", "temperature": 3}, "temperature"),
        ({"model": SMOL, "input": "hi", "text": {"format": {"type": "xml"}}}, "text.format"),
        ({"model": SMOL, "input": [{"type": "function_call_output", "output": "x"}]}, "call_id"),
    ]  # fmt: skip
    for body, words in cases:
        r = post(smol_url, body)
        assert r.status_code == 400, (body, r.text)
        error = r.json()["error"]
        assert words in error["message"] and error["type"] == "invalid_request_error", (body, error)
    assert post(smol_url, {"model": "nope", "input": "hi"}).status_code == 404
    # The server still answers correctly after all of that.
    ok = post(smol_url, {"model": SMOL, "input": "Say hello", "max_output_tokens": 4})
    assert ok.status_code == 200 and Response.model_validate(ok.json()).output_text


# -- the translation on its own ------------------------------------------------------------------


def test_request_mapping() -> None:
    store = ResponseStore()
    body = {
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 9, "parallel_tool_calls": False,
        "input": [
            {"role": "developer", "content": "Rule."},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"x\": 1}"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        ],
        "tools": [{**WEATHER, "name": "f"}, {**WEATHER, "name": "g"}],
        "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "g"}]},
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
        "include": ["message.output_text.logprobs"], "reasoning": {"effort": "low"}, "metadata": {"k": "v"},
    }  # fmt: skip
    req = responses_api.parse_request(body, "resp_1", "scope", store)
    roles = [m["role"] for m in req.messages]
    assert roles == ["system", "system", "user", "assistant", "tool", "tool"]
    assert req.messages[2]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert req.messages[3]["content"] == "Let me look." and [c["id"] for c in req.messages[3]["tool_calls"]] == [
        "c1",
        "c2",
    ]
    assert req.messages[5] == {"role": "tool", "tool_call_id": "c2", "content": "two"}
    assert [t["function"]["name"] for t in req.tools or []] == ["g"] and req.options["tool_choice"] == "auto"
    assert req.options["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert req.options["max_tokens"] == 9 and req.options["logprobs"] is True
    assert req.options["parallel_tool_calls"] is False and req.conversation == req.messages[1:]
    assert req.options["session"] == "response:resp_1" and req.echo["metadata"] == {"k": "v"}


def test_follow_ups_drop_the_instructions_and_stay_in_their_scope() -> None:
    store = ResponseStore(max_entries=2)
    first = responses_api.parse_request({"model": "m", "input": "hi", "instructions": "A"}, "resp_1", "s1", store)
    out = responses_api.Responder("m", "resp_1")
    result = {"content": "hello", "finish_reason": "stop", "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    store.put(out.id, out.stored(first, result, out.response(first, result)))
    body = {"model": "m", "input": "again", "instructions": "B", "previous_response_id": "resp_1"}
    follow = responses_api.parse_request(body, "resp_2", "s1", store)
    assert [m["content"] for m in follow.messages] == ["B", "hi", "hello", "again"]
    assert follow.options["session"] == first.options["session"]
    with pytest.raises(ApiError) as e:  # another key's response does not exist for this one
        responses_api.parse_request(body, "resp_3", "s2", store)
    assert e.value.code == "previous_response_not_found"
    item = store.get("resp_1", "s1")
    assert item is not None
    store.put("resp_x", item)
    store.put("resp_y", item)
    assert store.get("resp_1", "s1") is None  # bounded: the least recently used goes


def test_stream_events_from_deltas_validate() -> None:
    req = responses_api.parse_request({"model": "m", "input": "hi"}, "resp_1", "s", ResponseStore())
    out = responses_api.Responder("m", "resp_1")
    events = responses_api.ResponseStream(out, req)
    text = events.start()
    text += events.delta({"reasoning_content": "think"})
    text += events.delta({"content": "Hel", "logprobs": {"content": [{"token": "Hel", "logprob": -0.1, "bytes": [72],
                                                                      "top_logprobs": []}]}})  # fmt: skip
    text += events.delta({"content": "lo"})
    text += events.delta({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                          "function": {"name": "f", "arguments": ""}}]})  # fmt: skip
    text += events.delta({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})
    result = {"reasoning_content": "think", "content": "Hello", "finish_reason": "tool_calls",
              "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
              "usage": {"prompt_tokens": 2, "completion_tokens": 3}}  # fmt: skip
    tail, response = events.closing(result)
    parsed = [json.loads(line[6:]) for line in (text + tail).splitlines() if line.startswith("data: ")]
    for event in parsed:
        EVENTS.validate_python(event)
    assert [e["sequence_number"] for e in parsed] == list(range(len(parsed)))
    final = Response.model_validate(response)
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    added = [e["output_index"] for e in parsed if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2] and final.output_text == "Hello"


def test_a_turn_of_only_the_end_token_still_has_its_message() -> None:
    """Issue 58: a turn where the model wrote only its end token answered ``output: []``; the
    translator alone (no model can be made to do it on demand) gives the empty message OpenAI does,
    and a turn with calls only still has no message."""
    from openai.types.responses import Response

    from pyshim.responses_api import Responder, parse_request

    req = parse_request({"model": SMOL, "input": "hi"}, "resp_1", "", ResponseStore())
    r = Responder(SMOL, "resp_1")
    empty = r.response(req, {"content": "", "finish_reason": "stop", "tool_calls": [], "usage": None})
    assert [i["type"] for i in empty["output"]] == ["message"] and empty["output"][0]["content"][0]["text"] == ""
    Response.model_validate(empty)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    calls = r.response(req, {"content": None, "finish_reason": "tool_calls", "tool_calls": [call], "usage": None})
    assert [i["type"] for i in calls["output"]] == ["function_call"]


def test_an_unknown_argument_is_refused_with_the_nearest_known_one(smol_url: str) -> None:
    """Issue 58: Responses passed "temprature" with a 200 and the default temperature; OpenAI
    answers 400 for an unrecognised argument. Its fields that mean nothing here are accepted."""
    c = client(smol_url)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=SMOL, input="Hi", max_output_tokens=2, extra_body={"temprature": 0.2})
    assert "temprature" in str(e.value) and "did you mean 'temperature'" in str(e.value)
    assert e.value.body["param"] == "temprature"  # type: ignore[index]
    ok = c.responses.create(model=SMOL, input="Hi", max_output_tokens=2, user="u1", reasoning={"effort": "low"})
    assert ok.status in ("completed", "incomplete")
