"""Several conversations warm on one model: slots, prefix routing, sessions, and exactness."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import GEMMA, QWEN, SMOL, model_path, user
from oracle import KL_BOUND, divergence, text

import pyshim
from pyshim import models

CASES = [
    ("qwen", QWEN, {}, 20),
    ("smollm2", SMOL, {}, 40),
    ("gemma-swa", GEMMA, {"swa_full": False}, 90),
    ("mamba", "tiny:mamba", {}, 40),
    ("hybrid", "tiny:hybrid", {}, 40),
    ("gemma4-swa", "tiny:gemma4", {"swa_full": False}, 20),
    ("qwen35", "tiny:qwen35", {}, 20),
    ("lfm2", "tiny:lfm2", {}, 20),
]


@pytest.mark.parametrize(("name", "spec", "extra", "words"), CASES, ids=[c[0] for c in CASES])
def test_random_interleavings_match_a_fresh_context(name: str, spec: str, extra: dict, words: int) -> None:
    path = model_path(spec)
    rng = random.Random(f"slots-{name}")
    with (
        pyshim.Model(path, n_ctx=2048, n_seq=2, temperature=0, **extra) as slots,
        pyshim.Model(path, n_ctx=2048, temperature=0, **extra) as fresh,
    ):
        convs: list[list[dict[str, Any]]] = [
            [{"role": "system", "content": f"Conversation {i}. " + text(rng, words)}, *user(text(rng, words))]
            for i in range(3)
        ]
        for step in range(10):
            i = rng.randrange(3)  # three conversations on two slots: evictions happen
            if step == 6:
                with pytest.raises(pyshim.ShimError):
                    slots.generate(convs[i], max_tokens=2, temperature=0, _test={"fail_after_prefill": True})
            # The KL oracle: the probe oracle's per-model bounds (test_reuse.py) were exceeded by
            # correct reuse after slot evictions here (smollm2 2.38 vs 1.2), so they are not yet
            # calibrated for evicted and restored slots.
            d, r = divergence(slots, fresh, convs[i], max_tokens=rng.randint(1, 6))
            assert d < KL_BOUND, f"{name}: step {step}, conversation {i}: KL {d:.4f}"
            convs[i] = [*convs[i], r["message"], *user(text(rng, words // 2))]


def test_alternating_conversations_each_keep_their_slot() -> None:
    path = models.path(SMOL)
    rng = random.Random("alternate")
    a = [{"role": "system", "content": "A. " + text(rng, 120)}, *user(text(rng, 20))]
    b = [{"role": "system", "content": "B. " + text(rng, 120)}, *user(text(rng, 20))]
    with pyshim.Model(path, n_ctx=2048, n_seq=2, temperature=0) as m:
        seen_slots: dict[str, int] = {}
        for turn in range(3):
            for name, conv in (("a", a), ("b", b)):
                r = m.generate(conv, max_tokens=4)
                seen_slots.setdefault(name, r["slot"])
                assert r["slot"] == seen_slots[name]
                if turn > 0:
                    assert r["n_reused"] / r["n_prompt"] > 0.8, r
                conv.extend([r["message"], *user(text(rng, 10))])
        assert seen_slots["a"] != seen_slots["b"]
        stats = m.stats()["cache"]
        assert stats["n_slots"] == 2 and all(s["n_tokens"] > 100 for s in stats["slots"])
    with pyshim.Model(path, n_ctx=2048, n_seq=1, temperature=0, state_cache_mib=0) as one:
        one.generate(a, max_tokens=4)
        one.generate(b, max_tokens=4)
        assert one.generate(a, max_tokens=4)["n_reused"] < 10  # one slot, no host cache: every switch starts over
    with pyshim.Model(path, n_ctx=2048, n_seq=1, temperature=0) as one:
        one.generate(a, max_tokens=4)
        one.generate(b, max_tokens=4)
        back = one.generate(a, max_tokens=4)  # one slot, but a waited in host memory
        assert back["restored_from_host"] and back["n_reused"] > 200


def test_sessions_pin_slots_and_can_be_forgotten() -> None:
    path = models.path(SMOL)
    conv = [{"role": "system", "content": "Shared. " + text(random.Random(1), 80)}, *user("Hi")]
    # sessions in no scope: each one's slot holds only its own tokens (sharing: test_scopes.py)
    with pyshim.Model(path, n_ctx=1024, n_seq=2, temperature=0, scope=None) as m:
        r1 = m.generate(conv, max_tokens=2, session="alice")
        r2 = m.generate(conv, max_tokens=2, session="bob")
        assert r1["slot"] != r2["slot"]
        assert r2["n_reused"] == 0  # bob's slot never held alice's tokens
        again = m.generate(conv, max_tokens=2, session="alice")
        assert again["slot"] == r1["slot"] and again["n_reused"] > 0
        sessions = {s["session"] for s in m.stats()["cache"]["slots"]}
        assert sessions == {"alice", "bob"}
        m.forget("alice")
        after = m.generate(conv, max_tokens=2, session="alice")
        assert after["n_reused"] == 0
        assert m.generate(conv, max_tokens=2, session="bob")["n_reused"] > 0


@pytest.mark.parametrize(
    ("name", "spec", "extra"), [c[:3] for c in CASES if c[0] != "qwen"], ids=[c[0] for c in CASES[1:]]
)
def test_evicted_conversations_come_back_from_host_memory(name: str, spec: str, extra: dict) -> None:
    path = model_path(spec)
    rng = random.Random(f"host-{name}")
    convs = [
        [{"role": "system", "content": f"Conversation {i}. " + text(rng, 80)}, *user(text(rng, 30))] for i in range(3)
    ]
    with (
        pyshim.Model(path, n_ctx=2048, n_seq=2, temperature=0, **extra) as m,
        pyshim.Model(path, n_ctx=2048, temperature=0, **extra) as fresh,
    ):
        first_prompt = []
        for conv in convs:  # the third evicts the first into host memory
            r = m.generate(conv, max_tokens=3)
            first_prompt.append(r["n_prompt"])
            conv.extend([r["message"], *user(text(rng, 10))])
        assert m.stats()["cache"]["host_cache"]["entries"] == 1
        d, back = divergence(m, fresh, convs[0])
        assert back["restored_from_host"] is True
        # its whole earlier prompt came back, not re-evaluated: with a real template that renders
        # the reply otherwise in the next call's history (gemma4, qwen35), up to where the reply's
        # turn opened (a checkpoint that travelled to host memory with the conversation)
        floor = first_prompt[0]
        if name in ("gemma4-swa", "qwen35"):
            prepared = fresh.generate(convs[0][:2], max_tokens=1, _test={"prepare_only": True})["prepared"]
            floor = prepared["generation_start"]
        assert back["n_reused"] >= floor > 0, (back["n_reused"], floor)
        assert d < KL_BOUND, f"{name}: KL {d:.4f} after a host-memory restore"
        m.reset()
        assert m.stats()["cache"]["host_cache"] == {"entries": 0, "bytes": 0, "limit_bytes": 256 << 20}
