"""Many conversations, one system prompt: prompt tokens evaluated and wall time when K users of
one agent app each start a conversation with the same ~1,500-token system prompt and tools.

K conversations (sessions c0..cK-1) take three turns each, round-robin, on a handle with K slots:
each turn appends the user's next question to that conversation (the assistant's replies are
scripted, so every system sees the same prompts) and asks for up to 16 tokens. Systems, one
after another in one run, each from a cold start:

- pyshim with its sessions in one trust scope (``Model``'s default): a new conversation starts
  from a copy of the prefix another one evaluated;
- pyshim with ``scope=None``: sessions share nothing (ABI 1.10's behaviour);
- llama-server from the same tree, ``-np K`` (its host-memory prompt cache, ``--cache-ram``,
  on by default), requests routed by its own prompt similarity.

Reported: total wall (the user's wait, summed over turns), prompt tokens each system evaluated
(pyshim: ``n_prompt - n_reused``; llama-server: ``timings.prompt_n``), and the floor: the tokens
no system can avoid, each prompt's tokens less its longest common prefix with any earlier prompt
(tokenized by pyshim's renderer, the same template and vocabulary).

    python -m bench.shared_prefix [--models qwen2.5-coder-0.5b-instruct gemma-3-270m] [--k 4]
        [--out docs/bench-shared-prefix.md]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import pyshim
from bench.common.fixtures import SUPPORT_MAX_TOKENS, SUPPORT_N_CTX, TOOL_NAMES, TOPICS, support_prompt, support_tools
from bench.common.provenance import publish
from bench.common.systems import PEERS, THREADS, LlamaServer
from pyshim import models

TURNS = 3
REPS = 3  # runs of pyshim (one scope) and llama-server, alternating: the medians are reported


def scripts(k: int) -> list[list[str]]:
    rng = random.Random(f"questions-{k}")
    return [
        [
            f"Customer {c}, question {t + 1}: what about my {rng.choice(TOPICS)} case {rng.randint(100, 999)}?"
            for t in range(TURNS)
        ]
        for c in range(k)
    ]


def prompts(k: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """(conversation, messages) of every turn, in the order they are sent."""
    system = {"role": "system", "content": support_prompt()}
    convs: list[list[dict[str, Any]]] = [[system] for _ in range(k)]
    order = []
    for t in range(TURNS):
        for c, questions in enumerate(scripts(k)):
            convs[c] = [*convs[c], {"role": "user", "content": questions[t]}]
            order.append((c, list(convs[c])))
            convs[c] = [*convs[c], {"role": "assistant", "content": "Let me check that for you."}]
    return order


def floor(model: str, order: list[tuple[int, list[dict[str, Any]]]]) -> tuple[int, int]:
    """(prompt tokens in all, tokens no system can avoid evaluating)."""
    seen: list[list[int]] = []
    total = unique = 0
    with pyshim.Model(model, n_ctx=SUPPORT_N_CTX) as m:
        for _, messages in order:
            toks = m.generate(messages, support_tools(), _test={"prepare_only": True})["prepared"]["tokens"]
            shared = max((pyshim_lcp(toks, s) for s in seen), default=0)
            total, unique = total + len(toks), unique + len(toks) - shared
            seen.append(toks)
    return total, unique


def pyshim_lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def run_pyshim(model: str, k: int, order: list[tuple[int, list[dict[str, Any]]]], **config: Any) -> dict[str, float]:
    walls: list[float] = []
    evaluated = shared = 0.0
    with pyshim.Model(model, n_ctx=SUPPORT_N_CTX, n_seq=k, n_threads=THREADS, temperature=0, **config) as m:
        for c, messages in order:
            t0 = time.perf_counter()
            r = m.generate(messages, support_tools(), max_tokens=SUPPORT_MAX_TOKENS, session=f"c{c}")
            walls.append(time.perf_counter() - t0)
            evaluated += r["n_prompt"] - r["n_reused"]
            shared += bool(r["shared_prefix"])
    return {"wall_s": sum(walls), "after_first_s": sum(walls[1:]), "evaluated": evaluated, "shared": shared}


def run_llama_server(model: str, k: int, order: list[tuple[int, list[dict[str, Any]]]]) -> dict[str, float] | None:
    if not (PEERS / "llama-server").exists():
        return None
    server = LlamaServer(models.path(model), n_ctx=SUPPORT_N_CTX, n_seq=k)
    try:
        walls: list[float] = []
        evaluated = 0.0
        for _, messages in order:
            turn = server.turn(messages, support_tools(), SUPPORT_MAX_TOKENS)
            walls.append(turn.total_s)
            evaluated += turn.n_evaluated or 0
        return {"wall_s": sum(walls), "after_first_s": sum(walls[1:]), "evaluated": evaluated}
    finally:
        server.close()


def report(results: dict[str, dict[str, Any]], k: int) -> str:
    out = [
        "# Many conversations, one system prompt\n",
        f"{k} conversations sharing one system prompt and {len(TOOL_NAMES)} tools, {TURNS} turns each, "
        f"round-robin, {SUPPORT_MAX_TOKENS} tokens per reply, greedy, {THREADS} threads, "
        f"{k} slots of {SUPPORT_N_CTX} tokens. "
        "Wall: the sum of every turn's wall time, as the users wait for it. Evaluated: prompt tokens the "
        "system computed (not reused). Floor: tokens no system can avoid (each prompt less its longest "
        "common prefix with an earlier one).\n",
        "| model | system | wall | × llama-server | after the first turn | × llama-server | evaluated | of floor "
        "| of all prompt tokens |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, r in results.items():
        server = r.get("llama-server")
        for name in ("pyshim (one scope)", "pyshim (scope=None)", "llama-server"):
            row = r.get(name)
            if row is None:
                continue
            ratio = f"{row['wall_s'] / server['wall_s']:.2f}" if server else "n/a"
            later = f"{row['after_first_s'] / server['after_first_s']:.2f}" if server else "n/a"
            out.append(
                f"| {model} | {name} | {row['wall_s']:.2f} s | {ratio} | {row['after_first_s']:.2f} s | {later} | "
                f"{row['evaluated']:.0f} | {row['evaluated'] / r['floor']:.2f} | {row['evaluated'] / r['total']:.2f} |"
            )
        out.append(f"| {model} | floor | | | | | {r['floor']} | 1.00 | {r['floor'] / r['total']:.2f} |")
    out.append(
        "\nTarget (issue 39): evaluated within 10 % of the floor, wall at most llama-server's. "
        "pyshim (one scope) started "
        + ", ".join(f"{int(r['pyshim (one scope)']['shared'])} of {k * TURNS} turns ({m})" for m, r in results.items())
        + " from a copy of another conversation's prefix. Walls of every run: "
        + "; ".join(
            f"{m}: pyshim {r['pyshim (one scope) walls']} s, llama-server {r['llama-server walls']} s"
            for m, r in results.items()
        )
        + ". The first turn (the cold system prompt, the same "
        "work for every system) is most of the wall; the columns after it are what sharing changes. Each "
        "pyshim row and llama-server's is the median-wall run of "
        f"{REPS}, run alternately; a system can evaluate a little under the floor where its own reply "
        "begins as the scripted reply does (the floor counts prompts only)."
    )
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct", "gemma-3-270m"])
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--out")
    args = p.parse_args()
    results: dict[str, dict[str, Any]] = {}
    for model in args.models:
        order = prompts(args.k)
        total, unique = floor(model, order)
        r: dict[str, Any] = {"total": total, "floor": unique}
        runs: dict[str, list[dict[str, float]]] = {"pyshim (one scope)": [], "llama-server": []}
        for _ in range(REPS):
            runs["pyshim (one scope)"].append(run_pyshim(model, args.k, order))
            if (server := run_llama_server(model, args.k, order)) is not None:
                runs["llama-server"].append(server)
        for name, rows in runs.items():
            r[name] = sorted(rows, key=lambda x: x["wall_s"])[len(rows) // 2] if rows else None
            r[name + " walls"] = [round(x["wall_s"], 2) for x in rows]
        r["pyshim (scope=None)"] = run_pyshim(model, args.k, order, scope=None)
        results[model] = r
        print(model, r, flush=True)
    publish(report(results, args.k), args.out, "bench.shared_prefix")


if __name__ == "__main__":
    main()
