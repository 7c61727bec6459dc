"""What a batch of a few rows costs at depth: the engine alone, pyshim's patched kernel beside
plain llama.cpp with flash attention on and off (issue 55's row-cost table).

A next turn (20-odd new tokens), a draft checked by speculative decoding (2-9 rows) and several
sequences in one step all evaluate a short batch on top of a deep cache; flash attention's cost
for such a batch is what ggml-cpu-fa-grouped-rows.patch changes. For each depth (2k, 8k, 16k
cached tokens) and batch (1, 2, 4, 8, 16, 32 rows) this runs ``llama-bench -p ROWS -n 0 -d
DEPTH`` on three builds of the same pinned tree and threads: the peers build (build-peers: every
pyshim patch, flash attention auto = on for this CPU), and the upstream build (build-peers-upstream:
no patch) with flash attention on and off. Reported: milliseconds per batch (median of the
repetitions) and each batch's cost over one row's on the same build.

    python -m bench.row_cost [--model qwen2.5-coder-0.5b-instruct] [--reps 3] [--depths 2048 8192 16384]
        [--out docs/bench-row-cost.md]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.common.host import batch_ms, llama_bench, machine
from bench.common.provenance import publish
from bench.common.systems import PEERS, PEERS_UPSTREAM, THREADS
from pyshim import models

ROWS = [1, 2, 4, 8, 16, 32]
DEPTHS = [2048, 8192, 16384]
BUILDS: dict[str, tuple[Path, str]] = {
    "pyshim's engine (every patch), fa on": (PEERS, "on"),
    "upstream, fa on": (PEERS_UPSTREAM, "on"),
    "upstream, fa off": (PEERS_UPSTREAM, "off"),
}


def measure(model: Path, reps: int, depths: list[int]) -> dict[str, dict[tuple[int, int], float]]:
    """Milliseconds per batch, by build, for each (depth, rows)."""
    out: dict[str, dict[tuple[int, int], float]] = {}
    for name, (peers, fa) in BUILDS.items():
        args = ["-p", ",".join(map(str, ROWS)), "-n", "0", "-d", ",".join(map(str, depths)), "-fa", fa]
        rows = llama_bench(model, reps, *args, peers=peers)
        out[name] = {(r["n_depth"], r["n_prompt"]): statistics.median(batch_ms(r)) for r in rows}
        print(name, out[name], flush=True)
    return out


def report(model: str, ms: dict[str, dict[tuple[int, int], float]], reps: int, depths: list[int]) -> str:
    names = list(BUILDS)
    lines = [
        f"# A short batch at depth: {model}",
        "",
        f"{machine()}, {THREADS} threads, llama-bench, median of {reps} repetitions per cell. Milliseconds per "
        "batch, and in brackets that batch over one row on the same build (1.00 would mean extra rows were free).",
        "",
        "| depth | rows | " + " | ".join(names) + " | pyshim / better upstream |",
        "|---:|---:|" + "---:|" * len(names) + "---:|",
    ]
    for depth in depths:
        for n in ROWS:
            cells = [f"{ms[b][(depth, n)]:.1f} ({ms[b][(depth, n)] / ms[b][(depth, 1)]:.2f})" for b in names]
            best = min(ms[b][(depth, n)] for b in names[1:])
            lines.append(f"| {depth} | {n} | " + " | ".join(cells) + f" | {ms[names[0]][(depth, n)] / best:.2f} |")
    lines += [
        "",
        "The pyshim column is the engine pyshim, llama-server and llama-cpp-python run in the peer reports "
        "(built from vendor/llama.cpp with every patch). The upstream columns are what plain llama.cpp costs "
        "for the same batch: the yardstick. A batch of 1 row is decode; 2-9 rows are a speculative draft "
        "checked; ~20 rows an agent's next turn.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--depths", type=int, nargs="+", default=DEPTHS, help="cached tokens under each batch")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    ms = measure(models.path(args.model), args.reps, args.depths)
    publish(report(args.model, ms, args.reps, args.depths), args.out, "bench.row_cost")


if __name__ == "__main__":
    main()
