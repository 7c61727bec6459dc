"""A few tasks of the multi-step agent benchmark (bench/agent_tasks.py) on the default model,
so that the harness and the behaviour it measures cannot rot. The benchmark itself, with
every task and the single-call set, is `make bench-agent` (docs/bench-agent-tasks.md)."""

from __future__ import annotations

import pytest

import pyshim
from bench.agent_tasks import TASKS, run_task, states

# Tasks qwen2.5-coder-0.5b solves in docs/bench-agent-tasks.md: with the plain loop, the demo's
# task; with plan=True, two the plain loop fails (two tools; a step that uses the first result).
# Kept small for make test's time budget; the benchmark runs all 22.
SUBSET = [(0, False), (1, True), (10, True)]


@pytest.mark.parametrize(("index", "plan"), SUBSET)
def test_multi_step_task_is_solved(qwen: pyshim.Model, index: int, plan: bool) -> None:
    r = run_task(qwen, TASKS[index], plan=plan)
    assert r["solved"], r
    assert len(r["calls"]) >= len(TASKS[index].expect)


def test_the_check_reads_values_not_words() -> None:
    assert states("It is 23.30 miles.", 23.3014) and states("about 1,024", 1024)
    assert not states("It is 23.4 miles.", 23.3014) and not states("no numbers", 7)
