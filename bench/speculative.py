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

    python -m bench.speculative [--model qwen2.5-coder-0.5b-instruct] [--turns 20] [--out docs/bench-speculative.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyshim
from bench.agent_session import TOOLS, conversation
from bench.peers import llama_bench
from bench.provenance import publish
from bench.systems import PEERS, LlamaServer
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
TASKS: dict[str, list[list[dict[str, Any]]]] = {
    "quote": [[{"role": "user", "content": f"Repeat this JSON exactly, with no other text: {RESULT}"}]],
    "code edit": [[{"role": "user", "content": f"Rename width to w everywhere and show the whole code:\n{CODE}"}]],
    "free prose": [[{"role": "user", "content": "Write a short story about a lighthouse keeper."}]],
}
MAX_TOKENS = {"agent session": 48, "quote": 96, "code edit": 160, "free prose": 160}


def _rate(decoded: int, ms: float) -> float:
    return decoded / (ms / 1000) if ms > 0 else float("nan")


def run_pyshim(model: str, prompts: dict[str, list[list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with pyshim.Model(model, n_ctx=8192, temperature=0) as m:
        for task, turns in prompts.items():
            tools = TOOLS if task == "agent session" else None
            for spec in ("off", "on"):
                decoded = drafted = accepted = 0
                ms, texts = 0.0, []
                for messages in turns:
                    r = m.generate(
                        messages, tools, max_tokens=MAX_TOKENS[task], speculative=SPEC if spec == "on" else "off"
                    )
                    decoded += r["n_decoded"]
                    drafted += r["n_drafted"]
                    accepted += r["n_accepted"]
                    ms += r["ms_decode"]
                    texts.append((r["content"], [c["function"] for c in r["tool_calls"]]))
                out[f"{task}/{spec}"] = {"rate": _rate(decoded, ms), "decoded": decoded, "drafted": drafted,
                                         "accepted": accepted, "texts": texts}  # fmt: skip
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
                    body: dict[str, Any] = {"messages": messages, "max_tokens": MAX_TOKENS[task], "temperature": 0}
                    if task == "agent session":
                        body["tools"] = TOOLS
                    status, raw = server.request("POST", "/v1/chat/completions", body)
                    if status != 200:
                        raise RuntimeError(f"llama-server: HTTP {status}: {raw[:200]!r}")
                    timings = json.loads(raw)["timings"]
                    decoded += int(timings["predicted_n"])
                    ms += float(timings["predicted_ms"])
                out[f"{task}/{spec}"] = {"rate": _rate(decoded, ms), "decoded": decoded}
    return out


def markdown(model: str, turns: int, ours: dict[str, Any], theirs: dict[str, Any], tg: float | None) -> str:
    lines = [
        "# Self-speculative decoding (ngram-simple)",
        "",
        f"`python -m bench.speculative --model {model} --turns {turns}` on {platform.machine()}, {os.cpu_count()} "
        f"CPUs, greedy, `speculative` {json.dumps(SPEC)}; llama-server from the same tree with `--spec-type "
        "ngram-simple --spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 16` "
        f"({'run' if theirs else 'not built: make peers'}); llama-bench tg128 "
        f"{f'{tg:.1f} tok/s' if tg else 'not built'}. Decode rate = tokens decoded / decode time, per task:",
        "",
        "| output | pyshim off | pyshim ngram-simple | ratio | accepted / drafted | × tg128 | llama-server off "
        "| llama-server ngram-simple | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task in MAX_TOKENS:
        off, on = ours[f"{task}/off"], ours[f"{task}/on"]
        same = "" if on["texts"] == off["texts"] else " (output differs)"
        row = (
            f"| {task} | {off['rate']:.1f} | {on['rate']:.1f}{same} | {on['rate'] / off['rate']:.2f} | "
            f"{on['accepted']} / {on['drafted']} | " + (f"{on['rate'] / tg:.2f} |" if tg else "— |")
        )
        if theirs:
            p_off, p_on = theirs[f"{task}/off"], theirs[f"{task}/on"]
            row += f" {p_off['rate']:.1f} | {p_on['rate']:.1f} | {p_on['rate'] / p_off['rate']:.2f} |"
        else:
            row += " — | — | — |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=models.DEFAULT)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--out")
    args = p.parse_args()
    prompts = {"agent session": conversation(args.turns), **TASKS}
    ours = run_pyshim(args.model, prompts)
    theirs = run_peer(args.model, prompts)
    tg = None
    if (PEERS / "llama-bench").exists():
        rows = llama_bench(models.path(args.model), 3, "-p", "0", "-n", "128")
        tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    text = markdown(args.model, args.turns, ours, theirs, tg)
    publish(text, args.out, "bench.speculative")


if __name__ == "__main__":
    main()
