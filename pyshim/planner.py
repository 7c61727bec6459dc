"""Plan, act, answer: how ``Agent(plan=True)`` keeps a small model on a multi-part task.

Small models (0.5B and under) call the right tool for one question but lose the thread
of a request with several parts: after the first result they repeat the call, run on
through the tool's other arguments, or answer with one result. The plan mode splits the
work so that every model turn has one small job: list the steps (a few-shot chat of its
own, on topics unrelated to any tools), take one step per turn with a tool call required,
then write the answer from a short context holding only the question and the results.

This module owns those prompts and the parsing of the steps; it never calls the model or
a tool (the agent loops, sync and async, do both), so every loop shares it unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["PLAN_TOKENS", "answer_messages", "facts", "parse_steps", "plan_messages", "step_message"]

PLAN_TOKENS = 120  # a plan is a few short lines; more is the model running on

PLAN_SYSTEM = (
    "Split the user's request into the separate steps it asks for, one per line, in order. "
    "Write only the steps, each as a short question or instruction; do not answer them. "
    "A request that asks for one thing is one step. "
    "Do not add a step for telling, listing or summarizing the results."
)

# Shown as earlier turns of the planning chat. Their topics share nothing with any tool
# set, so they teach the form (one line per part, dependent steps in order, no summary
# step) without suggesting calls. Written into a single message instead, a 0.5B model
# copied the examples as its plan.
EXAMPLES = [
    (
        "What is the weather in Rome and the population of Madrid?",
        ["What is the weather in Rome?", "What is the population of Madrid?"],
    ),
    (
        "Compute 3 + 4, then multiply the result by 10, and tell me both results.",
        ["Compute 3 + 4.", "Multiply the result by 10."],
    ),
    ("Who wrote Hamlet and when was it written?", ["Who wrote Hamlet?", "When was Hamlet written?"]),
    (
        "What is the capital of France, of Spain and of Italy?",
        ["What is the capital of France?", "What is the capital of Spain?", "What is the capital of Italy?"],
    ),
    (
        "Look up the height of the Eiffel tower, of Big Ben and of the Colosseum.",
        [
            "Look up the height of the Eiffel tower.",
            "Look up the height of Big Ben.",
            "Look up the height of the Colosseum.",
        ],
    ),
]

ANSWER_SYSTEM = "Answer the user's question from the facts given, in plain text. State every fact's value."

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|step\s*\d+\s*[:.)-])\s*", re.IGNORECASE)


def plan_messages(question: str) -> list[dict[str, Any]]:
    """The planning chat: its instructions, the worked examples, then the request."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": PLAN_SYSTEM}]
    for request, steps in EXAMPLES:
        messages += [{"role": "user", "content": request}, {"role": "assistant", "content": "\n".join(steps)}]
    return [*messages, {"role": "user", "content": question}]


def parse_steps(text: str | None, limit: int) -> list[str]:
    """The plan's steps: one per non-empty line, list markers stripped, at most ``limit``."""
    steps = [_BULLET.sub("", line).strip() for line in (text or "").splitlines()]
    return [s for s in steps if s][:limit]


def step_message(step: str) -> dict[str, Any]:
    return {"role": "user", "content": f"Do only this step now: {step}"}


def _arguments(call: dict[str, Any]) -> str:
    raw = call["function"]["arguments"]
    try:
        args = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return str(raw)
    if not isinstance(args, dict):
        return json.dumps(args, ensure_ascii=False)
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())


def facts(results: list[tuple[dict[str, Any], str]]) -> str:
    """Each tool call and what it returned, one numbered line each."""
    return "\n".join(
        f"{i}. {call['function']['name']}({_arguments(call)}) returned: {output}"
        for i, (call, output) in enumerate(results, 1)
    )


def answer_messages(question: str, results: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
    """The short context the answer is written from: the question and the facts, no tools."""
    return [
        {"role": "system", "content": ANSWER_SYSTEM},
        {"role": "user", "content": f"Question: {question}\nFacts:\n{facts(results)}"},
    ]
