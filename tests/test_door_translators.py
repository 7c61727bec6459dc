"""The door's translators, relay and route body without a model: the backend seam.

``create_app`` serves any ``aio.ModelLike``; here one that replays scripted deltas and results in
the library's own shapes (a tool call streamed as pieces, two calls in one turn, an error after the
first delta). What these tests claim is the translation, one API beside another, through the
official clients over ``httpx.ASGITransport``; every claim about generation is made by the
real-model door tests (test_server, test_anthropic, test_responses, test_llama_server_suite).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from pyshim.server import Settings, create_app
from pyshim.shapes import cancelled_result

# Two calls as the library streams them: each opens with its id and name, its arguments follow in
# pieces; one delta holds two pieces of the first call's arguments, one the second call's opening and arguments.
CALL_DELTAS: list[dict[str, Any]] = [
    {"prompt": {"n_prompt": 40, "n_reused": 12}},
    {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                     "function": {"name": "weather", "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '"Par'}}, {"index": 0, "function": {"arguments": 'is"}'}}]},
    {"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "time", "arguments": ""}},
                    {"index": 1, "function": {"arguments": '{"zone": "CET"}'}}]},
]  # fmt: skip
CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
    {"id": "call_b", "type": "function", "function": {"name": "time", "arguments": '{"zone": "CET"}'}},
]
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("weather", "time")]


def result(content: str | None, calls: list[dict[str, Any]], reason: str, n_prompt: int = 40) -> dict[str, Any]:
    out: dict[str, Any] = dict(cancelled_result("test"))
    message = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
    out.update(content=content, tool_calls=calls, finish_reason=reason, n_prompt=n_prompt, n_reused=12,
               usage={"prompt_tokens": n_prompt, "completion_tokens": 9, "total_tokens": n_prompt + 9},
               message=message)  # fmt: skip
    return out


class Scripted:
    """An ``aio.ModelLike`` that replays ``turns`` (deltas, then a result or an exception), one per
    call, and records each call's options."""

    def __init__(self, *turns: tuple[list[dict[str, Any]], Any]) -> None:
        self.config: dict[str, Any] = {"model": "scripted.gguf"}
        self.turns, self.options = list(turns), []  # type: list[tuple[list[dict[str, Any]], Any]], list[dict[str, Any]]

    def generate(self, messages: Any, tools: Any = None, *, on_delta: Callable[[Any], object] | None = None,
                 **options: Any) -> Any:  # fmt: skip
        self.options.append(options)
        deltas, end = self.turns.pop(0) if len(self.turns) > 1 else self.turns[0]
        for d in deltas:
            if on_delta is not None and on_delta(d) is False:
                return result(None, [], "cancelled")
        if isinstance(end, Exception):
            raise end
        return end

    def embeddings(self, input: Any, **options: Any) -> Any:
        raise NotImplementedError

    def cancel(self, request_id: str | None = None) -> None:
        pass


def serve(model: Scripted) -> httpx.AsyncClient:
    app = create_app(Settings(model="scripted", name="local"), model=model)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://door")


def run(model: Scripted, use: Callable[[httpx.AsyncClient], Any]) -> Any:
    async def main() -> Any:
        async with serve(model) as http:
            return await use(http)

    return asyncio.run(main())


def sse_data(text: str) -> list[Any]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


USER = [{"role": "user", "content": "Weather in Paris, and the time?"}]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_two_calls(stream: bool) -> None:
    model = Scripted((CALL_DELTAS, result(None, CALLS, "tool_calls")))

    async def use(http: httpx.AsyncClient) -> Any:
        c = openai.AsyncOpenAI(base_url="http://door/v1", api_key="k", http_client=http, max_retries=0)
        if not stream:
            return (await c.chat.completions.create(model="local", messages=USER, tools=TOOLS)).model_dump()  # type: ignore[arg-type]
        raw = await http.post("/v1/chat/completions", json={"messages": USER, "tools": TOOLS, "stream": True})
        return raw.text

    out = run(model, use)
    if not stream:
        assert (
            out["choices"][0]["message"]["tool_calls"] == CALLS and out["choices"][0]["finish_reason"] == "tool_calls"
        )
        return
    chunks = sse_data(out)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None, "refusal": None}
    entries = [e for ch in chunks for c in ch["choices"] for e in c["delta"].get("tool_calls") or []]
    # one entry per call index per chunk; the opening one with id, type and name
    assert entries[0] == {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "weather", "arguments": ""},
    }
    assert entries[-1] == {"index": 1, "id": "call_b", "type": "function",
                           "function": {"name": "time", "arguments": '{"zone": "CET"}'}}  # fmt: skip
    joined = ["".join(e["function"]["arguments"] for e in entries if e["index"] == i) for i in (0, 1)]
    assert joined == ['{"city": "Paris"}', '{"zone": "CET"}']
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_anthropic_stream_two_calls_and_input_tokens_at_start() -> None:
    model = Scripted((CALL_DELTAS, result(None, CALLS, "tool_calls")))

    async def main() -> Any:
        # anthropic's client speaks httpx2 (httpx's successor), which has the same ASGI transport
        app = create_app(Settings(model="scripted", name="local"), model=model)
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://door")
        c = anthropic.AsyncAnthropic(base_url="http://door", api_key="k", http_client=http, max_retries=0)
        tools = [{"name": n, "input_schema": {"type": "object"}} for n in ("weather", "time")]
        async with http, c.messages.stream(model="local", max_tokens=50, messages=USER, tools=tools) as s:  # type: ignore[arg-type]
            events = [e async for e in s]
            return events, await s.get_final_message()

    events, final = asyncio.run(main())
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.input_tokens == 28 and start.message.usage.cache_read_input_tokens == 12
    uses = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert uses == [("call_a", "weather", {"city": "Paris"}), ("call_b", "time", {"zone": "CET"})]
    assert final.stop_reason == "tool_use"


