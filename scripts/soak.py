#!/usr/bin/env python3
"""Leak soak: many short generate calls on one handle, then many open/close cycles.

    python -m scripts.soak [--calls 10000] [--cycles 200] [--model smollm2-135m-instruct]

Two measures are sampled after a warm-up (allocators, caches and the model's pages settle in
the first calls) and at even steps after it: resident memory (what a user sees) and the bytes
the C heap has handed out and not had back (glibc's mallinfo2, all arenas). The second is the
sharper one: a small leak in a process whose heap has free holes (any process that has run for
a while, such as the test suite) is served from those holes and leaves RSS flat, but it always
grows the heap's in-use bytes. A line through each series gives the growth per step: its slope
is the median of the slopes between every pair of samples (Theil-Sen), so a steady leak shows
however small each step's share (comparing the first and last sample would hide it in noise),
while a one-off step, such as the allocator growing an arena once or a page first touched late,
does not pass for a leak (CI saw RSS jump 364 KiB once, early, in a 600-call run that was flat
before and after; a least-squares line read that as 523 B per call). Both slopes must stay under SLOPE_LIMIT bytes
per call (per cycle for open/close); the exit status says whether they held.
``tests/test_reliability.py`` runs the same loops at a size that fits ``make test`` (``make
soak`` runs them at full size) and shows that a steady leak a few times the limit (the
``_test.leak_bytes`` hook) fails the check.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyshim
from pyshim import models

# Bytes of resident memory a step may add, on the fitted line. RSS moves in 4 KiB pages and
# the allocator keeps freed memory, so a flat run still fits a small slope either way.
SLOPE_LIMIT = {"call": 256, "cycle": 64 * 1024}


Series = list[tuple[int, int]]  # (steps done, bytes)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def heap_bytes() -> int:
    """Bytes malloc has handed out and not had back: small blocks in every arena plus mmapped ones."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def soak(step: Callable[[int], object], n: int, warmup: int, samples: int = 12) -> dict[str, Series]:
    """Run step(i) warmup + n times; RSS and heap in use after the warm-up and at `samples` even points after."""
    for i in range(warmup):
        step(i)
    series: dict[str, Series] = {"rss": [], "heap": []}

    def sample(done: int) -> None:
        gc.collect()
        series["rss"].append((done, rss_bytes()))
        series["heap"].append((done, heap_bytes()))

    sample(0)
    every = max(1, n // samples)
    for i in range(n):
        step(i)
        if (i + 1) % every == 0 or i + 1 == n:
            sample(i + 1)
    return series


def slope(series: Series) -> float:
    """Growth of a series in bytes per step: the median of the slopes between all pairs of samples
    (Theil-Sen). Up to ~29 % of the samples can sit off the line without moving it, so one early
    step does not read as a leak, while a steady growth moves every pair alike."""
    pairs = [(y1 - y0) / (x1 - x0) for i, (x0, y0) in enumerate(series) for x1, y1 in series[i + 1 :] if x1 != x0]
    return statistics.median(pairs) if pairs else 0.0


def generate_calls(path: Path, n: int, leak_bytes: int = 0) -> dict[str, Series]:
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


def open_close_cycles(path: Path, n: int) -> dict[str, Series]:
    def cycle(_: int) -> None:
        with pyshim.Model(path, n_ctx=256) as m:
            m.generate([{"role": "user", "content": "hi"}], max_tokens=1)

    return soak(cycle, n, warmup=3)


def describe(series: Series, unit: str) -> str:
    """One series as the tests and the soak print it: its fitted growth and the samples in KiB."""
    return f"{slope(series):+.0f} B/{unit}; KiB along the way: {[b >> 10 for _, b in series]}"


def report(name: str, n: int, unit: str, series: dict[str, Series], seconds: float) -> bool:
    """Print one loop's verdict; True when both fitted growths are under the limit."""
    ok = True
    for metric, samples in series.items():
        held = slope(samples) < SLOPE_LIMIT[unit]
        ok &= held
        first, last = samples[0][1] / 2**20, samples[-1][1] / 2**20
        print(
            f"{n} {name} in {seconds:.0f} s, {metric}: {first:.1f} -> {last:.1f} MiB, "
            f"fitted growth {describe(samples, unit)} (limit {SLOPE_LIMIT[unit]}; {'ok' if held else 'FAIL'})",
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
        series = run(path, n)
        ok &= report(name, n, unit, series, time.monotonic() - t0)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
