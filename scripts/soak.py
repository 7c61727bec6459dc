#!/usr/bin/env python3
"""Leak soak: many short generate calls on one handle, then many open/close cycles.

    python -m scripts.soak [--calls 10000] [--cycles 200] [--model smollm2-135m-instruct]

Resident memory is measured after a warm-up (allocators, caches and the model's pages
settle in the first calls) and must not drift by 2 % or more; the exit status says whether
it held. ``tests/test_reliability.py`` runs the same loops at a size that fits ``make test``;
``make soak`` runs them at full size.
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

DRIFT_LIMIT = 0.02


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def soak(step: Callable[[int], object], n: int, warmup: int, samples: int = 10) -> list[int]:
    """Run step(i) warmup + n times; RSS after the warm-up and at `samples` points after."""
    for i in range(warmup):
        step(i)
    gc.collect()
    rss = [rss_bytes()]
    for i in range(n):
        step(i)
        if (i + 1) % max(1, n // samples) == 0 or i + 1 == n:
            gc.collect()
            rss.append(rss_bytes())
    return rss


def generate_calls(path: Path, n: int) -> list[int]:
    """Short calls that exercise the whole result path: sampling, logprobs, JSON both ways."""
    with pyshim.Model(path, n_ctx=512, temperature=0) as m:
        return soak(
            lambda i: m.generate(
                [{"role": "user", "content": f"Say {i % 50}."}], max_tokens=2, logprobs=True, top_logprobs=3
            ),
            n,
            warmup=100,
        )


def open_close_cycles(path: Path, n: int) -> list[int]:
    def cycle(_: int) -> None:
        with pyshim.Model(path, n_ctx=256) as m:
            m.generate([{"role": "user", "content": "hi"}], max_tokens=1)

    return soak(cycle, n, warmup=3)


def drift(rss: list[int]) -> float:
    return (rss[-1] - rss[0]) / rss[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    path = models.path(args.model)
    ok = True
    for name, run, n in [
        ("generate calls", generate_calls, args.calls),
        ("open/close cycles", open_close_cycles, args.cycles),
    ]:
        t0 = time.monotonic()
        rss = run(path, n)
        d = drift(rss)
        ok &= d < DRIFT_LIMIT
        trace = " ".join(f"{r / 2**20:.1f}" for r in rss)
        print(
            f"{n} {name} in {time.monotonic() - t0:.0f} s: RSS {rss[0] / 2**20:.1f} -> {rss[-1] / 2**20:.1f} MiB, "
            f"drift {100 * d:+.2f} % ({'ok' if d < DRIFT_LIMIT else 'FAIL'}); MiB along the way: {trace}",
            flush=True,
        )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
