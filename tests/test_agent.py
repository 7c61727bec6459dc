"""The agent loop on the real default model, and its handling of failing tools."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from conftest import SMOL
from scripted import Scripted

import pyshim
from pyshim import Agent, AgentResult
from pyshim.errors import AgentError, InvalidRequest, InvalidTool


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: the city name, e.g. "Paris".
    """
    return json.dumps({"city": city, "temperature_c": 18, "sky": "cloudy"})


def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


SYSTEM = (
    "Answer the user's questions. To get facts, call tools. Once you have the tool results, "
    "respond with a short plain-text answer that states the results."
)


def test_two_tool_task_completes(qwen: pyshim.Model) -> None:
    qwen.reset()  # the same batches on every run, whatever ran before (FACTS.md: splits move logits)
    events: list[dict[str, Any]] = []
    agent = Agent(
        qwen,
        [get_weather, multiply],
        system=SYSTEM,
        max_steps=6,
        on_event=events.append,
        temperature=0,
        max_tokens=120,
        plan=False,
    )
    result = agent.run(
        "Use the tools to find the weather in Paris and to compute 12 times 7, then tell me both results."
    )
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in result.tool_calls]
    assert ("get_weather", {"city": "Paris"}) in calls
    # the transcript is OpenAI-shaped: every tool call answered by a tool message with its id
    answered = {m["tool_call_id"] for m in result.messages if m["role"] == "tool"}
    assert answered == {c["id"] for c in result.tool_calls}
    assert {"turn", "tool_call", "tool_result"} <= {e["type"] for e in events}
    # later turns reuse the cached prefix
    assert all(t["n_reused"] > 0 for t in result.turns[1:])
    # qwen2.5 goes on multiplying each product by 7 (multiply(84, 7), multiply(588, 7), ...): the
    # second time a tool is fed its own output the turn counts as stuck and the model is asked
    # for the answer (repeats.runaway); before, the run ended at max_steps.
    assert result.stopped == "answer"
    if not any(name == "multiply" and sorted(args.values()) == [7, 12] for name, args in calls):
        # After get_weather the 0.5B model repeats it; the nudge offers only the tools the question
        # gives a reason to call, and "12 times 7" shares no word with multiply's name or
        # description, so the loop answers with the weather alone (a partial answer, no invented
        # figure). The trade was measured: the dev half went from 4/34 to 10/34 (cb04538). plan=True,
        # the default, finishes this task (test_plan_mode_finishes_a_two_part_task_on_the_default_model).
        pytest.xfail("issue 56: the plain loop's nudge does not offer multiply for '12 times 7'")
    # a final answer in plain text, built on a tool result
    assert result.content and not result.content.lstrip().startswith("{")
    assert "18" in result.content


