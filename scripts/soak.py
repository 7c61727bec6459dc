#!/usr/bin/env python3
"""Leak soak: many short generate calls on one handle, then many open/close cycles.

    python -m scripts.soak [--calls 10000] [--cycles 200] [--model smollm2-135m-instruct]

Resident memory is sampled after a warm-up (allocators, caches and the model's pages
settle in the first calls) and at even steps after it. A least-squares line through the
samples gives the growth per step; a steady leak shows as a slope however small each step's
share, where comparing the first and last sample would hide it in noise. The slope must stay
under SLOPE_LIMIT bytes per call (per cycle for open/close); the exit status says whether it
held. ``tests/test_reliability.py`` runs the same loops at a size that fits ``make test``
(``make soak`` runs them at full size) and shows that a steady leak a few times the limit
(the ``_test.leak_bytes`` hook) fails the check.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyshim
from pyshim import models

# Bytes of resident memory a step may add, on the fitted line. RSS moves in 4 KiB pages and
# the allocator keeps freed memory, so a flat run still fits a small slope either way.
SLOPE_LIMIT = {"call": 256, "cycle": 64 * 1024}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def soak(step: Callable[[int], object], n: int, warmup: int, samples: int = 12) -> list[tuple[int, int]]:
    """Run step(i) warmup + n times; (steps done, RSS) after the warm-up and at `samples` even points after."""
    for i in range(warmup):
        step(i)
    gc.collect()
    rss = [(0, rss_bytes())]
    every = max(1, n // samples)
    for i in range(n):
        step(i)
        if (i + 1) % every == 0 or i + 1 == n:
            gc.collect()
            rss.append((i + 1, rss_bytes()))
    return rss


def slope(rss: list[tuple[int, int]]) -> float:
    """Least-squares growth of RSS, in bytes per step."""
    n = len(rss)
    mx = sum(x for x, _ in rss) / n
    my = sum(y for _, y in rss) / n
    sxx = sum((x - mx) ** 2 for x, _ in rss)
    return sum((x - mx) * (y - my) for x, y in rss) / sxx if sxx else 0.0


def generate_calls(path: Path, n: int, leak_bytes: int = 0) -> list[tuple[int, int]]:
    """Short calls that exercise the whole result path: sampling, logprobs, JSON both ways.
    ``leak_bytes`` (a test hook) makes every call keep that much memory, as a leak would."""
    test = {"leak_bytes": leak_bytes} if leak_bytes else {}
    with pyshim.Model(path, n_ctx=512, temperature=0) as m:
        return soak(
            lambda i: m.generate(
                [{"role": "user", "content": f"Say {i % 50}."}],
                max_tokens=2,
                logprobs=True,
                top_logprobs=3,
                **({"_test": test} if test else {}),
            ),
            n,
            warmup=100,
        )


def open_close_cycles(path: Path, n: int) -> list[tuple[int, int]]:
    def cycle(_: int) -> None:
        with pyshim.Model(path, n_ctx=256) as m:
            m.generate([{"role": "user", "content": "hi"}], max_tokens=1)

    return soak(cycle, n, warmup=3)


def report(name: str, n: int, unit: str, rss: list[tuple[int, int]], seconds: float) -> bool:
    """Print one loop's verdict; True when its fitted growth is under the limit."""
    growth = slope(rss)
    ok = growth < SLOPE_LIMIT[unit]
    trace = " ".join(f"{r / 2**20:.1f}" for _, r in rss)
    print(
        f"{n} {name} in {seconds:.0f} s: RSS {rss[0][1] / 2**20:.1f} -> {rss[-1][1] / 2**20:.1f} MiB, "
        f"fitted growth {growth:+.0f} B/{unit} (limit {SLOPE_LIMIT[unit]}; {'ok' if ok else 'FAIL'}); "
        f"MiB along the way: {trace}",
        flush=True,
    )
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    path = models.path(args.model)
    ok = True
    for name, unit, run, n in [
        ("generate calls", "call", generate_calls, args.calls),
        ("open/close cycles", "cycle", open_close_cycles, args.cycles),
    ]:
        t0 = time.monotonic()
        rss = run(path, n)
        ok &= report(name, n, unit, rss, time.monotonic() - t0)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
