"""What the llama.cpp patch stack buys: the patched library beside one built from the same
pinned tree with no patches (``make build LLAMA_PATCHES=none BUILD=build-nopatch``), on the
same machine in one run, the two builds taking turns.

Two workloads per model, greedy, 2 threads, on the agent conversation of ``bench.agent_session``
(a weather tool, its calls and results, one sentence per answer) grown to ``--turns`` turns:

- **next turn**: the conversation is cached; each call changes only the last question and asks
  for one token. Wall per call, and the library's own split of it: ``ms_prepare`` (messages,
  template, parser), ``ms_template``, ``ms_tokenize``, ``ms_sampler`` -- the code the render,
  tokenizer and grammar-cache patches change (the model's time is the same in both builds).
- **decode**: 64 tokens after the last tool result, tools offered (the lazy tool grammar waits),
  end tokens ignored; tokens per second of decode wall. The flash-attention and grammar-waits
  patches change it.

Each build runs in a process of its own (``PYSHIM_LIB``), ``--rounds`` times, alternating;
figures are medians over every call of every round, with p10-p90.

    python -m bench.patches [--models qwen2.5-coder-0.5b-instruct gemma-3-270m] [--out docs/bench-patches.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.agent_session import TOOLS, conversation
from bench.provenance import publish

ROOT = Path(__file__).resolve().parent.parent
BUILDS = {"patched": ROOT / "build" / "libel_shim.so", "unpatched": ROOT / "build-nopatch" / "libel_shim.so"}
SPLIT = ("ms_prepare", "ms_template", "ms_tokenize", "ms_sampler")


def worker(model: str, turns: int, calls: int) -> dict[str, Any]:
    """One build's samples (run with PYSHIM_LIB naming the build)."""
    import pyshim
    from pyshim import models

    base = conversation(turns)[-1]
    out: dict[str, Any] = {"next turn": [], "decode": [], "patches": pyshim.build_info().get("patches", [])}
    with pyshim.Model(models.path(model), n_ctx=8192, n_threads=2, temperature=0) as m:
        for i in range(calls + 1):
            question = {"role": "user", "content": f"And {i} days from now, will it still rain there?"}
            messages = [*base, {"role": "assistant", "content": "It is mild."}, question]
            t0 = time.perf_counter()
            r = m.generate(messages, TOOLS, max_tokens=1)
            wall = (time.perf_counter() - t0) * 1000
            if i > 0:  # the first call fills the cache
                out["next turn"].append({"wall": wall, "n_prompt": r["n_prompt"], **{k: r[k] for k in SPLIT}})
        for _ in range(3):
            t0 = time.perf_counter()
            r = m.generate(base, TOOLS, max_tokens=64, ignore_eos=True)
            out["decode"].append({"rate": r["n_decoded"] / (time.perf_counter() - t0 - r["ms_prefill"] / 1000)})
    return out


def run(model: str, build: str, turns: int, calls: int) -> dict[str, Any]:
    env = {**os.environ, "PYSHIM_LIB": str(BUILDS[build])}
    args = [sys.executable, "-m", "bench.patches", "--worker", model, "--turns", str(turns), "--calls", str(calls)]
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return f"{statistics.median(values):.2f} ({q[0]:.2f}–{q[-1]:.2f})"


def measure(model: str, turns: int, calls: int, rounds: int) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {b: {"next turn": [], "decode": []} for b in BUILDS}
    for _ in range(rounds):
        for build in BUILDS:
            r = run(model, build, turns, calls)
            got[build]["next turn"] += r["next turn"]
            got[build]["decode"] += r["decode"]
            got[build]["patches"] = r["patches"]
    return got


def section(model: str, got: dict[str, dict[str, Any]]) -> list[str]:
    a, b = got["patched"], got["unpatched"]
    n_prompt = a["next turn"][0]["n_prompt"]
    lines = [f"## {model}", "", f"Next turn at {n_prompt} prompt tokens, ms per call, median (p10–p90):", ""]
    lines += ["| | patched | unpatched | unpatched − patched (medians) |", "|---|---:|---:|---:|"]
    for key in ("wall", *SPLIT):
        pa, pb = [s[key] for s in a["next turn"]], [s[key] for s in b["next turn"]]
        diff = statistics.median(pb) - statistics.median(pa)
        lines.append(f"| {key} | {spread(pa)} | {spread(pb)} | {diff:+.2f} |")
    ra, rb = [s["rate"] for s in a["decode"]], [s["rate"] for s in b["decode"]]
    lines += [
        "",
        f"Decode with tools offered, 64 tokens: patched {statistics.median(ra):.1f} tok/s "
        f"({min(ra):.1f}–{max(ra):.1f}), unpatched {statistics.median(rb):.1f} ({min(rb):.1f}–{max(rb):.1f}): "
        f"{statistics.median(ra) / statistics.median(rb):.2f}×.",
        "",
    ]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct", "gemma-3-270m"])
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker")
    p.add_argument("--out")
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.turns, args.calls)))
        return
    missing = [str(path) for path in BUILDS.values() if not path.exists()]
    if missing:
        sys.exit(f"build first: {', '.join(missing)} (make build; make build LLAMA_PATCHES=none BUILD=build-nopatch)")
    lines = [
        "# What the patches buy",
        "",
        f"`python -m bench.patches --turns {args.turns} --calls {args.calls} --rounds {args.rounds}` on "
        f"{os.cpu_count()} CPUs: the library with every patch in `native/patches/` against one built with none "
        "(`build-nopatch`), alternating, each in its own process. Wall is what the caller waits for; the `ms_` "
        "rows are the library's own split of it, the same code in both builds but for the patches.",
        "",
    ]
    for model in args.models:
        got = measure(model, args.turns, args.calls, args.rounds)
        lines += section(model, got)
    publish("\n".join(lines), args.out, "bench.patches")


if __name__ == "__main__":
    main()
