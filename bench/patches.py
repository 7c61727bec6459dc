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
  end tokens ignored; tokens per second of decode wall. The flash-attention patch changes it.

Each build runs in a process of its own (``PYSHIM_LIB``), ``--rounds`` times, alternating;
figures are medians over every call of every round, with p10-p90. ``--without NAME`` adds a
build with every patch but NAME (``build-without-NAME``, brought up to date by make) and reports it beside
the patched one alone, which is how a patch too small to see among all the others is judged.

    python -m bench.patches [--models qwen2.5-coder-0.5b-instruct gemma-3-270m] [--out docs/bench-patches.md]
    python -m bench.patches --without common-return-parser-object common-sampling-grammar-cache \
        --no-unpatched --models gemma-3-270m --out docs/bench-patches-leave-one-out.md
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

from bench.common.fixtures import TOOLS, conversation
from bench.common.provenance import ROOT, publish
from bench.common.stats import median_p10_p90

BUILDS = {"patched": ROOT / "build" / "libel_shim.so", "unpatched": ROOT / "build-nopatch" / "libel_shim.so"}
N_CTX = 20480  # room for --turns 145 (~16k tokens)
SPLIT = ("ms_prepare", "ms_template", "ms_tokenize", "ms_sampler")


def worker(model: str, turns: int, calls: int) -> dict[str, Any]:
    """One build's samples (run with PYSHIM_LIB naming the build)."""
    import pyshim
    from pyshim import models

    base = conversation(turns)[-1]
    out: dict[str, Any] = {"next turn": [], "decode": []}
    with pyshim.Model(models.path(model), n_ctx=N_CTX, n_threads=2, temperature=0) as m:
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


def run(model: str, lib: Path, turns: int, calls: int) -> dict[str, Any]:
    env = {**os.environ, "PYSHIM_LIB": str(lib)}
    args = [sys.executable, "-m", "bench.patches", "--worker", model, "--turns", str(turns), "--calls", str(calls)]
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def without(name: str) -> Path:
    """The library with every patch but `name` (make build LLAMA_PATCHES=...). make runs every
    time: a build left from an older tree or patch set is brought up to date, not measured."""
    names = sorted(p.stem for p in (ROOT / "native" / "patches").glob("*.patch"))
    if name not in names:
        sys.exit(f"no patch {name!r}; the patches are: {', '.join(names)}")
    build = f"build-without-{name}"
    wanted = ",".join(n for n in names if n != name)
    subprocess.run(["make", "build", f"LLAMA_PATCHES={wanted}", f"BUILD={build}"], cwd=ROOT, check=True)
    return ROOT / build / "libel_shim.so"


def measure(model: str, builds: dict[str, Path], turns: int, calls: int, rounds: int) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {b: {"next turn": [], "decode": []} for b in builds}
    for _ in range(rounds):
        for build, lib in builds.items():
            r = run(model, lib, turns, calls)
            got[build]["next turn"] += r["next turn"]
            got[build]["decode"] += r["decode"]
    return got


def section(model: str, got: dict[str, dict[str, Any]]) -> list[str]:
    """Every build beside the first (the patched one)."""
    names = list(got)
    first = got[names[0]]
    n_prompt = first["next turn"][0]["n_prompt"]
    lines = [f"## {model}", "", f"Next turn at {n_prompt} prompt tokens, ms per call, median (p10–p90):", ""]
    lines += ["| | " + " | ".join(names) + " | " + " | ".join(f"{n} − {names[0]} (medians)" for n in names[1:]) + " |"]
    lines += ["|---|" + "---:|" * (2 * len(names) - 1)]
    for key in ("wall", *SPLIT):
        samples = {n: [s[key] for s in got[n]["next turn"]] for n in names}
        base = statistics.median(samples[names[0]])
        cells = [median_p10_p90(samples[n]) for n in names]
        cells += [f"{statistics.median(samples[n]) - base:+.2f}" for n in names[1:]]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    rates = {n: [s["rate"] for s in got[n]["decode"]] for n in names}
    base_rate = statistics.median(rates[names[0]])
    described = [
        f"{n} {statistics.median(r):.1f} tok/s ({min(r):.1f}–{max(r):.1f})"
        + (f", {names[0]} at {base_rate / statistics.median(r):.2f}× this rate" if n != names[0] else "")
        for n, r in rates.items()
    ]
    lines += ["", "Decode with tools offered, 64 tokens, median (min–max): " + "; ".join(described) + ".", ""]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct", "gemma-3-270m"])
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--without", nargs="*", default=[], help="also (or, with --no-unpatched, only) builds without these")
    p.add_argument("--no-unpatched", action="store_true", help="leave the build with no patches out")
    p.add_argument("--worker")
    p.add_argument("--out")
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.turns, args.calls)))
        return
    builds = {"patched": BUILDS["patched"]} if args.no_unpatched else dict(BUILDS)
    builds |= {f"without {name}": without(name) for name in args.without}
    missing = [str(path) for path in builds.values() if not path.exists()]
    if missing:
        sys.exit(f"build first: {', '.join(missing)} (make build; make build LLAMA_PATCHES=none BUILD=build-nopatch)")
    lines = [
        "# What the patches buy",
        "",
        f"`python -m bench.patches {' '.join(sys.argv[1:])}` on {os.cpu_count()} CPUs: the library with every patch "
        f"in `native/patches/` beside {', '.join(f'`{b}`' for b in list(builds)[1:])} (`unpatched`: none), "
        "alternating, each in its own process. Wall is what the caller waits for; the `ms_` rows are the library's "
        "own split of it, the same code in every build but for the patches.",
        "",
    ]
    for model in args.models:
        got = measure(model, builds, args.turns, args.calls, args.rounds)
        lines += section(model, got)
    publish("\n".join(lines), args.out, "bench.patches")


if __name__ == "__main__":
    main()
