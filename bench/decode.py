"""Decode with sampling and tools beside llama.cpp's tg128, in one run.

``bench.peers`` holds greedy decode to llama-bench's tg128. A call may also sample
(temperature, top-p) and carry tools, which adds the sampler chain and a tool-call grammar
(lazy: it waits for the model to begin a call) to every token. For each catalogue model this
measures, on one handle, 128 tokens decoded from an empty cache in four modes, greedy or
sampled (temperature 0.8, top-p 0.95), without or with the benchmark's tool; the modes take
turns within each repetition so that all see the same machine load. llama-bench's tg128 on the
same tree and threads runs first. A mode's rate is the tokens it evaluated after the first
over the library's own decode time (``ms_decode``), as tg128 counts them; reported as the
median (min-max) of the repetitions and as a share of tg128's mean.

    python -m bench.decode [--reps 5] [--out docs/bench-decode.md]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import pyshim
from bench.common.fixtures import PEER_MODELS, TOOLS
from bench.common.host import llama_bench, machine
from bench.common.markdown import opening, table_head
from bench.common.provenance import args_command, stamp
from bench.common.systems import THREADS
from pyshim import models

MODELS = PEER_MODELS
N_OUT = 128
SAMPLED = {"temperature": 0.8, "top_p": 0.95}
MODES: dict[str, tuple[dict[str, Any], bool]] = {
    "greedy": ({"temperature": 0}, False),
    "greedy, tools": ({"temperature": 0}, True),
    "temperature 0.8, top-p 0.95": (SAMPLED, False),
    "temperature 0.8, top-p 0.95, tools": (SAMPLED, True),
}
# Greedy on the same handle while a second handle of the same model, open in the same process,
# decodes between its calls. Measured after the other modes: a second handle is for the rest
# of the process (the library evaluates every handle on one thread, so that ggml's OpenMP
# threads form one team; native/compute_lane.h).
TWO_HANDLES = "greedy, a second handle used in turn"


def tg128(path: Path, reps: int) -> dict[str, Any]:
    row = next(r for r in llama_bench(path, reps, "-p", "0", "-n", str(N_OUT)) if r["n_gen"] > 0)
    return {"mean": row["avg_ts"], "range": [min(row["samples_ts"]), max(row["samples_ts"])]}


def decode_rate(m: pyshim.Model, k: int, options: dict[str, Any], tools: bool) -> tuple[float, int]:
    """One repetition of one mode: a fresh cache, a short prompt, up to N_OUT tokens. Without
    tools the end token is ignored, so the call decodes exactly N_OUT; with tools it is not (a
    sampled turn may write a tool call, which the grammar ends), and the rate is over what the
    turn decoded. Returns the rate and the tokens decoded."""
    m.reset()
    messages = [{"role": "user", "content": f"Run {k}. Count from 1 to 1000, one number per line, nothing else."}]
    r = m.generate(messages, TOOLS if tools else None, max_tokens=N_OUT, ignore_eos=not tools, seed=k + 1, **options)
    if r["n_decoded"] < 16:
        raise RuntimeError(f"decoded {r['n_decoded']} tokens: {r['finish_reason']}")
    return (r["n_decoded"] - 1) / (r["ms_decode"] / 1000), r["n_decoded"]


def run_model(name: str, reps: int) -> dict[str, Any]:
    return {"tg128": tg128(models.path(name), reps), **measure(name, reps)}


def measure(name: str, reps: int) -> dict[str, Any]:
    """pyshim's rates and tokens decoded per mode, the modes taking turns in each repetition."""
    rates: dict[str, list[float]] = {mode: [] for mode in [*MODES, TWO_HANDLES]}
    tokens: dict[str, list[int]] = {mode: [] for mode in [*MODES, TWO_HANDLES]}
    with pyshim.Model(name, n_ctx=2048, n_threads=THREADS) as m:
        decode_rate(m, 0, {"temperature": 0}, True)  # page the weights in
        for k in range(reps):
            for mode, (options, tools) in MODES.items():
                rate, n = decode_rate(m, k, options, tools)
                rates[mode].append(rate)
                tokens[mode].append(n)
        with pyshim.Model(name, n_ctx=2048, n_threads=THREADS) as other:
            for k in range(reps):
                decode_rate(other, k, {"temperature": 0}, False)
                rate, n = decode_rate(m, k, {"temperature": 0}, False)
                rates[TWO_HANDLES].append(rate)
                tokens[TWO_HANDLES].append(n)
    return {"rates": rates, "tokens": tokens}


def report(data: dict[str, Any]) -> str:
    lines = opening("Decode with sampling and tools, beside llama-bench tg128", data)
    lines[-1] += (
        f" {THREADS} threads, {N_OUT} tokens from an empty cache, {data['reps']} repetitions, the modes taking "
        "turns within each. Rate: tokens evaluated after the first over the library's `ms_decode`; share: "
        "that rate's median over tg128's mean (in brackets, the range of the repetitions over tg128's mean)."
    )
    lines += ["", *table_head("model | mode | decode tok/s, median (min–max) | of tg128 | tokens decoded (min–max)")]
    for name, res in data["models"].items():
        tg = res["tg128"]
        lines.append(
            f"| {name} | **llama-bench tg128** | {tg['mean']:.1f} ({tg['range'][0]:.1f}–{tg['range'][1]:.1f}) "
            f"| 100 % | {N_OUT} |"
        )
        for mode, rs in res["rates"].items():
            med, lo, hi = statistics.median(rs), min(rs), max(rs)
            share = f"{100 * med / tg['mean']:.1f} % ({100 * lo / tg['mean']:.1f}–{100 * hi / tg['mean']:.1f})"
            ns = res["tokens"][mode]
            lines.append(f"| {name} | pyshim, {mode} | {med:.1f} ({lo:.1f}–{hi:.1f}) | {share} | {min(ns)}–{max(ns)} |")
    lines += [
        "",
        "With tools a call carries a lazy tool-call grammar, which watches the text for the start of a "
        "call. A turn that counts in prose shows what carrying tools costs; a turn that answers with a "
        "tool call instead (fewer tokens decoded, last column) is constrained by the grammar at every "
        "token of the call, and the grammar ends it. Sampled modes run the sampler chain (top-p over the "
        "vocabulary and the draw) for every token. Greedy without tools reads the argmax straight from "
        "the logits for every token (the result's `n_argmax`); with tools the chain and the grammar "
        "choose every token.",
        "",
        f"**{TWO_HANDLES}** is greedy on the same handle after the other modes, with a second handle of "
        "the same model open in the process and decoding 128 tokens between its calls. ggml computes with "
        "OpenMP, whose worker team belongs to the thread that evaluates, and libgomp spins only 100 times "
        "at a barrier once it manages more threads than the machine has CPUs: the library evaluates every "
        "handle of a process on one thread, so that their threads form one team (`native/compute_lane.h`). "
        "Its share of tg128 should match greedy's.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    command = "python -m bench.decode" + (f" --reps {args.reps}" if args.reps != 5 else "")
    command += f" --out {args.out}" if args.out else ""
    data = {"command": command, "machine": machine(), "reps": args.reps, "models": {}}
    for name in args.models:
        data["models"][name] = run_model(name, args.reps)
        print(f"{name}: {data['models'][name]}", flush=True)
    text = report(data)
    if args.out:
        args.out.write_text(stamp(args_command("bench.decode")) + text)
    print(text)


if __name__ == "__main__":
    main()
