"""The door in process, with no socket: ``create_app(settings, model)`` behind
``httpx.ASGITransport``, driven by ``AsyncOpenAI`` and by openai-agents on top of it.

This is the README's recipe, run as written: one open ``Model`` serves chat completions (plain,
streamed, with a tool call), the Responses API, embeddings and metrics to clients in the same
process; the app does not close the model it was given."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from conftest import QWEN, WEATHER_TOOL

import pyshim
from pyshim.server import Settings, create_app


def in_process(model: pyshim.Model) -> tuple[openai.AsyncOpenAI, httpx.AsyncClient]:
    app = create_app(Settings(model=str(model.path), name="local"), model)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pyshim")
    return openai.AsyncOpenAI(base_url="http://pyshim/v1", api_key="none", http_client=http, max_retries=0), http


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_openai_client_runs_in_process(qwen: pyshim.Model) -> None:
    async def main() -> None:
        client, http = in_process(qwen)
        async with http:
            ask = [{"role": "user", "content": "What is the weather in Paris?"}]
            call = await client.chat.completions.create(model="local", messages=ask, tools=[WEATHER_TOOL])
            assert call.choices[0].finish_reason == "tool_calls"
            assert call.choices[0].message.tool_calls[0].function.name == "get_weather"
            hi = [{"role": "user", "content": "Say hello."}]
            stream = await client.chat.completions.create(model="local", messages=hi, max_tokens=8, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            whole = await client.chat.completions.create(model="local", messages=hi, max_tokens=8)
            assert text == whole.choices[0].message.content and text
            response = await client.responses.create(model="local", input="Say hello.", max_output_tokens=8)
            assert response.status in ("completed", "incomplete") and response.output_text
            emb = await client.embeddings.create(model="local", input=["a cat", "a dog"])
            assert np.array_equal(np.array(emb.data[1].embedding, dtype=np.float32), qwen.embed("a dog"))
            metrics = (await http.get("/metrics")).text
            assert 'pyshim_requests_total{route="/v1/chat/completions",status="200"} 3.0' in metrics

    run(main())
    assert qwen.generate([{"role": "user", "content": "hi"}], max_tokens=2)["n_decoded"] == 2  # still open


def test_openai_agents_runs_a_tool_loop_in_process(qwen: pyshim.Model) -> None:
    agents = pytest.importorskip("agents")

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return f"It is 24 C and sunny in {city}."

    async def main() -> Any:
        client, http = in_process(qwen)
        async with http:
            model = agents.OpenAIChatCompletionsModel(model="local", openai_client=client)
            agent = agents.Agent(name="weather", instructions="Use the tools.", tools=[get_weather], model=model)
            config = agents.RunConfig(tracing_disabled=True)
            return await agents.Runner.run(agent, "What is the weather in Paris?", run_config=config, max_turns=4)

    result = run(main())
    calls = [i for i in result.new_items if i.type == "tool_call_item"]
    assert calls and "24" in str(result.final_output)


def test_a_door_given_no_model_still_loads_its_own() -> None:
    """Without a model, create_app loads settings.model on startup (its lifespan), as serve does;
    ASGITransport runs no lifespan, so such an app answers 503 until it is started."""

    async def main() -> int:
        app = create_app(Settings(model=QWEN, name="local"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as http:
            return (await http.get("/health")).status_code

    assert run(main()) == 503
