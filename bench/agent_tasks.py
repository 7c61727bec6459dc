"""Can a small model finish a tool task? Multi-step tasks through ``pyshim.Agent``, and single calls.

Two fixed suites over deterministic tools (``bench/agent_task_set.py``), greedy decoding, a fresh
model state per task, each split into a development half and a report half that nothing was
tuned against; the report gives both halves and the gap:

- multi-step: independent parts, data-dependent chains, a step no tool fits, a question that needs
  no tool, a tool that fails, a result that changes the plan (``check``: every expected value
  stated, each derived by a tool; every needed call made, none forbidden, no stray tool; the answer
  is text, not an echo of the facts or a call);
- single-call: one ``generate``; solved when the model calls the right tool with the right
  arguments, or, where no tool fits, answers in text without calling one.

This is a benchmark of outcomes, not of time: nothing here is timed.

    python -m bench.agent_tasks [--models qwen2.5-coder-0.5b-instruct ...] [--halves dev report]
        [--modes loop plan] [--suite multi single] [--out docs/bench-agent-tasks.md]

The raw runs of the published report are kept beside it (``docs/bench-agent-tasks.json``): a
batch or a mode run alone (``--batch fifth --json new.json``) joins them task by task with
``--load docs/bench-agent-tasks.json new.json --json docs/bench-agent-tasks.json --out
docs/bench-agent-tasks.md``, and each mode's line names every commit its tasks ran at.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

import pyshim
from bench.agent_peers import PEERS, run_peer
from bench.agent_task_set import SEEN, SINGLE, TASKS, TOOLS, Call, Single, Task
from bench.common.fixtures import ALL_MODELS
from bench.common.provenance import args_command, commit, stamp
from bench.common.systems import door_server
from pyshim import Agent, AgentResult, models
from pyshim.tools import as_tool

SYSTEM = (
    "Answer the user's questions. To get facts, call tools. Once you have the tool results, "
    "respond with a short plain-text answer that states the results."
)
MODELS = ALL_MODELS
MODES = {"loop": {"plan": False}, "plan": {"plan": True}}
MODE_TITLE = {
    "loop": "the plain loop (`plan=False`)",
    "plan": "the planner (`plan=True`)",
    "openai-agents": "openai-agents through the door",
    "pydantic-ai": "pydantic-ai through the door",
}
MAX_STEPS = 6
# A framework's turn limit: pyshim's rounds of calls, and the answer's turn.
PEER_TURNS = MAX_STEPS + 1

FALSE_ANSWER = "a non-answer reported as the answer"
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def numbers_in(text: str) -> list[float]:
    out = []
    for m in _NUMBER.findall(text or ""):
        with contextlib.suppress(ValueError):
            out.append(float(m.replace(",", "")))
    return out


def states(text: str, value: float | str) -> bool:
    """Does the text state this value? A number rounded as a person would (to 2 decimals or
    better); a word or phrase as a whole, in any case."""
    if isinstance(value, str):
        return re.search(rf"\b{re.escape(value)}\b", text or "", re.IGNORECASE) is not None
    return any(close(n, value) for n in numbers_in(text))


def close(n: float, value: float) -> bool:
    """``n`` is ``value`` as a person would round it (to 2 decimals, or 1e-4 of it)."""
    return abs(n - value) <= max(0.006, 1e-4 * abs(value))


def _matches(call: dict[str, Any], want: Call) -> bool:
    name, args = want
    if call["function"]["name"] != name:
        return False
    try:
        got = json.loads(call["function"]["arguments"] or "{}")
    except json.JSONDecodeError:
        return False
    return isinstance(got, dict) and args_match(got, args)


def args_match(got: dict[str, Any], want: dict[str, Any]) -> bool:
    for k, v in want.items():
        g = got.get(k)
        if isinstance(v, (int, float)) and isinstance(g, (int, float)):
            if abs(g - v) > 1e-6:
                return False
        elif isinstance(v, str) and isinstance(g, str):
            if g.strip().lower() != v.lower():
                return False
        elif g != v:
            return False
    return True


def echoes(answer: str, tool_names: Sequence[str]) -> bool:
    """An answer that only repeats the facts block or writes calls: a tool's name followed by an
    argument list, or the facts' own wording."""
    if re.search(r"\breturned:|^\s*facts:", answer, re.IGNORECASE | re.MULTILINE):
        return True
    return any(re.search(rf"\b{re.escape(n)}\s*\(", answer) for n in tool_names)