def test_a_raising_tool_is_reported_and_the_loop_goes_on(qwen: pyshim.Model) -> None:
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: the city name.
        """
        raise ConnectionError("weather service unreachable")

    qwen.reset()
    result = Agent(qwen, [get_weather], plan=False, system=SYSTEM, max_steps=4, temperature=0, max_tokens=120).run(
        "What is the weather in Paris?"
    )
    tool_msgs = [m for m in result.messages if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["content"] == "error: ConnectionError: weather service unreachable"
    assert len(result.turns) >= 2  # the model got the error and was asked again


_Scripted = Scripted


def boom(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"boom {x}")


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("boom", '{"x": 3}', "error: RuntimeError: boom 3"),
        ("nope", "{}", "error: unknown tool 'nope'"),
        ("boom", "{not json", "error: the arguments are not valid JSON"),
        ("boom", "[1]", "error: the arguments must be a JSON object"),
        ("boom", '{"y": 1}', "error: bad arguments for boom"),
    ],
)
def test_tool_failures_are_fed_back_and_the_loop_goes_on(name: str, arguments: str, expected: str) -> None:
    model = _Scripted([{"calls": [(name, arguments)]}, {"content": "done"}])
    result = Agent(model, [boom], plan=False).run("Try boom.")  # type: ignore[arg-type]
    tool_msg = next(m for m in result.messages if m["role"] == "tool")
    assert tool_msg["content"].startswith(expected)
    assert model.seen[1][-1] == tool_msg  # the error reached the model
    # Every call failed: the model's "done" is no answer, and the result says what failed and why.
    assert result.stopped == "tools_failed" and result.turns[-1]["content"] == "done"
    [failure] = result.failures
    assert (failure.name, failure.arguments, failure.refused) == (name, arguments, False)
    assert "error: " + failure.error == tool_msg["content"]
    assert (result.content or "").startswith("No answer: every tool call failed.") and failure.error in result.content


def test_max_steps_stops_the_loop() -> None:
    model = _Scripted([{"calls": [("boom", '{"x": 1}')]}] * 3)
    result = Agent(model, [boom], plan=False, max_steps=3).run("Try boom.")  # type: ignore[arg-type]
    assert result.stopped == "max_steps" and result.content is None
    assert len(result.turns) == 3


# -- async tools, the system prompt, names, and a full context ----------------------------------


async def slow_square(x: int) -> int:
    """Square a number, asynchronously."""
    await asyncio.sleep(0.01)
    return x * x


def test_async_tools_run_in_the_sync_loop() -> None:
    model = _Scripted([{"calls": [("slow_square", '{"x": 7}')]}, {"content": "49"}])
    result = Agent(model, [slow_square], plan=False).run("Square 7.")  # type: ignore[arg-type]
    assert result.tools_ran[0]["content"] == "49"


def test_async_tools_run_when_called_from_async_code() -> None:
    model = _Scripted([{"calls": [("slow_square", '{"x": 3}')]}, {"content": "9"}])

    async def main() -> AgentResult:
        return Agent(model, [slow_square], plan=False).run("Square 3.")  # type: ignore[arg-type]

    assert asyncio.run(main()).tools_ran[0]["content"] == "9"


def test_system_is_applied_to_a_message_list_or_refused_when_it_conflicts() -> None:
    model = _Scripted([{"content": "a"}, {"content": "b"}, {"content": "c"}])
    agent = Agent(model, [], plan=False, system="be brief")  # type: ignore[arg-type]
    first = agent.run([{"role": "user", "content": "hi"}])
    assert model.seen[0][0] == {"role": "system", "content": "be brief"}
    agent.run([*first.messages, {"role": "user", "content": "again"}])  # the same system message: fine
    assert [m["role"] for m in model.seen[1]].count("system") == 1
    with pytest.raises(InvalidRequest, match="system"):
        agent.run([{"role": "system", "content": "be verbose"}, {"role": "user", "content": "hi"}])


def test_duplicate_tool_names_are_refused_at_construction() -> None:
    def search(q: str) -> str:
        return q

    def other(q: str) -> str:
        return q

    other.__name__ = "search"
    with pytest.raises(InvalidTool, match="search"):
        Agent(_Scripted([]), [search, other], plan=False)  # type: ignore[arg-type]


def test_a_full_context_returns_the_transcript_and_the_tools_that_ran(qwen_path) -> None:
    ran: list[str] = []

    def read_page(n: int) -> str:
        """Read one page of the book."""
        ran.append(f"page {n}")
        return "The quick brown fox jumps over the lazy dog. " * 60

    with pyshim.Model(qwen_path, n_ctx=512, temperature=0) as small:
        agent = Agent(small, [read_page], plan=False, max_steps=6, tool_choice="required", max_tokens=60)
        result = agent.run("Read the book page by page.")
    assert result.stopped == "context_full"
    assert "context" in (result.error or "")
    assert ran and len(result.tools_ran) == len(ran)
    assert result.messages[0]["content"] == "Read the book page by page."
    assert result.tools_ran[-1]["content"].startswith("The quick brown fox")


def test_other_errors_raise_agent_error_carrying_the_transcript() -> None:
    class Failing(_Scripted):
        def generate(self, messages, tools=None, on_delta=None, **options):
            if len(self.seen) == 1:
                raise InvalidRequest("temperature must be a number")
            return super().generate(messages, tools, on_delta, **options)

    model = Failing([{"calls": [("boom", '{"x": 1}')]}])
    with pytest.raises(AgentError) as info:
        Agent(model, [boom], plan=False).run("Try boom.")  # type: ignore[arg-type]
    assert info.value.result.stopped == "error"
    assert info.value.result.tools_ran[0]["content"] == "error: RuntimeError: boom 1"
    assert isinstance(info.value.__cause__, InvalidRequest)


def test_chat_ends_with_a_clear_message_when_the_context_is_full() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "pyshim", "chat", "--model", SMOL, "--n-ctx", "128", "word " * 400],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert "context" in p.stderr and "--n-ctx" in p.stderr


# -- the nudge and plan mode ----------------------------------------------------------------------


def test_the_nudge_restates_the_question_and_every_result() -> None:
    model = _Scripted(
        [{"calls": [("slow_square", '{"x": 4}')]}, {"calls": [("slow_square", '{"x": 4}')]}, {"content": "16"}]
    )
    result = Agent(model, [slow_square, boom], plan=False).run("What is 4 squared?")  # type: ignore[arg-type]
    assert result.content == "16" and result.stopped == "answer"
    nudge = model.seen[2][-1]
    assert nudge["role"] == "user"
    assert "What is 4 squared?" in nudge["content"] and "slow_square(x=4) returned: 16" in nudge["content"]
    assert len(result.tools_ran) == 1  # the repeated call was not run again


class _Recording(_Scripted):
    def __init__(self, replies: list[dict[str, Any]]) -> None:
        super().__init__(replies)
        self.calls: list[dict[str, Any]] = []

    def generate(self, messages, tools=None, on_delta=None, **options):
        self.calls.append({"tools": tools, "options": options})
        return super().generate(messages, tools, on_delta, **options)


def test_plan_mode_takes_the_steps_in_turn_then_answers_from_the_results() -> None:
    model = _Recording(
        [
            {"content": "1. Square 3.\n- Square 5.\n\n"},  # the plan, with list markers
            {"calls": [("slow_square", '{"x": 3}')]},
            {"content": "It is 9."},  # the step goes on until the model stops calling
            {"calls": [("slow_square", '{"x": 5}')]},
            {"calls": [("slow_square", '{"x": 5}')]},  # a repeat: not run, the step is over
            {"content": "none"},  # the plan checked against what was found: nothing left
            {"content": "9 and, I guess, 25"},
        ]
    )
    events: list[dict[str, Any]] = []
    agent = Agent(model, [slow_square], plan=True, on_event=events.append, tool_choice="required", temperature=0)  # type: ignore[arg-type]
    result = agent.run("Square 3 and 5.")
    plan_turn, *steps, check, answer = model.calls
    assert plan_turn["tools"] is None and "tool_choice" not in plan_turn["options"]
    assert plan_turn["options"]["temperature"] == 0 and plan_turn["options"]["max_tokens"] > 0
    assert model.seen[0][-1] == {"role": "user", "content": "Square 3 and 5."}
    assert {"type": "plan", "steps": ["Square 3.", "Square 5."]} in events
    # a planned step is a call, and so is the turn after a round of calls (a repeat ends the step)
    assert len(steps) == 4 and all(s["options"]["tool_choice"] == "required" for s in steps)
    assert model.seen[1][-1]["content"].endswith("Square 3.") and model.seen[3][-1]["content"].endswith("Square 5.")
    assert model.seen[3][-2]["content"] == "It is 9."  # the next step sees what the last one found
    assert answer["tools"] is None and check["tools"] is None
    assert "returned: 25" in model.seen[5][-1]["content"]
    assert [m["role"] for m in model.seen[6]] == ["system", "user"]  # the question and the findings only
    asked = model.seen[6][1]["content"]
    assert "Square 3 and 5." in asked and "returned: 9" in asked and "returned: 25" in asked
    assert result.stopped == "answer" and result.content == "9 and, I guess, 25"
    assert len(result.tools_ran) == 2 and len(result.turns) == 7
    assert result.messages[-1] == {"role": "assistant", "content": "9 and, I guess, 25"}


def test_a_part_the_plan_folded_into_another_is_found_when_the_plan_is_checked() -> None:
    model = _Recording(
        [
            {"content": "Square 3 and 5."},  # one line: the question is taken as asked
            {"calls": [("slow_square", '{"x": 3}')]},
            {"calls": [("slow_square", '{"x": 3}')]},  # a repeat: the model thinks it is done
            {"content": "Square 5."},  # the check finds the part still needed
            {"calls": [("slow_square", '{"x": 5}')]},
            {"content": "25"},
            {"content": "9 and 25"},
        ]
    )
    events: list[dict[str, Any]] = []
    result = Agent(model, [slow_square], plan=True, on_event=events.append).run("Square 3 and 5.")  # type: ignore[arg-type]
    assert [m["content"] for m in result.tools_ran] == ["9", "25"] and result.content == "9 and 25"
    assert {"type": "plan", "steps": ["Square 5."], "revised": True} in events
    assert "returned: 9" in model.seen[3][-1]["content"] and model.calls[4]["options"]["tool_choice"] == "required"


def test_a_step_may_chain_calls_and_a_step_no_tool_fits_is_done_in_text() -> None:
    # A call none of whose arguments the run knows of (the request, the plan, what was found) is
    # not run; the scripted 7 comes from nowhere, 2 from the request and 4 from a result.
    model = _Recording(
        [
            {"content": "Name a colour.\nSquare 2, then square that."},  # three steps (parse_steps)
            {"calls": [("slow_square", '{"x": 7}')]},  # made to call, it calls with a value from nowhere
            {"content": "Blue."},  # not run: the step again with tools off, done in text
            {"calls": [("slow_square", '{"x": 2}')]},
            {"content": "4"},
            {"calls": [("slow_square", '{"x": 4}')]},  # "Square that." takes the first result
            {"content": "16"},
            {"content": "none"},
            {"content": "Blue; 4, then 16."},
        ]
    )
    result = Agent(model, [slow_square], plan=True).run("Name a colour, then square 2 and square the result.")  # type: ignore[arg-type]
    assert [m["content"] for m in result.tools_ran] == ["4", "16"]
    assert [c["options"]["tool_choice"] for c in model.calls[1:3]] == ["required", "none"]
    asked = model.seen[-1][-1]["content"]
    assert "Name a colour. -> Blue." in asked and "returned: 16" in asked
    assert "It is" not in asked and "-> 16" not in asked  # a step's closing text after its calls is not a finding
    assert result.stopped == "answer" and result.content == "Blue; 4, then 16."


def test_plan_mode_honours_the_system_message_and_the_conversation_in_every_turn() -> None:
    model = _Recording([{"content": "Square 2.\nSquare 3."}])
    model.replies += [{"calls": [("slow_square", '{"x": 2}')]}, {"content": "4"}]
    model.replies += [{"calls": [("slow_square", '{"x": 3}')]}, {"content": "9"}, {"content": "none"}]
    model.replies += [{"content": "4 et 9."}]
    history = [{"role": "user", "content": "Salut"}, {"role": "assistant", "content": "Bonjour !"}]
    agent = Agent(model, [slow_square], plan=True, system="Always answer in French.")  # type: ignore[arg-type]
    result = agent.run([*history, {"role": "user", "content": "Square 2 and 3."}])
    plan, answer = model.seen[0], model.seen[-1]
    assert "Always answer in French." in plan[0]["content"]
    assert "Bonjour !" in plan[-1]["content"] and plan[-1]["content"].endswith("Square 2 and 3.")
    assert all(turn[0] == {"role": "system", "content": "Always answer in French."} for turn in model.seen[1:-2])
    assert answer[0]["content"].startswith("Always answer in French.") and answer[1:3] == history
    assert result.content == "4 et 9."


def test_plan_mode_with_one_step_asks_the_question_as_is_and_text_is_the_answer() -> None:
    model = _Recording([{"content": "Say hello."}, {"content": "Bonjour"}])
    ask = "Say hello in French, and square nothing."
    result = Agent(model, [slow_square], plan=True).run(ask)  # type: ignore[arg-type]
    assert result.content == "Bonjour" and result.stopped == "answer"
    assert "tool_choice" not in model.calls[1]["options"]  # tools stay optional on the unsplit question
    assert model.seen[1][-1] == {"role": "user", "content": ask}


def test_plan_mode_respects_max_steps_and_still_answers() -> None:
    replies = [{"content": "a\nb\nc\nd"}, {"calls": [("slow_square", '{"x": 0}')]}, {"content": "0"}]
    model = _Recording([*replies, {"calls": [("slow_square", '{"x": 1}')]}, {"content": "0, 1"}])
    result = Agent(model, [slow_square], plan=True, max_steps=2).run("Square 0, 1, 2 and 3.")  # type: ignore[arg-type]
    assert len(result.tools_ran) == 2 and result.stopped == "answer" and result.content == "0, 1"
    assert len(model.calls) == 5  # plan, step a (a call, then its text), step b's call: the budget; answer


def test_plan_mode_finishes_a_two_part_task_on_the_default_model(qwen: pyshim.Model) -> None:
    # The plain loop's failure on this model: after get_weather it repeats the call and
    # answers with the weather only (seen in make bench-agent when this was written).
    qwen.reset()
    agent = Agent(qwen, [get_weather, multiply], system=SYSTEM, plan=True, temperature=0, max_tokens=120)
    result = agent.run("What is the weather in Oslo, and what is 17 times 23?")
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in result.tool_calls]
    assert ("get_weather", {"city": "Oslo"}) in calls
    assert any(name == "multiply" and sorted(args.values()) == [17, 23] for name, args in calls)
    answer = result.content or ""
    assert result.stopped == "answer" and "391" in answer and ("18" in answer or "cloudy" in answer)


def test_plan_mode_keeps_the_callers_response_format_for_the_answer_only() -> None:
    fmt = {"type": "json_object"}
    model = _Recording([{"content": "Square 2.\nSquare 3."}, {"calls": [("slow_square", '{"x": 2}')]}])
    model.replies += [{"content": "4"}, {"calls": [("slow_square", '{"x": 3}')]}, {"content": "9"}]
    model.replies += [{"content": "none"}, {"content": '{"squares": [4, 9]}'}]
    Agent(model, [slow_square], plan=True, response_format=fmt).run("Square 2 and 3.")  # type: ignore[arg-type]
    assert [c["options"].get("response_format") for c in model.calls] == [None, fmt, fmt, fmt, fmt, None, fmt]


# -- the plain loop's defects (#37 item 3) ---------------------------------------------------------


def km_to_miles(km: float) -> float:
    """Convert kilometres to miles.

    Args:
        km: the distance in kilometres.
    """
    return round(km * 0.621371, 3)


def test_the_first_nudge_offers_the_tools_that_have_not_run() -> None:
    """A repeat after the first tool must not shut out the second: the nudge turn is offered
    exactly the tools that have not run, and the one it calls runs."""
    model = _Recording(
        [
            {"calls": [("km_to_miles", '{"km": 42}')]},
            {"calls": [("km_to_miles", '{"km": 42}')]},  # stuck: a repeat
            {"calls": [("multiply", '{"a": 26.098, "b": 3}')]},
            {"content": "26.098 miles; times 3 is 78.294."},
        ]
    )
    result = Agent(model, [km_to_miles, multiply], plan=False).run("Convert 42 km to miles, then multiply by 3.")  # type: ignore[arg-type]
    assert result.stopped == "answer" and [m["name"] for m in result.tools_ran] == ["km_to_miles", "multiply"]
    offered = model.calls[2]["tools"]
    assert [t["function"]["name"] for t in offered] == ["multiply"]
    assert model.calls[2]["options"]["tool_choice"] == "auto"
    assert "multiply" in model.seen[2][-1]["content"]  # the nudge names it
    assert [t["function"]["name"] for t in model.calls[3]["tools"]] == ["km_to_miles", "multiply"]


def test_the_second_nudge_turns_tools_off_and_a_written_repeat_gets_the_answer_turn() -> None:
    repeat = '{"name": "slow_square", "arguments": {"x": 4}}'
    model = _Recording(
        [
            {"calls": [("slow_square", '{"x": 4}')]},
            {"calls": [("slow_square", '{"x": 4}')]},  # nudge 1: boom has not run, but is not asked for
            {"calls": [("slow_square", '{"x": 4}')]},  # nudge 2: tools off
            {"content": repeat},  # the repeat written as text: the answer turn from the facts
            {"content": "4 squared is 16."},
        ]
    )
    result = Agent(model, [slow_square, boom], plan=False).run("What is 4 squared?")  # type: ignore[arg-type]
    # boom has not run, but nothing in the question asks for it: neither offered nor named
    assert model.calls[2]["tools"] is None and "boom" not in model.seen[2][-1]["content"]
    assert model.calls[3]["tools"] is None and model.calls[3]["options"]["tool_choice"] == "none"
    assert model.calls[4]["tools"] is None  # the answer turn: question and results only
    assert "slow_square(x=4) returned: 16" in model.seen[4][-1]["content"]
    assert result.stopped == "answer" and result.content == "4 squared is 16."
    assert len(result.tools_ran) == 1


def test_a_call_written_as_text_is_run_when_new_and_reported_when_it_is_all_there_is() -> None:
    model = _Scripted([{"content": '```json\n{"name": "slow_square", "arguments": {"x": 5}}\n```'}, {"content": "25"}])
    result = Agent(model, [slow_square], plan=False).run("What is 5 squared?")  # type: ignore[arg-type]
    assert result.tools_ran[0]["content"] == "25" and result.stopped == "answer"
    call = result.messages[1]
    assert call["tool_calls"][0]["function"]["name"] == "slow_square" and call["content"] is None
    stuck = '{"name": "slow_square", "arguments": {"x": 5}}'
    model = _Scripted([{"calls": [("slow_square", '{"x": 5}')]}] + [{"content": stuck}] * 4)
    result = Agent(model, [slow_square], plan=False).run("What is 5 squared?")  # type: ignore[arg-type]
    assert result.stopped == "call_as_text" and result.content == stuck


def test_a_dict_tool_without_a_handler_is_refused() -> None:
    schema = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    with pytest.raises(InvalidTool, match=r"lookup.*handlers"):
        Agent(_Scripted([]), [schema], plan=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidTool, match="'nope'"):
        Agent(_Scripted([]), [schema], plan=False, handlers={"lookup": lambda: 1, "nope": lambda: 2})  # type: ignore[arg-type]
    assert Agent(_Scripted([]), [schema], plan=False, handlers={"lookup": lambda: 1}).runners  # type: ignore[arg-type]


def test_qwen_runs_the_second_tool_after_a_repeat(qwen: pyshim.Model) -> None:
    """The issue's program on the default model: before, the nudge forbade every tool after one
    repeat and multiply never ran (answer "26.098", stopped="answer")."""
    result = Agent(qwen, [km_to_miles, multiply], plan=False).run(
        "Convert 42 km to miles, then multiply the result by 3."
    )
    assert {m["name"] for m in result.tools_ran} == {"km_to_miles", "multiply"}
    assert result.stopped == "answer" and "26.098" in (result.content or "")
