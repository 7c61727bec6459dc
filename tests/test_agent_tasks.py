"""The agent benchmark (bench/agent_tasks.py, bench/agent_task_set.py) cannot rot or flatter:

- its checker fails the answers a skeptical reader would (a value from the question, an echo of
  the facts, a missing or stray call, a number invented for a lookup that failed);
- a few report-half tasks, drawn at random with a fixed seed (not by outcome), run on the default
  model. The benchmark itself, every task on every model, is `make bench-agent`.
"""

from __future__ import annotations

import random

import pytest

import pyshim
from bench.agent_task_set import REPORT, TASKS, Task
from bench.agent_tasks import check, failure_unsaid, run_task, states
from pyshim import AgentResult


def _call(name: str, arguments: str) -> dict[str, object]:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}


def _result(answer: str, calls: list[tuple[str, str, str]], stopped: str = "answer") -> AgentResult:
    messages: list[dict[str, object]] = []
    for name, arguments, output in calls:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [_call(name, arguments)]},
            {"role": "tool", "tool_call_id": "c", "name": name, "content": output},
        ]
    return AgentResult(answer, messages, [], stopped)


CHAIN = Task(
    "Which country is Kyoto in, and what is the population of that country's capital?",
    ("Japan", 13960000),
    (("country_of", {"city": "Kyoto"}), ("capital_of", {"country": "Japan"}), ("get_population", {"city": "Tokyo"})),
)
RIGHT = [
    ("country_of", '{"city": "Kyoto"}', "Japan"),
    ("capital_of", '{"country": "Japan"}', "Tokyo"),
    ("get_population", '{"city": "Tokyo"}', "13960000"),
]


def test_the_checker_passes_a_right_run_and_fails_each_smallest_fault() -> None:
    good = "Kyoto is in Japan; its capital Tokyo has 13,960,000 people."
    assert check(CHAIN, _result(good, RIGHT)) == []
    assert check(CHAIN, _result(good.replace("13,960,000", "13,690,000"), RIGHT)) == ["missing 13960000"]
    assert "no call get_population{'city': 'Tokyo'}" in check(CHAIN, _result(good, RIGHT[:2]))  # from memory
    stray = [*RIGHT, ("calculator", '{"expression": "2 * 3"}', "6")]
    assert check(CHAIN, _result(good, stray)) == ["stray calculator"]
    assert check(CHAIN, _result(good, RIGHT, stopped="max_steps")) == ["stopped max_steps"]
    echo = '1. country_of(city="Kyoto") returned: Japan ... get_population returned: 13960000'
    assert "echoes the facts" in check(CHAIN, _result(echo + " " + good, RIGHT))


def test_a_failed_lookup_must_be_said_and_never_given_a_number() -> None:
    task = next(t for t in TASKS if t.fails == ("Atlantis",))
    calls = [
        ("get_population", '{"city": "Atlantis"}', "error: KeyError: unknown city 'Atlantis'"),
        ("get_population", '{"city": "Lima"}', "10004000"),
    ]
    assert check(task, _result("I could not find Atlantis. Lima has 10004000 people.", calls)) == []
    assert check(task, _result("Atlantis: 10004000. Lima: 10004000.", calls)) == ["Atlantis: a number stated for it"]
    assert check(task, _result("Lima has 10004000 people.", calls)) == ["Atlantis: its failure not said"]
    assert "invented 500" in check(task, _result("Atlantis has 500 people (unknown). Lima 10004000.", calls))
    assert failure_unsaid("Gotham is not a city I know.", "Gotham") == ""


def test_the_check_reads_values_not_words() -> None:
    assert states("It is 23.30 miles.", 23.3014) and states("about 1,024", 1024)
    assert not states("It is 23.4 miles.", 23.3014) and not states("no numbers", 7)
    assert states("paid in Norwegian krone", "krone") and not states("kroner", "krone")


def test_every_expected_value_is_derived_by_a_tool_not_read_from_the_question() -> None:
    for task in TASKS:
        assert not [v for v in task.expect if states(task.prompt, v)], task.prompt
        assert task.family == "no tool" or task.needs, task.prompt


# Drawn once, with a fixed seed, from the report half: which tasks run does not depend on how
# the agent does on them. Kept to three for make test's time budget.
SAMPLE = random.Random(37).sample(range(len(REPORT)), 3)


@pytest.mark.parametrize("index", SAMPLE)
def test_a_report_half_task_on_the_default_model(qwen: pyshim.Model, index: int) -> None:
    r = run_task(qwen, REPORT[index], "plan")
    assert r["stopped"] != "error"
    # The benchmark's figure for the report half is the claim; here each drawn task must still
    # run to an answer or a bounded stop, and a solved one must have made its needed calls.
    assert r["stopped"] in ("answer", "max_steps", "call_as_text"), r
    if r["solved"]:
        assert len(r["calls"]) >= len(REPORT[index].needs)