_CALL_SHAPED = re.compile(
    r'^\s*(?:[{\[]|```|<tool_call>)|"(?:name|function)"\s*:.*"(?:arguments|parameters)"\s*:', re.DOTALL
)


def false_answer(answer: str, prompt: str) -> bool:
    """A non-answer an agent reported as its answer: empty, a call (or anything else JSON-shaped)
    written as text, or the request repeated back. The benchmark's own reading, independent of
    the one ``pyshim.answers`` makes, so that the agent is not graded by its own judgement."""
    words = re.findall(r"\w+", answer.lower())
    return not words or bool(_CALL_SHAPED.search(answer)) or words == re.findall(r"\w+", prompt.lower())


def check(task: Task, r: AgentResult) -> list[str]:
    """Why the run does not solve the task (empty: solved)."""
    answer = r.content or ""
    calls = r.tool_calls
    why = [] if r.stopped == "answer" and answer.strip() else [f"stopped {r.stopped}"]
    if r.stopped == "answer" and false_answer(answer, task.prompt):
        why.append(FALSE_ANSWER)
    why += [f"missing {v}" for v in task.expect if not states(answer, v)]
    why += [f"no call {n}{a or ''}" for n, a in task.needs if not any(_matches(c, (n, a)) for c in calls)]
    why += [f"forbidden {n}{a}" for n, a in task.forbid if any(_matches(c, (n, a)) for c in calls)]
    allowed = {n for n, _ in task.needs} | set(task.allow)
    why += sorted({f"stray {c['function']['name']}" for c in calls if c["function"]["name"] not in allowed})
    if echoes(answer, [t.__name__ for t in TOOLS]):
        why.append("echoes the facts")
    if task.no_invented:
        known = numbers_in(task.prompt) + [n for m in r.tools_ran for n in numbers_in(str(m["content"]))]
        invented = [n for n in numbers_in(answer) if not any(close(n, k) for k in known)]
        why += [f"invented {n:g}" for n in invented]
    return why + [f"{name}: {w}" for name in task.fails if (w := failure_unsaid(answer, name))]


_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_FAILED = re.compile(r"\b(?:not|no|unknown|unable|cannot|couldn't|could not|n't|fail\w*|error|unavailable)\b", re.I)


def failure_unsaid(answer: str, name: str) -> str:
    """What is wrong with how the answer treats a lookup that failed for ``name`` ("" if nothing):
    each sentence naming it must state no number, and one must say the lookup found nothing."""
    said = [s for s in _SENTENCE.split(answer) if re.search(rf"\b{re.escape(name)}\b", s, re.I)]
    if any(numbers_in(s) for s in said):
        return "a number stated for it"
    return "" if any(_FAILED.search(s) for s in said) else "its failure not said"


def run_task(
    model: pyshim.Model, task: Task, mode: str = "plan", door: tuple[str, str] | None = None
) -> dict[str, Any]:
    """One task in one mode: pyshim's Agent in process, or a framework (``door``: the url and
    model name of a ``pyshim serve`` process serving the same model file)."""
    if mode in PEERS:
        assert door is not None
        r = run_peer(mode, *door, TOOLS, SYSTEM, task.prompt, max_tokens=160, max_turns=PEER_TURNS)
    else:
        model.reset()  # the same batches on every run, whatever ran before (FACTS.md)
        agent = Agent(model, TOOLS, system=SYSTEM, max_steps=MAX_STEPS, temperature=0, max_tokens=160, **MODES[mode])
        r = agent.run(task.prompt)
    why = check(task, r)
    return {
        "prompt": task.prompt,
        "family": task.family,
        "half": task.half,
        "solved": not why,
        "why": why,
        "stopped": r.stopped,
        "error": r.error,
        "calls": [f"{c['function']['name']}({c['function']['arguments']})" for c in r.tool_calls],
        "answer": r.content,
        "turns": len(r.turns),
    }


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
    return {"prompt": case.prompt, "half": case.half, "solved": ok, "got": got}


def progress(r: dict[str, Any]) -> dict[str, Any]:
    mark = "ok " if r["solved"] else "no "
    print(f"{mark} [{r['half']}] {r['prompt']}  {'; '.join(r.get('why', []))}", file=sys.stderr, flush=True)
    return r


