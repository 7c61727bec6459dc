"""The differential oracle for prompt reuse: the next-token distribution at the end of
a prompt, from a handle that reused its cache, against one evaluated afresh.

Greedy token equality is not sound here (splitting the same tokens into other batches
moves logits slightly and can flip near-ties), so the oracle is a divergence bound.
Both distributions are read as their top-K log probabilities; the KL divergence is
taken over the partition {each token in both top-K sets} + {everything else}. That is
a coarse-graining of the full distributions, so it never exceeds the true KL: a value
above the bound is real corruption, and each model's test also shows that a
deliberately corrupted cache does push it above the bound.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pyshim

TOP_K = 1000
KL_BOUND = 0.05
# Filler words for long, deterministic messages (so prompts pass a 512-token window).
WORDS = [
    "river",
    "mountain",
    "ledger",
    "copper",
    "violet",
    "engine",
    "harbor",
    "lantern",
    "orchard",
    "meadow",
    "signal",
    "quarry",
    "thunder",
    "canvas",
    "marble",
    "falcon",
    "willow",
    "garnet",
    "compass",
    "cedar",
    "anchor",
    "beacon",
    "glacier",
    "saffron",
    "tundra",
    "cobalt",
    "ember",
    "fjord",
    "juniper",
    "kestrel",
    "lagoon",
    "mosaic",
    "nectar",
    "obsidian",
    "prairie",
    "quartz",
]


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "."


def next_token_dist(result: dict[str, Any]) -> dict[int, float]:
    first = result["logprobs"]["content"][0]
    return {t["id"]: t["logprob"] for t in first["top_logprobs"]}


def kl(fresh: dict[int, float], reused: dict[int, float]) -> float:
    common = fresh.keys() & reused.keys()
    p = [math.exp(fresh[i]) for i in common]
    q = [math.exp(reused[i]) for i in common]
    p_rest, q_rest = max(0.0, 1.0 - sum(p)), max(0.0, 1.0 - sum(q))
    total = sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q, strict=True) if pi > 0)
    if p_rest > 1e-12:
        total += p_rest * (math.log(p_rest) - math.log(max(q_rest, 1e-30)))
    return total


def call(m: pyshim.Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **options: Any) -> dict:
    test = dict(options.pop("_test", {}))
    test["top_logprobs"] = TOP_K
    return m.generate(messages, tools, temperature=0, logprobs=True, _test=test, **options)


def divergence(
    reused: pyshim.Model,
    fresh: pyshim.Model,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    max_tokens: int = 1,
    **options: Any,
) -> tuple[float, dict[str, Any]]:
    """KL(fresh ‖ reused) at the end of this prompt, and the reusing call's result."""
    r = call(reused, messages, tools, max_tokens=max_tokens, **options)
    f = call(fresh, messages, tools, max_tokens=1, cache_prompt=False)
    assert f["n_reused"] == 0
    return kl(next_token_dist(f), next_token_dist(r)), r
