"""A scripted 20-turn tool-calling conversation, replayed with prompt reuse on and off.

Every turn appends a user question, the assistant's (scripted) tool call and the tool's
result, then asks the model for the next assistant message: the prompt each system sees
is fixed, whatever the model says. Reported per turn: prompt tokens, tokens reused from
the cache, prefill time and time to first token.

    python -m bench.agent_session [--turns 20] [--models qwen2.5-coder-0.5b-instruct gemma-3-270m]
        [--out docs/bench-reuse.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from pathlib import Path
from typing import Any

import pyshim
from bench.common.fixtures import TOOLS, conversation
from bench.common.provenance import args_command, stamp
from bench.common.systems import timed_generate
from pyshim import models


def replay(model: pyshim.Model, prompts: list[list[dict[str, Any]]], reuse: bool) -> list[dict[str, Any]]:
    model.reset()
    rows = []
    for i, messages in enumerate(prompts):
        ttft, wall, r = timed_generate(model, messages, TOOLS, max_tokens=16, temperature=0, cache_prompt=reuse)
        rows.append(
            {
                "turn": i + 1,
                "n_prompt": r["n_prompt"],
                "n_reused": r["n_reused"],
                "ms_prefill": r["ms_prefill"],
                "ms_ttft": ttft * 1000,
                "ms_total": wall * 1000,
            }
        )
    return rows


def markdown(name: str, on: list[dict[str, Any]], off: list[dict[str, Any]]) -> str:
    lines = [
        f"### {name}",
        "",
        "| turn | prompt tok | new since last turn | evaluated (on) | reused (on) | reused % "
        "| prefill ms (on) | prefill ms (off) | TTFT ms (on) | TTFT ms (off) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    previous = 0
    for a, b in zip(on, off, strict=True):
        lines.append(
            f"| {a['turn']} | {a['n_prompt']} | {a['n_prompt'] - previous} | {a['n_prompt'] - a['n_reused']} "
            f"| {a['n_reused']} | {100 * a['n_reused'] / a['n_prompt']:.0f} % "
            f"| {a['ms_prefill']:.0f} | {b['ms_prefill']:.0f} | {a['ms_ttft']:.0f} | {b['ms_ttft']:.0f} |"
        )
        previous = a["n_prompt"]
    tot_on, tot_off = sum(r["ms_total"] for r in on) / 1000, sum(r["ms_total"] for r in off) / 1000
    reused_from_3 = [r["n_reused"] / r["n_prompt"] for r in on[2:]]
    lines += [
        "",
        f"Session wall time: reuse on {tot_on:.1f} s, off {tot_off:.1f} s: "
        f"**{tot_off / tot_on:.1f}× faster** with reuse. "
        f"From turn 3 on, reuse covers {100 * min(reused_from_3):.0f}–{100 * max(reused_from_3):.0f} % "
        f"(median {100 * statistics.median(reused_from_3):.0f} %) of each prompt.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct", "gemma-3-270m"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    prompts = conversation(args.turns)
    sections = []
    for name in args.models:
        with pyshim.Model(models.path(name), n_ctx=8192) as m:
            on = replay(m, prompts, reuse=True)
            off = replay(m, prompts, reuse=False)
            stats = m.stats()
        section = markdown(f"{name} (n_swa {stats['n_swa']}, swa_full {stats['swa_full']})", on, off)
        print(section, flush=True)
        sections.append(section)
    if args.out:
        header = (
            "# Prompt reuse over a 20-turn tool-calling session\n\n"
            f"Produced by `python -m bench.agent_session --out {args.out}` on {platform.machine()}, "
            f"{os.cpu_count()} cores, {pyshim.version()}; greedy, 16 tokens generated per turn, the default "
            "context (a sliding-window cache on gemma-3-270m). 'off' re-evaluates every prompt from scratch "
            "(`cache_prompt: false`), as a binding with reuse disabled does.\n\n"
        )
        args.out.write_text(stamp(args_command("bench.agent_session")) + header + "\n".join(sections))


if __name__ == "__main__":
    main()
