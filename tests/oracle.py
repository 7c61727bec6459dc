"""The differential oracles for prompt reuse: what a handle that reused its cache computes,
against a handle that evaluated the same prompt afresh.

Greedy token equality is not sound here (splitting the same tokens into other batches
moves logits slightly and can flip near-ties), so both oracles are divergence bounds.

``divergence``: the next-token distribution at the end of the prompt, read as top-K log
probabilities; the KL divergence is taken over the partition {each token in both top-K
sets} + {everything else}, a coarse-graining that never exceeds the true KL. It sees gross
damage (a wrong sliding window, a reversed prefix) but not one wrong token: measured on
fresh handles, one stale, missing or duplicated token moves it by 0.001-0.03, under the
noise of correct reuse on some models (issue 21).

``probe_divergence``, the sharp one: the library's ``probe`` test hook evaluates a copy of
the prompt after the prompt and reports, at every position of the copy, the log probability
of the token the copy goes on with. A model that has read its context predicts a copy of it
from that context, so a single wrong, missing or extra token in the cache shows as a spike
where the copy reaches it. Both handles run the copy in the same batches at the same
positions, so only the cache differs; the oracle is the largest difference over all
positions, held to a bound calibrated per model from the noise of correct reuse (see
PROBE_BOUND and docs/reuse.md). Each model's tests show that every kind of single-token
corruption (``_test.corrupt``) pushes it above the bound.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pyshim

TOP_K = 1000
KL_BOUND = 0.05
PROBE_TOKENS = 1024  # prompt tokens copied after the prompt (fewer where the context is short)
# The largest |difference of log probability| correct reuse may show at any position of the
# probe, per model: above the largest seen on correct reuse, below the smallest seen for any
# single-token corruption (docs/reuse.md has the figures).
PROBE_BOUND = {"qwen": 2.75, "smollm2": 1.2, "gemma": 2.5, "mamba": 0.05, "hybrid": 0.05}
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


def probe(m: pyshim.Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **options: Any) -> dict:
    test = dict(options.pop("_test", {}))
    test["probe"] = PROBE_TOKENS
    return m.generate(messages, tools, temperature=0, max_tokens=1, _test=test, **options)


def probe_divergence(
    reused: pyshim.Model,
    fresh: pyshim.Model,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    **options: Any,
) -> tuple[float, dict[str, Any]]:
    """The largest |difference of log probability| over the probe's positions between the
    reusing handle and a fresh one (0.0 when they agree bit for bit), and the reusing call's
    result. The probe leaves the reusing handle's cache holding the prompt and the copy; a
    later call reuses the prompt part like any other prefix."""
    r = probe(reused, messages, tools, **options)
    f = probe(fresh, messages, tools, cache_prompt=False)
    assert f["n_reused"] == 0
    a, b = f["_test_probe"]["logprob"], r["_test_probe"]["logprob"]
    assert len(a) == len(b) > 0
    return max(abs(x - y) for x, y in zip(a, b, strict=True)), r