def score(runs: list[dict[str, Any]], half: str, unseen: bool = False) -> str:
    """A half's score; with ``unseen``, less the report tasks tuned on all the same (``SEEN``)."""
    part = [r for r in runs if r["half"] == half and not (unseen and r["prompt"] in SEEN)]
    n = sum(r["solved"] for r in part)
    return f"{n}/{len(part)} ({100 * n / len(part):.0f} %)" if part else "-"


def summary(raw: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| model | suite | development half | report half | report half less the tasks seen | gap (points) "
        "| dev at the report's family mix | non-answers reported as answers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, res in raw.items():
        suites = [(MODE_TITLE[m], runs) for m, runs in res["multi"].items()] + [("single call", res["single"])]
        for title, runs in suites:
            if not runs:
                continue
            pct = {}
            for half in ("dev", "report"):
                part = [r for r in runs if r["half"] == half]
                pct[half] = 100 * sum(r["solved"] for r in part) / len(part) if part else float("nan")
            gap = pct["dev"] - pct["report"]
            mix = reweighted(runs)
            false = sum(FALSE_ANSWER in r.get("why", []) for r in runs) if "why" in runs[0] else "-"
            row = (
                f"| {name} | {title} | {score(runs, 'dev')} | {score(runs, 'report')} "
                f"| {score(runs, 'report', unseen=True)} | {gap:+.0f} | {mix} | {false} |"
            )
            lines.append(row)
    return [*lines, ""]


def reweighted(runs: list[dict[str, Any]]) -> str:
    """The development half's rate per family, weighted by the report half's family counts: what
    the report half would score if each family did as well as on the tasks the mode was tuned on."""
    dev: dict[str, list[bool]] = {}
    for r in runs:
        if r["half"] == "dev" and "family" in r:
            dev.setdefault(r["family"], []).append(r["solved"])
    report = [r.get("family") for r in runs if r["half"] == "report"]
    if not report or any(f not in dev for f in report):
        return "-"
    return f"{100 * sum(sum(dev[f]) / len(dev[f]) for f in report) / len(report):.0f} %"


def by_family(runs: list[dict[str, Any]]) -> list[str]:
    """Both halves per family: the halves hold the families in different shares (the report half
    is half chains), so the overall gap mixes how the mode generalises with what each half asks."""
    lines = ["| family | development half | report half |", "|---|---|---|"]
    for family in dict.fromkeys(r["family"] for r in runs):
        part = [r for r in runs if r["family"] == family]
        lines.append(f"| {family} | {score(part, 'dev')} | {score(part, 'report')} |")
    return [*lines, ""]


def multi_table(mode: str, runs: list[dict[str, Any]]) -> list[str]:
    lines = [f"Multi-step, {MODE_TITLE[mode]}: dev {score(runs, 'dev')}, report {score(runs, 'report')}.", ""]
    lines += by_family(runs)
    lines += ["| half | family | task | solved | calls | answer |", "|---|---|---|---|---|---|"]
    for r in runs:
        answer = (r["answer"] or f"({r['stopped']})").replace("\n", " ").replace("|", "/")[:110]
        mark = "yes" if r["solved"] else "no: " + ", ".join(r["why"]).replace("|", "/")
        calls = "; ".join(r["calls"]).replace("|", "/")
        lines.append(f"| {r['half']} | {r['family']} | {r['prompt']} | {mark} | {calls} | {answer} |")
    return [*lines, ""]


def single_table(single: list[dict[str, Any]]) -> list[str]:
    lines = [f"Single-call: dev {score(single, 'dev')}, report {score(single, 'report')}.", ""]
    lines += ["| half | prompt | right | got |", "|---|---|---|---|"]
    for r in single:
        got = "; ".join(r["got"]).replace("|", "/").replace("\n", " ")[:100]
        lines.append(f"| {r['half']} | {r['prompt']} | {'yes' if r['solved'] else 'no'} | {got} |")
    return [*lines, ""]


def run_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every requested mode and suite on one catalogue model; the peers through a door of their own."""
    ran_at = commit()  # the code that runs is what was there at the start (a commit made meanwhile is not it)
    tasks = [
        t
        for t in TASKS
        if t.half in args.halves
        and (not args.family or t.family in args.family)
        and (args.batch is None or t.batch == args.batch)
    ]
    singles = [s for s in SINGLE if s.half in args.halves]
    with contextlib.ExitStack() as stack:
        m = stack.enter_context(pyshim.Model(models.path(name), n_ctx=4096, n_threads=args.threads))
        door = None
        if any(mode in PEERS for mode in args.modes):
            url = stack.enter_context(door_server(str(models.path(name))))
            door = (url, httpx.get(f"{url}/health").json()["model"])
        multi = {
            mode: [progress(run_task(m, t, mode, door)) for t in tasks] for mode in args.modes if "multi" in args.suite
        }
        single = [progress(run_single(m, c)) for c in singles] if "single" in args.suite else []
    return {"multi": multi, "single": single, "commits": dict.fromkeys(multi, ran_at)}


def merged(paths: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Raw results of earlier runs (``--json``), one model's modes from several files side by side.

    A mode in several files is merged task by task (a later file's run of a task replaces an
    earlier one's), so a batch of tasks run alone (``--batch``) joins a whole run; each mode's
    commits are all those its tasks ran at. A task no longer in the set (taken out of a half) is
    not reported."""
    raw: dict[str, dict[str, Any]] = {}
    order = {(t.half, t.prompt): i for i, t in enumerate(TASKS)}
    for path in paths:
        for name, res in json.loads(path.read_text()).items():
            into = raw.setdefault(name, {"multi": {}, "single": [], "commits": {}})
            for mode, runs in res["multi"].items():
                by_task = {(r["half"], r["prompt"]): r for r in into["multi"].get(mode, [])}
                by_task.update({(r["half"], r["prompt"]): r for r in runs})
                kept = [r for key, r in by_task.items() if key in order]
                into["multi"][mode] = sorted(kept, key=lambda r: order[(r["half"], r["prompt"])])
                sha = (res.get("commits") or {}).get(mode)
                had = into["commits"].get(mode)
                into["commits"][mode] = sha if not had or had == sha else f"{had}` and `{sha}"
            into["single"] = res["single"] or into["single"]
    return raw


def peer_versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for package in ("openai-agents", "pydantic-ai-slim"):
        try:
            out.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            continue
    return ", ".join(out)


def render(raw: dict[str, dict[str, Any]]) -> str:
    sections = []
    for name, res in raw.items():
        lines = [f"## {name}", ""]
        if commits := res.get("commits"):
            ran = ", ".join(f"{MODE_TITLE[mode]} at `{sha}`" for mode, sha in commits.items())
            lines += [f"Each system's tasks ran at its own commit (the report merges runs): {ran}.", ""]
        for mode, runs in res["multi"].items():
            lines += multi_table(mode, runs)
        sections.append("\n".join(lines + (single_table(res["single"]) if res["single"] else [])))
    header = (
        "# Agent tasks: multi-step tool tasks and single calls on small models\n\n"
        f"Produced on {platform.machine()}, {os.cpu_count()} cores, {pyshim.version()}; greedy, "
        f"max_tokens 160 per turn, `pyshim.Agent` with max_steps {MAX_STEPS} and the benchmark's system prompt; "
        f"the frameworks ({peer_versions()}) with the same tools, system prompt, model and settings through "
        f"`pyshim serve`, turn limit {PEER_TURNS}. "
        "Tasks and the split: `bench/agent_task_set.py` (the report half was never run while tuning). "
        "A multi-step task is solved when the agent stops with a text answer that states every expected "
        "value (each derived by a tool, none in the question), made every needed call and no forbidden or "
        "stray one, and does not echo the facts; a non-answer (empty, a call written as text, the request "
        "repeated) reported as the answer is a failure and is counted; a single call is right when it names "
        "the right tool with the right arguments, or answers in text where no tool fits.\n\n"
    )
    return header + "\n".join(summary(raw)) + "\n" + "\n".join(sections)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--suite", nargs="+", choices=["multi", "single"], default=["multi", "single"])
    ap.add_argument(
        "--modes", nargs="+", choices=[*MODES, *PEERS], default=list(MODES), help="Agent loops and frameworks to run"
    )
    ap.add_argument("--halves", nargs="+", choices=["dev", "report"], default=["dev", "report"])
    ap.add_argument("--family", nargs="+", help="run only these task families")
    ap.add_argument("--batch", help="run only the tasks of this batch (a task's `batch` in agent_tasks.json)")
    ap.add_argument("--threads", type=int, default=0, help="n_threads (0: the library's default)")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--load", type=Path, nargs="+", help="report these --json files side by side instead of running")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    raw = merged(args.load) if args.load else {name: run_model(name, args) for name in args.models}
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1))
    body = render(raw)
    print(body, flush=True)
    if args.out:
        args.out.write_text(stamp(args_command("bench.agent_tasks")) + body)


if __name__ == "__main__":
    main()
