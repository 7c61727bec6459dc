#!/usr/bin/env python3
"""Does a setting make logits independent of how the prompt was evaluated? The measurement behind
docs/determinism.md.

    python -m scripts.batch_invariance [--models ...] [--configs default deterministic ...]

For each model and configuration, one conversation (~450 tokens) is evaluated three ways against
a fresh handle that evaluates it in one go (n_batch 512):

- split: afresh with n_batch 7 (every batch shape differs);
- reuse: after a call on its first messages, so that prefix comes from the cache;
- own reply: after a call that generated the assistant reply the conversation then goes on with,
  so the reply's tokens were evaluated one at a time (decode) and come from the cache.

The figure is the largest |difference of log probability| over the positions of the library's
probe (a copy of the prompt evaluated after it, tests/oracle.py): 0 means bit for bit equal.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]

from oracle import probe, text  # noqa: E402
from tiny_models import KINDS, tiny_model  # noqa: E402

import pyshim  # noqa: E402
from pyshim import models  # noqa: E402

CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "flash_attn off": {"flash_attn": "off"},
    "swa_full": {"swa_full": True},
    "deterministic": {"deterministic": True},
}
MODELS = ["qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct", "gemma-3-270m", "mamba", "hybrid"]


def conversation() -> list[dict[str, str]]:
    rng = random.Random(1)
    out = [{"role": "system", "content": "You are terse."}]
    for _ in range(4):
        out += [{"role": "user", "content": text(rng, 40)}, {"role": "assistant", "content": text(rng, 20)}]
    return [*out, {"role": "user", "content": text(rng, 30)}]


def series(m: pyshim.Model, conv: list[dict[str, Any]], **options: Any) -> list[float]:
    return probe(m, conv, None, **options)["_test_probe"]["logprob"]


def largest(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def measure(path: Path, config: dict[str, Any]) -> dict[str, float]:
    conv = conversation()
    base = {"n_ctx": 4096, "temperature": 0, **config}
    with pyshim.Model(path, **base) as m:
        fresh = series(m, conv, cache_prompt=False)
    with pyshim.Model(path, n_batch=7, **base) as m:
        split = series(m, conv, cache_prompt=False)
    with pyshim.Model(path, **base) as m:
        m.generate(conv[:4], max_tokens=5)
        reused = series(m, conv)
    with pyshim.Model(path, **base) as m:
        reply = m.generate(conv[:4], max_tokens=24)["message"]
        own = [*conv[:4], reply, conv[-1]]
        own_reused = series(m, own)
    with pyshim.Model(path, **base) as m:
        own_fresh = series(m, own, cache_prompt=False)
    return {
        "split": largest(fresh, split),
        "reuse": largest(fresh, reused),
        "own reply": largest(own_fresh, own_reused),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args()
    print(f"{pyshim.version()}: largest |Δ log p| over the probe positions against a fresh evaluation")
    print("| model | configuration | split (n_batch 7) | reuse | own reply |\n|---|---|---|---|---|")
    for name in args.models:
        path = tiny_model(name) if name in KINDS else models.path(name)
        for label in args.configs:
            d = measure(path, CONFIGS[label])
            print(f"| {name} | {label} | {d['split']:.3g} | {d['reuse']:.3g} | {d['own reply']:.3g} |", flush=True)


if __name__ == "__main__":
    main()
