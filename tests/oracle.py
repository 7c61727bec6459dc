"""The differential oracles for prompt reuse: what a handle that reused its cache computes,
against a handle that evaluated the same prompt afresh.

The exact oracle (``largest_difference`` on two "deterministic" handles): with batch-shape-
independent kernels (docs/determinism.md) correct reuse computes every log probability of the
next tokens bit for bit as a fresh evaluation does, so the bound is zero and one stale, missing,
duplicated or shifted token in the cache shows (test_reuse.py plants each kind on every model).
It is the oracle of the random call sequences in test_determinism.py.

``divergence``, the coarse one, for handles with llama.cpp's default kernels: those round
differently for other batch shapes, so reuse moves the logits slightly and greedy token equality
is not sound. It is the largest KL divergence of the next-token distribution over every token
the reusing call generated (a fresh handle forced through the same tokens), each read from the
top-K log probabilities over {fresh's top K} + {everything else}; lists that share nothing are
far apart. It guards only the configurations the exact oracle cannot run (a windowed
sliding-window cache, threads, streams, RPC): wherever the deterministic kernels can run, the
suites use the exact oracle.

``probe``: the library's ``probe`` test hook evaluates a copy of the prompt after the prompt and
reports, at every position of the copy, the log probability of the token the copy goes on with
(scripts/batch_invariance.py measures batch-shape effects with it).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pyshim

TOP_K = 1000
KL_BOUND = 0.05
PROBE_TOKENS = 1024  # prompt tokens copied after the prompt (fewer where the context is short)
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
    first = entries(result)[0]
    return {t["id"]: t["logprob"] for t in first["top_logprobs"]}


def kl(fresh: dict[int, float], reused: dict[int, float]) -> float:
    """KL(fresh ‖ reused) of one next-token distribution, from both top-K log probabilities, over
    the partition {each token of fresh's top K} + {everything else}. A token fresh lists and
    reused does not is given reused's K-th probability, an upper bound of its own (so its term
    is never overstated); two lists that share nothing are therefore far apart, not 0."""
    if not fresh or not reused:
        return math.inf
    floor = math.exp(min(reused.values()))
    p = [math.exp(v) for v in fresh.values()]
    q = [math.exp(reused[i]) if i in reused else floor for i in fresh]
    p_rest, q_rest = max(0.0, 1.0 - sum(p)), max(0.0, 1.0 - sum(q))
    total = sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q, strict=True) if pi > 0)
    if p_rest > 1e-12:
        total += p_rest * (math.log(p_rest) - math.log(max(q_rest, 1e-30)))
    return max(total, 0.0)


def call(m: pyshim.Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **options: Any) -> dict:
    test = dict(options.pop("_test", {}))
    test["top_logprobs"] = TOP_K
    return m.generate(messages, tools, temperature=0, logprobs=True, _test=test, **options)


def dist(entry: dict[str, Any]) -> dict[int, float]:
    return {t["id"]: t["logprob"] for t in entry["top_logprobs"]}


def trajectory_kl(
    fresh: pyshim.Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, r: dict[str, Any]
) -> list[float]:
    """KL(fresh ‖ r) at every token the call `r` generated: a fresh handle evaluates the same
    prompt afresh and is forced through the same tokens, so a reply that a near tie sent
    elsewhere is still compared token by token."""
    generated = entries(r)
    ids = [t["id"] for t in generated]
    f = call(fresh, messages, tools, max_tokens=len(ids), cache_prompt=False, _test={"force": ids})
    assert f["n_reused"] == 0
    return [kl(dist(a), dist(b)) for a, b in zip(entries(f), generated, strict=True)]


def entries(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every generated token's logprob entry: the output's, then the end token's (ABI 1.12 keeps
    it apart, under "end"), which the oracles compare too."""
    lp = result["logprobs"]
    return [*lp["content"], *([lp["end"]] if lp.get("end") else [])]


def divergence(
    reused: pyshim.Model,
    fresh: pyshim.Model,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    max_tokens: int = 1,
    **options: Any,
) -> tuple[float, dict[str, Any]]:
    """The largest KL(fresh ‖ reused) over every token the reusing call generated, and its
    result."""
    r = call(reused, messages, tools, max_tokens=max_tokens, **options)
    return max(trajectory_kl(fresh, messages, tools, r)), r


def probe(m: pyshim.Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **options: Any) -> dict:
    test = dict(options.pop("_test", {}))
    test["probe"] = PROBE_TOKENS
    return m.generate(messages, tools, temperature=0, max_tokens=1, _test=test, **options)


# The exact oracle: with "deterministic" handles (docs/determinism.md) correct reuse computes
# the same log probabilities as a fresh evaluation bit for bit, so any difference is a fault.
GREEDY = {"temperature": 0, "logprobs": True, "top_logprobs": 5}


def tokens(result: dict[str, Any]) -> list[tuple[int, float, list[tuple[int, float]]]]:
    """Each generated token with its log probability and its top alternatives, as computed."""
    return [(t["id"], t["logprob"], [(a["id"], a["logprob"]) for a in t["top_logprobs"]]) for t in entries(result)]


def largest_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    """0.0 when both calls computed the same tokens with the same log probabilities; the largest
    |difference| otherwise (infinity when they chose different tokens or alternatives)."""
    ta, tb = tokens(a), tokens(b)
    if [t[0] for t in ta] != [t[0] for t in tb]:
        return float("inf")
    worst = 0.0
    for (_, la, alts_a), (_, lb, alts_b) in zip(ta, tb, strict=True):
        if [i for i, _ in alts_a] != [i for i, _ in alts_b]:
            return float("inf")
        worst = max(worst, abs(la - lb), *(abs(x - y) for (_, x), (_, y) in zip(alts_a, alts_b, strict=True)))
    return worst


def tool_exchange(rng: random.Random, i: int) -> list[dict[str, Any]]:
    call_id = f"call_{i}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": text(rng, 25)},
    ]


def change(rng: random.Random, conv: list[dict[str, Any]], op: str, step: int, words: int) -> list[dict[str, Any]]:
    """The random sequences' edits of a conversation: "tool" appends a tool exchange, "edit"
    rewrites the first user message, "drop" removes the last exchange; other ops leave it."""
    if op == "tool":
        return [*conv, *tool_exchange(rng, step)]
    if op == "edit":
        conv = [dict(m) for m in conv]
        conv[1]["content"] = text(rng, words)
    elif op == "drop" and len(conv) > 3:
        return conv[:-2]
    return conv
