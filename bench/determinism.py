"""What the "deterministic" option costs: prefill and decode rates with it off and on, in one run.

For each catalogue model two handles are open side by side, identical but for the option. Each
repetition evaluates the same ~512-token prompt afresh on both (``cache_prompt`` false, one
token out) and then decodes 64 greedy tokens (``ignore_eos``) on both, alternating which handle
goes first, so both see the same machine load. Rates come from the library's own timings
(``ms_prefill``, ``ms_decode``). Reported: median (min-max) per mode and the ratio of the
medians, on / off (below 1 means the option is slower).

    python -m bench.determinism [--reps 5] [--out docs/bench-determinism.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from pathlib import Path
from typing import Any

import pyshim
from bench.common.fixtures import ALL_MODELS, prose
from bench.common.provenance import args_command, stamp

MODELS = ALL_MODELS
CONFIG = {"n_ctx": 2048, "temperature": 0}
MODES = {"off": False, "on": True}


def prompt_of(n_words: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": "Summarise: " + prose("bench-determinism", n_words)}]


def rates(m: pyshim.Model, long: list[Any], short: list[Any]) -> tuple[float, float]:
    """(prefill tok/s of the long prompt evaluated afresh, decode tok/s of 64 tokens)."""
    p = m.generate(long, max_tokens=1, cache_prompt=False)
    d = m.generate(short, max_tokens=64, ignore_eos=True, cache_prompt=False)
    return p["n_prompt"] / p["ms_prefill"] * 1000, (d["n_decoded"] - 1) / d["ms_decode"] * 1000


def measure(model: str, reps: int) -> dict[str, dict[str, list[float]]]:
    long, short = prompt_of(380), [{"role": "user", "content": "Count from 1 to 100."}]
    handles = {mode: pyshim.Model(model, deterministic=on, **CONFIG) for mode, on in MODES.items()}
    try:
        out: dict[str, dict[str, list[float]]] = {mode: {"prefill": [], "decode": []} for mode in MODES}
        for mode in MODES:  # warm-up: first calls fault the weights in
            rates(handles[mode], long, short)
        for rep in range(reps):
            for mode in list(MODES)[:: 1 if rep % 2 == 0 else -1]:
                pre, dec = rates(handles[mode], long, short)
                out[mode]["prefill"].append(pre)
                out[mode]["decode"].append(dec)
        return out
    finally:
        for m in handles.values():
            m.close()


def cell(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def markdown(results: dict[str, dict[str, dict[str, list[float]]]], reps: int, load: str) -> str:
    lines = [
        "# What `deterministic` costs",
        "",
        f"`python -m bench.determinism --reps {reps}` on {platform.machine()}, {os.cpu_count()} CPUs "
        f"(load average {load} at the end), {pyshim.version()}. Prefill: a ~512-token prompt evaluated afresh; "
        "decode: 64 greedy tokens. Tokens per second, median (min-max) of the repetitions; ratio = median with "
        "the option / median without (below 1: slower with it). Both handles were open side by side and "
        "measured alternately.",
        "",
        "| model | prefill off | prefill on | ratio | decode off | decode on | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, r in results.items():
        ratio = {w: statistics.median(r["on"][w]) / statistics.median(r["off"][w]) for w in ("prefill", "decode")}
        lines.append(
            f"| {model} | {cell(r['off']['prefill'])} | {cell(r['on']['prefill'])} | {ratio['prefill']:.2f} | "
            f"{cell(r['off']['decode'])} | {cell(r['on']['decode'])} | {ratio['decode']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--models", nargs="*", default=MODELS)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    results = {model: measure(model, args.reps) for model in args.models}
    report = markdown(results, args.reps, f"{os.getloadavg()[0]:.1f}")
    print(report)
    if args.out:
        args.out.write_text(stamp(args_command("bench.determinism")) + report)


if __name__ == "__main__":
    main()
