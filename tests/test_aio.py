"""pyshim.aio: agenerate, astream and Agent.arun; cancelling a task cancels its own generation only."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from conftest import user

import pyshim
from pyshim import aio

LONG = {"max_tokens": 4000, "ignore_eos": True}  # half a minute or more if nobody cancels it


def test_agenerate_and_astream(smol: pyshim.Model) -> None:
    async def go() -> None:
        r = await smol.agenerate(user("Say hi"), max_tokens=6)
        assert r["content"] and r["usage"]["completion_tokens"] <= 6
        stream = smol.astream(user("Count to 5"), max_tokens=12)
        text = "".join([d.get("content", "") async for d in stream])
        assert stream.result is not None and stream.result["content"] == text

    asyncio.run(go())


def test_every_call_of_a_model_runs_on_one_thread(smol: pyshim.Model) -> None:
    # ggml's OpenMP team belongs to the calling thread: calls spread over a thread pool ran
    # ~45 % slower in the engine (make bench-door, when this was written).
    threads: set[str] = set()

    def seen(delta: dict) -> None:
        threads.add(threading.current_thread().name)

    async def main() -> None:
        for _ in range(6):
            await aio.agenerate(smol, user("Hi"), max_tokens=2, on_delta=seen)
            await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.01) for _ in range(4)))  # keep the pool busy

    asyncio.run(main())
    assert len(threads) == 1 and next(iter(threads)).startswith("pyshim-model")


def test_cancelling_the_task_cancels_the_generation(smol: pyshim.Model) -> None:
    async def go() -> None:
        task = asyncio.ensure_future(smol.agenerate(user("Write a long story"), **LONG))
        while not aio.gate(smol).running:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - start < 5 and not aio.gate(smol).running
        r = await smol.agenerate(user("Hi"), max_tokens=3)
        assert r["finish_reason"] in ("stop", "length")

    asyncio.run(go())


def test_cancelling_a_queued_call_spares_the_running_one(smol: pyshim.Model) -> None:
    async def go() -> None:
        running = asyncio.ensure_future(smol.agenerate(user("Write"), max_tokens=30, ignore_eos=True))
        while not aio.gate(smol).running:
            await asyncio.sleep(0.01)
        queued = asyncio.ensure_future(smol.agenerate(user("Write"), max_tokens=30))
        while aio.gate(smol).waiting != 1:
            await asyncio.sleep(0.01)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert aio.gate(smol).waiting == 0
        r = await running
        assert r["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 30

    asyncio.run(go())


def test_leaving_a_stream_early_stops_it(smol: pyshim.Model) -> None:
    async def go() -> None:
        async with smol.astream(user("Write a long story"), **LONG) as stream:
            n = 0
            async for _ in stream:
                n += 1
                if n == 3:
                    break
        # as a sync Stream left early: the call ended "cancelled", with what it had decoded
        assert not aio.gate(smol).running and (stream.result is None or stream.result["finish_reason"] == "cancelled")
        r = await smol.agenerate(user("Hi"), max_tokens=3)
        assert r["content"]

    asyncio.run(go())


def test_gate_bound_refuses_when_full(smol: pyshim.Model) -> None:
    async def go() -> None:
        g = aio.gate(smol)
        g.max_waiting = 1
        try:
            first = asyncio.ensure_future(smol.agenerate(user("Write"), max_tokens=20, ignore_eos=True))
            second = asyncio.ensure_future(smol.agenerate(user("Hi"), max_tokens=2))
            while g.waiting != 1:
                await asyncio.sleep(0.01)
            with pytest.raises(aio.Overloaded):
                await smol.agenerate(user("Hi"), max_tokens=2)
            await asyncio.gather(first, second)
        finally:
            g.max_waiting = None

    asyncio.run(go())


def test_arun_with_a_coroutine_tool(qwen: pyshim.Model) -> None:
    calls: list[str] = []

    async def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: the city name.
        """
        await asyncio.sleep(0)
        calls.append(city)
        return f"Sunny and 21 C in {city}"

    agent = pyshim.Agent(qwen, [get_weather], max_steps=4, temperature=0, max_tokens=80)
    result = asyncio.run(agent.arun("What is the weather in Paris?"))
    assert calls and "paris" in calls[0].lower()
    assert any(m["role"] == "tool" and "Sunny" in m["content"] for m in result.messages)
    assert result.stopped == "answer" and result.content


def test_arun_in_plan_mode_takes_the_same_steps(qwen: pyshim.Model) -> None:
    cities: list[str] = []

    async def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: the city name.
        """
        cities.append(city)
        return f"Sunny and {len(city) * 3} C in {city}"

    events: list[dict] = []
    agent = pyshim.Agent(qwen, [get_weather], plan=True, on_event=events.append, temperature=0, max_tokens=80)
    qwen.reset()  # the same batches on both runs (FACTS.md)
    agent.run("What is the weather in Paris and in Oslo?")
    sync_events, sync_cities = [e for e in events if e["type"] in ("plan", "tool_call")], sorted(cities)
    events.clear()
    cities.clear()
    qwen.reset()
    result = asyncio.run(agent.arun("What is the weather in Paris and in Oslo?"))
    async_events = [e for e in events if e["type"] in ("plan", "tool_call")]
    assert [{k: v for k, v in e.items() if k != "id"} for e in async_events] == [
        {k: v for k, v in e.items() if k != "id"} for e in sync_events
    ]
    assert sorted(cities) == sync_cities == ["Oslo", "Paris"]
    assert result.stopped == "answer" and "15" in (result.content or "") and "12" in (result.content or "")