def test_responses_stream_two_calls() -> None:
    model = Scripted((CALL_DELTAS, result(None, CALLS, "tool_calls")))

    async def use(http: httpx.AsyncClient) -> Any:
        c = openai.AsyncOpenAI(base_url="http://door/v1", api_key="k", http_client=http, max_retries=0)
        tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("weather", "time")]
        async with c.responses.stream(model="local", input="Weather in Paris, and the time?", tools=tools) as s:  # type: ignore[arg-type]
            deltas = [e.delta async for e in s if e.type == "response.function_call_arguments.delta"]
            return deltas, await s.get_final_response()

    deltas, final = run(model, use)
    calls = [(o.call_id, o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert calls == [("call_a", "weather", '{"city": "Paris"}'), ("call_b", "time", '{"zone": "CET"}')]
    assert "".join(deltas) == '{"city": "Paris"}{"zone": "CET"}'


def test_an_error_after_the_first_delta_ends_each_stream_in_its_api_shape() -> None:
    broken = ([{"content": "Hel"}], RuntimeError("the device went away"))
    bodies = {
        "/v1/chat/completions": {"messages": USER, "stream": True},
        "/v1/messages": {"messages": USER, "max_tokens": 5, "stream": True},
        "/v1/responses": {"input": "hi", "stream": True},
    }

    async def use(http: httpx.AsyncClient) -> Any:
        return {path: (await http.post(path, json=body)) for path, body in bodies.items()}

    out = run(Scripted(broken), use)
    assert all(r.status_code == 200 for r in out.values())  # the 200 went out with the first delta
    chat = out["/v1/chat/completions"].text
    assert '"content": "Hel"' in chat and "internal error" in chat and chat.rstrip().endswith("data: [DONE]")
    assert "event: error" in out["/v1/messages"].text and "api_error" in out["/v1/messages"].text
    assert "event: error" in out["/v1/responses"].text


@pytest.mark.parametrize(
    ("path", "body", "shape"),
    [
        ("/v1/chat/completions", {"messages": USER, "temprature": 0.2}, "error.param"),
        ("/v1/messages", {"messages": USER, "max_tokens": 5, "temprature": 0.2}, "error.type"),
        ("/v1/responses", {"input": "hi", "temprature": 0.2}, "error.param"),
    ],
)
def test_unknown_keys_are_refused_with_a_did_you_mean(path: str, body: dict[str, Any], shape: str) -> None:
    model = Scripted(([], result("never", [], "stop")))
    r = run(model, lambda http: http.post(path, json=body))
    assert r.status_code == 400 and "did you mean 'temperature'" in r.text, r.text
    assert model.options == []  # refused before the model was asked


def test_n_choices_draw_with_consecutive_seeds() -> None:
    one = result("yes", [], "stop", n_prompt=7)
    one["ms_decode"] = 5.0
    model = Scripted(([], one))
    body = {"messages": USER, "n": 3, "seed": 10}
    answer = run(model, lambda http: http.post("/v1/chat/completions", json=body))
    assert answer.headers["x-pyshim-model-ms"] == "15.000"  # the three generations' time
    r = answer.json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert [o["seed"] for o in model.options] == [10, 11, 12]
    assert r["usage"]["prompt_tokens"] == 7 and r["usage"]["completion_tokens"] == 27
    assert r["system_fingerprint"].startswith("fp_")


def test_pyshims_own_options_reach_the_model_from_the_chat_route() -> None:
    """speculative and grammar_tools (the call's grammar from narrowed tools) are el_generate's
    options the chat route passes on, as an OpenAI client sends them (extra_body)."""
    narrowed = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object",
                 "properties": {"city": {"enum": ["Paris"]}}}}}]  # fmt: skip
    model = Scripted(([], result("ok", [], "stop")))
    body = {"messages": USER, "tools": TOOLS, "grammar_tools": narrowed, "speculative": "ngram-simple"}
    assert run(model, lambda http: http.post("/v1/chat/completions", json=body)).status_code == 200
    assert model.options[0]["grammar_tools"] == narrowed and model.options[0]["speculative"] == "ngram-simple"


def test_a_request_without_model_gets_the_served_one_and_another_name_is_404() -> None:
    model = Scripted(([], result("yes", [], "stop")))

    async def use(http: httpx.AsyncClient) -> Sequence[httpx.Response]:
        return [await http.post("/chat/completions", json={"messages": USER}),
                await http.post("/v1/chat/completions", json={"messages": USER, "model": "gpt-4o"})]  # fmt: skip

    bare, other = run(model, use)
    assert bare.status_code == 200 and bare.json()["model"] == "local"
    assert other.status_code == 404 and "'local'" in other.json()["error"]["message"]
