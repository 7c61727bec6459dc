"""Can a small model finish a tool task? Multi-step tasks through ``pyshim.Agent``, and single calls.

Two fixed suites over deterministic tools (arithmetic, unit conversion, a price list, an
inventory, city facts), greedy decoding, a fresh model state per task:

- multi-step: each task needs 2–3 tool calls; it is solved when the agent stops with an
  answer whose text states every expected value (checked by value, not wording);
- single-call: one ``generate``; solved when the model calls the right tool with the right
  arguments, or, where no tool fits, answers in text without calling one.

This is a benchmark of outcomes, not of time: nothing here is timed.

    python -m bench.agent_tasks [--models qwen2.5-coder-0.5b-instruct gemma-3-270m smollm2-135m-instruct]
        [--suite multi single] [--out docs/bench-agent-tasks.md]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyshim
from bench.provenance import args_command, stamp
from pyshim import Agent, models
from pyshim.demo_tools import calculator, convert_units
from pyshim.tools import as_tool

SYSTEM = (
    "Answer the user's questions. To get facts, call tools. Once you have the tool results, "
    "respond with a short plain-text answer that states the results."
)

PRICES = {"apple": 0.4, "pear": 0.55, "banana": 0.25, "melon": 2.8, "coffee": 7.5, "bread": 2.2}
STOCK = {"apple": 120, "pear": 75, "banana": 240, "melon": 18, "coffee": 42, "bread": 30}
CITIES = {
    "Paris": {"population": 2102650, "country": "France", "temperature_c": 18},
    "Oslo": {"population": 709037, "country": "Norway", "temperature_c": 7},
    "Lima": {"population": 10004000, "country": "Peru", "temperature_c": 22},
    "Cairo": {"population": 10230350, "country": "Egypt", "temperature_c": 31},
    "Tokyo": {"population": 13960000, "country": "Japan", "temperature_c": 16},
}
MODELS = ["qwen2.5-coder-0.5b-instruct", "gemma-3-270m", "smollm2-135m-instruct"]
Item = Literal["apple", "pear", "banana", "melon", "coffee", "bread"]


def get_price(item: Item) -> str:
    """Get the unit price of a shop item in euros.

    Args:
        item: the item, singular.
    """
    return f"{PRICES[item]} EUR"


def get_stock(item: Item) -> str:
    """Get how many units of a shop item are in stock.

    Args:
        item: the item, singular.
    """
    return str(STOCK[item])


def get_weather(city: str) -> str:
    """Get the current temperature in a city, in degrees Celsius.

    Args:
        city: the city name, e.g. "Paris".
    """
    if city not in CITIES:
        raise KeyError(f"unknown city {city!r}; known: {', '.join(CITIES)}")
    return json.dumps({"city": city, "temperature_c": CITIES[city]["temperature_c"]})


def get_population(city: str) -> str:
    """Get the population of a city.

    Args:
        city: the city name, e.g. "Paris".
    """
    if city not in CITIES:
        raise KeyError(f"unknown city {city!r}; known: {', '.join(CITIES)}")
    return str(CITIES[city]["population"])


TOOLS: list[Callable[..., Any]] = [calculator, convert_units, get_price, get_stock, get_weather, get_population]


@dataclass(frozen=True)
class Task:
    prompt: str
    expect: tuple[float, ...]  # every value the answer must state


@dataclass(frozen=True)
class Single:
    prompt: str
    tool: str | None  # None: no tool fits, the answer must be text
    args: dict[str, Any] = field(default_factory=dict)  # checked by value (numbers within 1e-6)


# 2–3 calls each; the expected values are what the tools return.
TASKS = [
    Task(
        "Use the tools to compute 12.5 times 3, and to convert 37.5 km to miles, then tell me both results.",
        (37.5, 23.3014),
    ),
    Task("What is the price of a melon and how many melons are in stock?", (2.8, 18)),
    Task("Convert 10 kg to pounds and 5 miles to km.", (22.0462, 8.0467)),
    Task("What is the temperature in Oslo and in Cairo right now?", (7, 31)),
    Task("What are the populations of Paris and Oslo?", (2102650, 709037)),
    Task("Compute 144 / 12 and 17 * 23, then tell me both results.", (12, 391)),
    Task("How many bananas and how many pears are in stock?", (240, 75)),
    Task("What is the price of coffee? Then compute the cost of 4 of them with the calculator.", (7.5, 30)),
    Task("How many apples are in stock? Then use the calculator to compute that number times 0.4.", (120, 48)),
    Task("Convert 30 degrees Celsius to Fahrenheit and 100 feet to meters.", (86, 30.48)),
    Task("What is the temperature in Tokyo? Then convert it from Celsius to Fahrenheit.", (16, 60.8)),
    Task("Compute 2 ** 10 and 1000 - 1, then tell me both results.", (1024, 999)),
    Task("Get the price of bread and the price of a pear.", (2.2, 0.55)),
    Task("What is the population of Lima? Then compute that number divided by 2.", (10004000, 5002000)),
    Task("Convert 3 gallons to liters and 42 km to miles.", (11.3562, 26.0976)),
    Task("How many melons are in stock, and what is the temperature in Oslo?", (18, 7)),
    Task("Compute 19 * 21, then convert that many km to miles.", (399, 247.927)),
    Task("What is the price of an apple, of a banana and of a melon?", (0.4, 0.25, 2.8)),
    Task("What is the temperature in Lima, in Oslo and in Tokyo?", (22, 7, 16)),
    Task("Compute 7 * 8, 81 / 9 and 15 + 27, then tell me all three results.", (56, 9, 42)),
    Task("How much coffee is in stock, and what does one coffee cost?", (42, 7.5)),
    Task("Convert 50 lb to kg and 2 liters to gallons.", (22.6796, 0.5283)),
]

SINGLE = [
    Single("What is 37 times 43?", "calculator"),
    Single("Compute (15 + 9) / 4.", "calculator"),
    Single("Convert 12 miles to kilometers.", "convert_units", {"value": 12, "from_unit": "miles", "to_unit": "km"}),
    Single("Convert 70 kg to pounds.", "convert_units", {"value": 70, "from_unit": "kg", "to_unit": "pounds"}),
    Single("How warm is it in Oslo?", "get_weather", {"city": "Oslo"}),
    Single("What is the weather in Tokyo?", "get_weather", {"city": "Tokyo"}),
    Single("How many people live in Cairo?", "get_population", {"city": "Cairo"}),
    Single("What is the population of Lima?", "get_population", {"city": "Lima"}),
    Single("How much does a melon cost?", "get_price", {"item": "melon"}),
    Single("What is the price of bread?", "get_price", {"item": "bread"}),
    Single("How many pears are in stock?", "get_stock", {"item": "pear"}),
    Single("How many units of coffee do we have in stock?", "get_stock", {"item": "coffee"}),
    Single(
        "Convert 20 Celsius to Fahrenheit.",
        "convert_units",
        {"value": 20, "from_unit": "celsius", "to_unit": "fahrenheit"},
    ),
    Single("Say hello in French.", None),
    Single("Write a haiku about autumn.", None),
    Single("What is the capital of Italy?", None),
    Single("Thank you, that is all.", None),
    Single("Explain in one sentence what a tool call is.", None),
]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def numbers_in(text: str) -> list[float]:
    out = []
    for m in _NUMBER.findall(text or ""):
        with contextlib.suppress(ValueError):
            out.append(float(m.replace(",", "")))
    return out


def states(text: str, value: float) -> bool:
    """Does the text state this value (rounded as a person would, to 2 decimals or better)?"""
    return any(abs(n - value) <= max(0.006, 1e-4 * abs(value)) for n in numbers_in(text))


def run_task(model: pyshim.Model, task: Task, max_steps: int = 6, plan: bool = False) -> dict[str, Any]:
    model.reset()  # the same batches on every run, whatever ran before (FACTS.md)
    agent = Agent(model, TOOLS, system=SYSTEM, max_steps=max_steps, plan=plan, temperature=0, max_tokens=160)
    r = agent.run(task.prompt)
    calls = [f"{c['function']['name']}({c['function']['arguments']})" for c in r.tool_calls]
    missing = [v for v in task.expect if not states(r.content or "", v)]
    return {
        "prompt": task.prompt,
        "solved": r.stopped == "answer" and not missing,
        "stopped": r.stopped,
        "calls": calls,
        "missing": missing,
        "answer": r.content,
        "turns": len(r.turns),
    }


def args_match(got: dict[str, Any], want: dict[str, Any]) -> bool:
    for k, v in want.items():
        g = got.get(k)
        if isinstance(v, (int, float)) and isinstance(g, (int, float)):
            if abs(g - v) > 1e-6:
                return False
        elif g != v:
            return False
    return True


def run_single(model: pyshim.Model, case: Single) -> dict[str, Any]:
    model.reset()
    schemas = [as_tool(t).schema for t in TOOLS]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": case.prompt}]
    r = model.generate(messages, schemas, temperature=0, max_tokens=160)
    calls = r["tool_calls"]
    if case.tool is None:
        ok = not calls and bool((r["content"] or "").strip())
    else:
        try:
            args = json.loads(calls[0]["function"]["arguments"]) if calls else {}
        except json.JSONDecodeError:
            args = {}
        ok = bool(calls) and calls[0]["function"]["name"] == case.tool and args_match(args, case.args)
    got = [f"{c['function']['name']}({c['function']['arguments']})" for c in calls] or [repr((r["content"] or "")[:60])]
    return {"prompt": case.prompt, "solved": ok, "got": got}


def progress(r: dict[str, Any]) -> dict[str, Any]:
    print(f"{'ok ' if r['solved'] else 'no '} {r['prompt']}", file=sys.stderr, flush=True)
    return r


def markdown(name: str, multi: dict[str, list[dict[str, Any]]], single: list[dict[str, Any]]) -> str:
    lines = [f"## {name}", ""]
    for mode, runs in multi.items():
        lines += multi_table(mode, runs)
    lines += single_table(single)
    return "\n".join(lines)


MODE_TITLE = {"loop": "Agent(...), the plain loop", "plan": "Agent(..., plan=True)"}


def multi_table(mode: str, multi: list[dict[str, Any]]) -> list[str]:
    lines = []
    if multi:
        n = sum(r["solved"] for r in multi)
        lines += [f"Multi-step, {MODE_TITLE[mode]}: **{n}/{len(multi)} solved ({100 * n / len(multi):.0f} %)**.", ""]
        lines += ["| # | solved | calls | answer |", "|---|---|---|---|"]
        for i, r in enumerate(multi, 1):
            answer = (r["answer"] or f"({r['stopped']})").replace("\n", " ").replace("|", "/")[:120]
            mark = "yes" if r["solved"] else f"no (missing {', '.join(map(str, r['missing'])) or r['stopped']})"
            lines.append(f"| {i} | {mark} | {'; '.join(r['calls']).replace('|', '/')} | {answer} |")
        lines.append("")
    return lines


def single_table(single: list[dict[str, Any]]) -> list[str]:
    lines = []
    if single:
        n = sum(r["solved"] for r in single)
        lines += [f"Single-call: **{n}/{len(single)} right ({100 * n / len(single):.0f} %)**.", ""]
        lines += ["| prompt | right | got |", "|---|---|---|"]
        for r in single:
            got = "; ".join(r["got"]).replace("|", "/").replace("\n", " ")[:100]
            lines.append(f"| {r['prompt']} | {'yes' if r['solved'] else 'no'} | {got} |")
        lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--suite", nargs="+", choices=["multi", "single"], default=["multi", "single"])
    ap.add_argument(
        "--modes", nargs="+", choices=["loop", "plan"], default=["loop", "plan"], help="Agent loops to run the tasks"
    )
    ap.add_argument("--tasks", type=int, default=len(TASKS), help="run only the first N multi-step tasks")
    ap.add_argument("--threads", type=int, default=0, help="n_threads (0: the library's default)")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sections, raw = [], {}
    for name in args.models:
        with pyshim.Model(models.path(name), n_ctx=4096, n_threads=args.threads) as m:
            multi = {
                mode: [progress(run_task(m, t, plan=mode == "plan")) for t in TASKS[: args.tasks]]
                for mode in args.modes
                if "multi" in args.suite
            }
            single = [progress(run_single(m, c)) for c in SINGLE] if "single" in args.suite else []
        raw[name] = {"multi": multi, "single": single}
        section = markdown(name, multi, single)
        print(section, flush=True)
        sections.append(section)
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1))
    if args.out:
        header = (
            "# Agent tasks: multi-step tool tasks and single calls on small models\n\n"
            f"Produced by `python -m bench.agent_tasks --out {args.out}` on {platform.machine()}, "
            f"{os.cpu_count()} cores, {pyshim.version()}; greedy, max_tokens 160 per turn, "
            "`pyshim.Agent` with max_steps 6 and the benchmark's system prompt, as the plain loop and with "
            "`plan=True` (the model lists the steps, takes one per turn, answers from the results). "
            "A multi-step task is solved when "
            "the agent answers and the answer states every expected value; a single call is right when it "
            "names the right tool with the right arguments, or answers in text where no tool fits.\n\n"
        )
        args.out.write_text(stamp(args_command("bench.agent_tasks")) + header + "\n".join(sections))


if __name__ == "__main__":
    main()
