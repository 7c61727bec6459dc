"""The agent task set through two agent frameworks people use with local models, for ``bench.agent_tasks``.

openai-agents and pydantic-ai each run the same tasks with the same tools, system prompt, model
and greedy settings as ``pyshim.Agent``, against ``pyshim serve`` (the door: the same engine and
chat template, so what differs is the agent loop). Each run becomes a ``pyshim.AgentResult`` with
an OpenAI-shaped transcript so that one checker scores every system; a framework's final output
is what it reports as its answer (``stopped="answer"``), and a run it ends with an error (its
turn limit, a refused reply) is ``stopped="error"``.

A tool that raises returns its error as text to the model, for every system alike (the way
``pyshim.Agent`` does; pydantic-ai would otherwise end the run).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

from pyshim import AgentResult

__all__ = ["PEERS", "run_peer"]

PEERS = ("openai-agents", "pydantic-ai")


def _reporting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The tool, returning ``"error: Type: message"`` where it would raise."""

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # the model sees the failure, as in pyshim.Agent
            return f"error: {type(e).__name__}: {e}"

    return tool


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def _transcript(prompt: str, steps: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-shaped messages from ("call", (id, name, args)) and ("output", (id, text)) steps."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for kind, value in steps:
        if kind == "call":
            if messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": None, "tool_calls": []})
            messages[-1]["tool_calls"].append(_call(*value))
        else:
            content = value[1] if isinstance(value[1], str) else json.dumps(value[1], ensure_ascii=False, default=str)
            messages.append({"role": "tool", "tool_call_id": value[0], "content": content})
    return messages


def _openai_agents(
    url: str, model: str, tools: list[Callable[..., Any]], system: str, prompt: str, opts: dict[str, Any]
) -> AgentResult:
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from agents.items import ToolCallItem, ToolCallOutputItem
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    settings = ModelSettings(temperature=0, max_tokens=opts["max_tokens"])

    async def run() -> Any:
        async with AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0) as client:
            agent = Agent(
                name="assistant",
                instructions=system,
                model=OpenAIChatCompletionsModel(model=model, openai_client=client),
                model_settings=settings,
                tools=[function_tool(_reporting(t)) for t in tools],
            )
            return await Runner.run(agent, prompt, max_turns=opts["max_turns"])

    try:
        result = asyncio.run(run())
    except Exception as e:  # its turn limit, or a reply it could not read
        return AgentResult(
            None, [{"role": "user", "content": prompt}], stopped="error", error=f"{type(e).__name__}: {e}"
        )
    steps: list[tuple[str, Any]] = []
    for item in result.new_items:
        if isinstance(item, ToolCallItem):
            raw = item.raw_item
            steps.append(
                ("call", (getattr(raw, "call_id", ""), getattr(raw, "name", ""), getattr(raw, "arguments", "{}")))
            )
        elif isinstance(item, ToolCallOutputItem):
            raw = item.raw_item
            call_id = raw.get("call_id", "") if isinstance(raw, dict) else getattr(raw, "call_id", "")
            steps.append(("output", (call_id, item.output)))
    final = result.final_output if isinstance(result.final_output, str) else str(result.final_output)
    return AgentResult(final, [*_transcript(prompt, steps), {"role": "assistant", "content": final}])


def _pydantic_ai(
    url: str, model: str, tools: list[Callable[..., Any]], system: str, prompt: str, opts: dict[str, Any]
) -> AgentResult:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    chat = OpenAIChatModel(model, provider=OpenAIProvider(base_url=f"{url}/v1", api_key="none"))
    agent = Agent(chat, system_prompt=system, tools=[Tool(_reporting(t), takes_ctx=False) for t in tools])
    try:
        result = agent.run_sync(
            prompt,
            model_settings={"temperature": 0, "max_tokens": opts["max_tokens"]},
            usage_limits=UsageLimits(request_limit=opts["max_turns"]),
        )
    except Exception as e:  # its request limit, or a reply it could not read
        return AgentResult(
            None, [{"role": "user", "content": prompt}], stopped="error", error=f"{type(e).__name__}: {e}"
        )
    steps: list[tuple[str, Any]] = []
    for message in result.all_messages():
        for part in message.parts:
            if isinstance(message, ModelResponse) and isinstance(part, ToolCallPart):
                steps.append(("call", (part.tool_call_id, part.tool_name, part.args)))
            elif isinstance(message, ModelRequest) and isinstance(part, ToolReturnPart):
                steps.append(("output", (part.tool_call_id, part.content)))
    final = str(result.output)
    return AgentResult(final, [*_transcript(prompt, steps), {"role": "assistant", "content": final}])


def run_peer(
    peer: str, url: str, model: str, tools: list[Callable[..., Any]], system: str, prompt: str, **opts: Any
) -> AgentResult:
    """One task through one framework (``PEERS``), against the door at ``url``."""
    run = {"openai-agents": _openai_agents, "pydantic-ai": _pydantic_ai}[peer]
    return run(url, model, tools, system, prompt, opts)
