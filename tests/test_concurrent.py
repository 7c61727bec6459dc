"""Calls running at once on one handle (n_seq >= 2): their decode steps share batches, and each
call still computes what it would compute alone (oracles of oracle.py, against a fresh handle);
cancel, timeouts, errors and close stay per call."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import GEMMA, QWEN, SMOL, model_path, user
from oracle import GREEDY, KL_BOUND, TOP_K, change, largest_difference, text, trajectory_kl

import pyshim

# The KL oracle is for what the exact one cannot run: a windowed sliding-window cache (gemma-3,
# Gemma 4 with swa_full false), where "deterministic" is refused. Every other memory layout runs
# under the exact oracle below (test_concurrent_deterministic_calls_equal_a_fresh_handle_bit_for_bit).
CASES = [
    ("gemma-swa", GEMMA, {"swa_full": False}, 90),
    ("gemma4-swa", "tiny:gemma4", {"swa_full": False}, 20),
]


def at_once(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run every function on its own thread, started together; their results in order."""
    out: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []
    start = threading.Barrier(len(fns))

    def work(i: int) -> None:
        start.wait()
        try:
            out[i] = fns[i]()
        except BaseException as e:  # re-raised on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]
    return out


@pytest.mark.parametrize(("name", "spec", "extra", "words"), CASES, ids=[c[0] for c in CASES])
def test_concurrent_calls_match_a_fresh_context(name: str, spec: str, extra: dict, words: int) -> None:
    path = model_path(spec)
    rng = random.Random(f"concurrent-{name}")
    with (
        pyshim.Model(path, n_ctx=2048, n_seq=3, temperature=0, **extra) as shared,
        pyshim.Model(path, n_ctx=2048, temperature=0, **extra) as fresh,
    ):
        convs = [
            [{"role": "system", "content": f"Conversation {i}. " + text(rng, words)}, *user(text(rng, words))]
            for i in range(3)
        ]
        batched = 0
        for rnd in range(3):
            lengths = [rng.randint(3, 10) for _ in convs]

            results = at_once(
                [
                    lambda c=c, n=n: shared.generate(
                        c, temperature=0, logprobs=True, max_tokens=n, _test={"top_logprobs": TOP_K}
                    )
                    for c, n in zip(convs, lengths, strict=True)
                ]
            )
            batched = max(batched, *(r["n_batched_max"] for r in results))
            for i, r in enumerate(results):
                worst = max(trajectory_kl(fresh, convs[i], None, r))
                assert worst < KL_BOUND, f"{name}: round {rnd}, conversation {i}: KL {worst:.4f}"
                op = rng.choice(["append", "tool", "edit"])
                convs[i] = change(rng, [*convs[i], r["message"], *user(text(rng, words // 2))], op, rnd, words)
        assert batched >= 2, "the calls never shared a decode step"


@pytest.mark.parametrize(
    "spec", [QWEN, SMOL, GEMMA, "tiny:mamba", "tiny:hybrid", "tiny:gemma4", "tiny:qwen35", "tiny:lfm2"]
)
def test_concurrent_deterministic_calls_equal_a_fresh_handle_bit_for_bit(spec: str) -> None:
    """With batch-invariant kernels, a call decoded beside others computes every token and
    log probability exactly as a fresh handle computing it alone: the sharp oracle (the KL
    one above does not see one wrong token in a cache; this one does)."""
    path = model_path(spec)
    rng = random.Random(f"concurrent-deterministic-{spec}")
    with (
        pyshim.Model(path, n_ctx=1024, n_seq=3, deterministic=True) as shared,
        pyshim.Model(path, n_ctx=1024, deterministic=True) as fresh,
    ):
        convs = [
            [{"role": "system", "content": f"Notes {i}. " + text(rng, 30)}, *user(text(rng, 12))] for i in range(3)
        ]
        batched = 0
        for _ in range(3):
            results = at_once([lambda c=c: shared.generate(c, max_tokens=8, **GREEDY) for c in convs])
            batched = max(batched, *(r["n_batched_max"] for r in results))
            for i, r in enumerate(results):
                f = fresh.generate(convs[i], max_tokens=8, cache_prompt=False, **GREEDY)
                assert largest_difference(f, r) == 0.0, f"conversation {i}"
                convs[i] = [*convs[i], r["message"], *user(text(rng, 6))]
        assert batched >= 2


def long_call(m: pyshim.Model, **options: Any) -> dict[str, Any]:
    return m.generate(user("Tell me a long story about the sea."), temperature=0, ignore_eos=True, **options)


def test_one_call_stops_alone_and_the_others_go_on() -> None:
    """A stream callback that returns False and a timeout_ms end their own call only; a call
    that fails mid-way clears its own slot only; more callers than slots wait their turn."""
    with pyshim.Model(model_path(SMOL), n_ctx=1024, n_seq=2) as m:
        seen = {"n": 0}

        def stop_after_3(_d: dict[str, Any]) -> bool:
            seen["n"] += 1
            return seen["n"] < 3

        fns = [
            lambda: long_call(m, max_tokens=40, on_delta=stop_after_3),
            lambda: long_call(m, max_tokens=40),
            lambda: long_call(m, max_tokens=4000, timeout_ms=1500),
            lambda: long_call(m, max_tokens=40, session="s"),
        ]
        t0 = time.monotonic()
        stopped, full, timed_out, waited = at_once(fns)
        assert stopped["finish_reason"] == "cancelled" and stopped["n_decoded"] < 40
        assert full["finish_reason"] == "length" and full["n_decoded"] == 40
        assert timed_out["finish_reason"] == "cancelled"
        assert waited["finish_reason"] == "length" and waited["n_decoded"] == 40
        assert time.monotonic() - t0 < 120
        with pytest.raises(pyshim.ShimError):
            at_once(
                [
                    lambda: long_call(m, max_tokens=2, _test={"fail_after_prefill": True}),
                    lambda: long_call(m, max_tokens=1),
                ]
            )
        r = long_call(m, max_tokens=3)
        assert r["finish_reason"] == "length"


def test_calls_of_one_session_take_turns_on_its_slot() -> None:
    with pyshim.Model(model_path(SMOL), n_ctx=1024, n_seq=2) as m:
        rs = at_once([lambda: long_call(m, max_tokens=12, session="same") for _ in range(2)])
        assert rs[0]["slot"] == rs[1]["slot"]
        assert all(r["n_batched_max"] == 1 for r in rs)  # one slot, one call at a time
        assert sorted(r["n_reused"] > 0 for r in rs) == [False, True]


def test_close_while_calls_run_concurrently() -> None:
    m = pyshim.Model(model_path(SMOL), n_ctx=1024, n_seq=3)
    out: list[Any] = []

    def call() -> None:
        try:
            out.append(long_call(m, max_tokens=4000)["finish_reason"])
        except pyshim.ShimError as e:
            out.append(str(e))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    t0 = time.monotonic()
    m.close()
    for t in threads:
        t.join(30)
    assert time.monotonic() - t0 < 30
    assert len(out) == 4
    assert out.count("cancelled") >= 3  # the three that ran; the fourth waited for a slot


def test_device_loss_fails_every_call_in_flight(qwen_path: Any) -> None:
    m = pyshim.Model(qwen_path, n_ctx=512, n_seq=2)
    running: list[Any] = []

    def run() -> None:
        try:
            running.append(long_call(m, max_tokens=4000))
        except pyshim.ShimError as e:
            running.append(e)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.0)
    with pytest.raises(pyshim.ShimError, match="device may be lost"):
        m.generate(user("hi"), max_tokens=4, _test={"device_lost": True})
    t.join(60)
    assert isinstance(running[0], pyshim.ShimError) and "device may be lost" in str(running[0])
    with pytest.raises(pyshim.ShimError, match="handle is dead"):
        m.generate(user("hi"), max_tokens=4)
    m.close()


def test_stop_strings_and_grammars_stay_per_call() -> None:
    schema = {"type": "object", "properties": {"n": {"const": 7}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    with pyshim.Model(model_path(SMOL), n_ctx=1024, n_seq=3, temperature=0) as m:
        count = user("Count from 1 to 20, separated by commas.")
        alone = m.generate(count, max_tokens=60)["content"]
        assert "5" in alone
        stopped, free, shaped = at_once(
            [
                lambda: m.generate(count, max_tokens=60, stop=["5"]),
                lambda: m.generate(count, max_tokens=60),
                lambda: m.generate(user("Give me a number."), max_tokens=20, response_format=fmt),
            ]
        )
        assert stopped["content"] == alone[: alone.index("5")]
        assert "5" in free["content"]
        assert json.loads(shaped["content"]) == {"n": 7}
