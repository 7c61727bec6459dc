"""Self-speculative decoding: decode rate with and without drafts, beside llama-server with the
same speculation and llama-bench tg128, from one run.

Four kinds of output, greedy, on one model: the 20-turn agent session's replies (tool calls and
one-sentence answers, ``bench.agent_session``), quoting a tool result back, editing a code
block (both copy from the context), and free prose (where drafts mostly fail: the cost of
trying). Each is decoded by pyshim with ``speculative`` off and ``ngram-simple``, and, where
``make peers`` built it, by llama-server with ``--spec-type ngram-simple`` (the same n-gram
sizes) and without. The rate is tokens decoded over the decode wall time each reports for the
same request (pyshim's ``ms_decode``, llama-server's ``timings.predicted_ms``), and the same
outputs are checked token for token where both speculate or not.

The tasks come in two halves. The drafting pace (``native/speculation.h``) was developed on the
development half; the report half (another agent, another JSON, another code block, another
prose request) was written before any measurement of it and is never tuned on. Both are
reported. "Beside" measures what one call's drafts cost a call decoding next to it on the same
handle: a free-prose call's decode rate while a quoting call runs beside it, with and without
speculation for the quoting call.

    python -m bench.speculative [--model qwen2.5-coder-0.5b-instruct] [--turns 20] [--out docs/bench-speculative.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pyshim
from bench.common.fixtures import TOOLS, conversation
from bench.common.host import llama_bench
from bench.common.provenance import publish
from bench.common.systems import PEERS, LlamaServer
from pyshim import models

SPEC = {"type": "ngram-simple", "size_n": 4, "size_m": 16}
RESULT = json.dumps(
    {"city": "Paris", "temperature_c": 18, "sky": "cloudy", "wind_kmh": 12, "humidity": 0.71, "uv_index": 3}
)
CODE = (
    "def area(width, height):\n    return width * height\n\n\ndef perimeter(width, height):\n"
    "    return 2 * (width + height)\n\n\ndef describe(width, height):\n"
    '    return f"{width}x{height}: area {area(width, height)}, perimeter {perimeter(width, height)}"\n'
)
LEDGER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_balance",
            "description": "Get the balance of a bank account",
            "parameters": {
                "type": "object",
                "properties": {"account": {"type": "string"}},
                "required": ["account"],
            },
        },
    }
]
ACCOUNTS = ["A-1042", "B-2291", "C-0375", "D-7718", "E-5530", "F-9104", "G-3367"]
ORDERS = json.dumps(
    [
        {"order": 5512, "item": "lamp", "qty": 2, "paid": True},
        {"order": 5513, "item": "chair", "qty": 1, "paid": False},
        {"order": 5514, "item": "desk", "qty": 1, "paid": True},
    ]
)
SHELF = (
    "class Shelf:\n    def __init__(self):\n        self.items = []\n\n    def add(self, item):\n"
    "        self.items.append(item)\n\n    def count(self):\n        return len(self.items)\n"
)


def ledger(turns: int) -> list[list[dict[str, Any]]]:
    """The report half's agent: a bookkeeping assistant, one balance lookup and one sentence per turn."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a bookkeeping assistant. Call get_balance, then reply in one sentence."}
    ]
    prompts = []
    for i in range(turns):
        account, balance = ACCOUNTS[i % len(ACCOUNTS)], (i * 173) % 900 - 300
        call = {"id": f"call_{i:03d}", "type": "function",
                "function": {"name": "get_balance", "arguments": json.dumps({"account": account})}}  # fmt: skip
        messages += [
            {"role": "user", "content": f"Request {i + 1}: what is the balance of account {account}? Is it overdrawn?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": json.dumps({"account": account, "balance_eur": balance, "overdrawn": balance < 0}),
            },
        ]
        prompts.append(list(messages))
        state = "overdrawn" if balance < 0 else "not overdrawn"
        messages.append({"role": "assistant", "content": f"Account {account} holds {balance} euros and is {state}."})
    return prompts


# name -> (half, tools, max_tokens); the prompts come from tasks().
KINDS: dict[str, tuple[str, list[dict[str, Any]] | None, int]] = {
    "agent session": ("development", TOOLS, 48),
    "quote": ("development", None, 96),
    "code edit": ("development", None, 160),
    "free prose": ("development", None, 160),
    "ledger agent": ("report", LEDGER_TOOLS, 48),
    "quote a list": ("report", None, 128),
    "rename in a class": ("report", None, 160),
    "free verse": ("report", None, 160),
}


def tasks(turns: int) -> dict[str, list[list[dict[str, Any]]]]:
    def one(text: str) -> list[list[dict[str, Any]]]:
        return [[{"role": "user", "content": text}]]

    return {
        "agent session": conversation(turns),
        "quote": one(f"Repeat this JSON exactly, with no other text: {RESULT}"),
        "code edit": one(f"Rename width to w everywhere and show the whole code:\n{CODE}"),
        "free prose": one("Write a short story about a lighthouse keeper."),
        "ledger agent": ledger(turns),
        "quote a list": one(f"Copy this list exactly and say nothing else: {ORDERS}"),
        "rename in a class": one(f"Rename items to books everywhere in this class and show all of it:\n{SHELF}"),
        "free verse": one("Write a poem about a night market in the rain."),
    }


def _rate(decoded: int, ms: float) -> float:
    return decoded / (ms / 1000) if ms > 0 else float("nan")


def run_pyshim(model: str, prompts: dict[str, list[list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with pyshim.Model(model, n_ctx=8192, temperature=0) as m:
        for task, turns in prompts.items():
            for spec in ("off", "on"):
                out[f"{task}/{spec}"] = _replay(m, task, turns, SPEC if spec == "on" else "off")
            out[f"{task}/gaps"] = _gaps(m, task, turns, out[f"{task}/off"]["texts"], out[f"{task}/on"]["texts"])
    return out


def _gaps(m: pyshim.Model, task: str, turns: list[list[dict[str, Any]]], off: list[Any], on: list[Any]) -> list[float]:
    """Where an output with speculation differs from the one without, how far apart (in nats)
    the two likeliest tokens were at the first token that differs, from a run without
    speculation with logprobs: a near-tie is what the larger batch's rounding can flip."""
    _, tools, max_tokens = KINDS[task]
    gaps = []
    for messages, a, b in zip(turns, off, on, strict=True):
        if a == b:
            continue
        if not a[0] or not b[0]:  # a tool call: its text is not in the result
            gaps.append(float("nan"))
            continue
        r = m.generate(messages, tools, max_tokens=max_tokens, speculative="off", logprobs=True, top_logprobs=2)
        text, other = "", b[0] or ""
        for entry in r["logprobs"]["content"]:
            if not other.startswith(text + entry["token"]):
                top = entry["top_logprobs"]
                gaps.append(top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf"))
                break
            text += entry["token"]
    return gaps


def _replay(m: pyshim.Model, task: str, turns: list[list[dict[str, Any]]], spec: Any) -> dict[str, Any]:
    _, tools, max_tokens = KINDS[task]
    decoded = drafted = accepted = 0
    ms, texts = 0.0, []
    for messages in turns:
        r = m.generate(messages, tools, max_tokens=max_tokens, speculative=spec)
        decoded += r["n_decoded"]
        drafted += r["n_drafted"]
        accepted += r["n_accepted"]
        ms += r["ms_decode"]
        texts.append((r["content"], [c["function"] for c in r["tool_calls"]]))
    return {"rate": _rate(decoded, ms), "decoded": decoded, "drafted": drafted, "accepted": accepted, "texts": texts}


def run_beside(model: str, prompts: dict[str, list[list[dict[str, Any]]]]) -> dict[str, float]:
    """The free-prose call's decode rate with a quoting call beside it on one handle (two slots),
    the quoting call speculating or not: what one call's drafts cost its neighbour."""
    out: dict[str, float] = {}
    with pyshim.Model(model, n_ctx=8192, n_seq=2, temperature=0) as m:
        for spec in ("off", "on", "off", "on"):  # twice each, interleaved; the second pair is kept
            with ThreadPoolExecutor(2) as pool:
                quoting = pool.submit(
                    _replay, m, "quote a list", prompts["quote a list"] * 3, SPEC if spec == "on" else "off"
                )
                prose = _replay(m, "free prose", prompts["free prose"], "off")
                quoting.result()
            out[spec] = prose["rate"]
    return out


@contextmanager
def peer(model: str, spec: bool) -> Iterator[LlamaServer | None]:
    if not (PEERS / "llama-server").exists():
        yield None
        return
    sizes = ["--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "16"]
    extra = ["--spec-type", "ngram-simple", *sizes] if spec else []
    server = LlamaServer(models.path(model), n_ctx=8192, extra=extra)
    try:
        yield server
    finally:
        server.close()


def run_peer(model: str, prompts: dict[str, list[list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in ("off", "on"):
        with peer(model, spec == "on") as server:
            if server is None:
                return {}
            for task, turns in prompts.items():
                decoded, ms = 0, 0.0
                for messages in turns:
                    _, tools, max_tokens = KINDS[task]
                    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
                    if tools:
                        body["tools"] = tools
                    status, raw = server.request("POST", "/v1/chat/completions", body)
                    if status != 200:
                        raise RuntimeError(f"llama-server: HTTP {status}: {raw[:200]!r}")
                    timings = json.loads(raw)["timings"]
                    decoded += int(timings["predicted_n"])
                    ms += float(timings["predicted_ms"])
                out[f"{task}/{spec}"] = {"rate": _rate(decoded, ms), "decoded": decoded}
    return out


def markdown(model: str, turns: int, results: dict[str, Any], tg: float | None) -> str:
    ours, theirs, beside = results["pyshim"], results["llama-server"], results["beside"]
    lines = [
        "# Self-speculative decoding (ngram-simple)",
        "",
        f"`python -m bench.speculative --model {model} --turns {turns}` on {platform.machine()}, {os.cpu_count()} "
        f"CPUs, greedy, `speculative` {json.dumps(SPEC)}; llama-server from the same tree with `--spec-type "
        "ngram-simple --spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 16` "
        f"({'run' if theirs else 'not built: make peers'}); llama-bench tg128 "
        f"{f'{tg:.1f} tok/s' if tg else 'not built'}. Decode rate = tokens decoded / decode time, per task. "
        "The drafting pace was developed on the development half; the report half was never tuned on.",
        "",
        "| half | output | pyshim off | pyshim ngram-simple | ratio | accepted / drafted | × tg128 "
        "| llama-server off | llama-server ngram-simple | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, (half, _, _) in KINDS.items():
        lines.append(_row(task, half, ours, theirs, tg))
    lines += [
        "",
        f"Beside: a free-prose call (no speculation) decodes at {beside['off']:.1f} tok/s with a quoting call "
        "beside it "
        f"on the same handle, and at {beside['on']:.1f} tok/s ({beside['on'] / beside['off']:.2f}×) when the quoting "
        "call asks for speculation (a call drafts only while it runs alone on its handle).",
    ]
    return "\n".join(lines) + "\n"


def _row(task: str, half: str, ours: dict[str, Any], theirs: dict[str, Any], tg: float | None) -> str:
    off, on = ours[f"{task}/off"], ours[f"{task}/on"]
    differ = sum(a != b for a, b in zip(on["texts"], off["texts"], strict=True))
    gaps = ", ".join(f"{g:.3f}" for g in ours[f"{task}/gaps"])
    same = f" ({differ} of {len(on['texts'])} outputs differ; gap {gaps} nats)" if differ else ""
    row = (
        f"| {half} | {task} | {off['rate']:.1f} | {on['rate']:.1f}{same} | {on['rate'] / off['rate']:.2f} | "
        f"{on['accepted']} / {on['drafted']} | " + (f"{on['rate'] / tg:.2f} |" if tg else "— |")
    )
    if not theirs:
        return row + " — | — | — |"
    p_off, p_on = theirs[f"{task}/off"], theirs[f"{task}/on"]
    return row + f" {p_off['rate']:.1f} | {p_on['rate']:.1f} | {p_on['rate'] / p_off['rate']:.2f} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=models.DEFAULT)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--out")
    args = p.parse_args()
    prompts = tasks(args.turns)
    results = {
        "pyshim": run_pyshim(args.model, prompts),
        "llama-server": run_peer(args.model, prompts),
        "beside": run_beside(args.model, prompts),
    }
    tg = None
    if (PEERS / "llama-bench").exists():
        rows = llama_bench(models.path(args.model), 3, "-p", "0", "-n", "128")
        tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    text = markdown(args.model, args.turns, results, tg)
    publish(text, args.out, "bench.speculative")


if __name__ == "__main__":
    main()
