"""Threads, cancellation and time limits: one handle is serialized, cancel returns promptly,
closing under a running call is defined, and the next call is always correct."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import SMOL, user
from oracle import KL_BOUND, divergence

import pyshim
from pyshim import models

LONG = user("Tell me a very long story about a lighthouse keeper and the sea, with many chapters.")
# What a call that must be cancelled runs with: a model free to stop would sometimes answer in a dozen
# tokens (qwen2.5 once refused in one sentence) and finish before the cancel arrives.
UNENDING = {"max_tokens": 2000, "ignore_eos": True}


def test_one_handle_from_several_threads_is_serialized(smol: pyshim.Model) -> None:
    # Every threaded call repeats this prompt, so each evaluates the same last token on the
    # same cached prefix: identical batches, identical output (FACTS.md: only a different
    # batch split may change logits). Prime that state first.
    smol.generate(user("Name three colors."), max_tokens=16)
    expected = smol.generate(user("Name three colors."), max_tokens=16)["content"]
    results: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(smol.generate(user("Name three colors."), max_tokens=16)["content"])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [expected] * 4


def overlapping_runs(a: pyshim.Model, b: pyshim.Model) -> tuple[dict[str, str], dict[str, list[float]]]:
    """Run the same greedy call on a and b from two threads started together; return each
    one's text and the times at which its deltas arrived."""
    outs: dict[str, str] = {}
    stamps: dict[str, list[float]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def run(name: str, m: pyshim.Model) -> None:
        start.wait()
        r = m.generate(
            user("Say something about rivers."),
            max_tokens=32,
            temperature=0,
            ignore_eos=True,
            on_delta=lambda _d: stamps[name].append(time.monotonic()),
        )
        outs[name] = r["content"]

    threads = [threading.Thread(target=run, args=(name, m)) for name, m in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outs, stamps


def test_separate_handles_interleave_their_calls_on_the_compute_lane() -> None:
    """Two handles no longer compute at once (their batches take turns on the process's one
    compute lane, native/compute_lane.h); what holds is that neither call waits for the other to
    end: their streams overlap in time."""
    path = models.path(SMOL)
    with pyshim.Model(path, n_ctx=512, n_threads=1) as a, pyshim.Model(path, n_ctx=512, n_threads=1) as b:
        outs, stamps = overlapping_runs(a, b)
        assert outs["a"] == outs["b"] and outs["a"]
        # Each handle streamed tokens while the other was still streaming: the two calls
        # overlap in time, their batches taking turns on the process's compute lane. (One
        # lock for all handles would put all of one call's deltas before the other's, as two
        # calls on one handle do.)
        ta, tb = stamps["a"], stamps["b"]
        assert len(ta) > 8 and len(tb) > 8
        assert ta[0] < tb[-1] and tb[0] < ta[-1], f"a {ta[0]:.3f}..{ta[-1]:.3f}, b {tb[0]:.3f}..{tb[-1]:.3f}"


# Run in a process of its own: which threads exist is a fact about the whole process.
# The calls come from a thread named "caller", which an OpenMP team of its own would name
# its workers after (a new thread inherits its creator's name on Linux).
ONE_TEAM_SCRIPT = """
import json, os, sys, threading
import pyshim

def names():
    out = []
    for t in os.listdir("/proc/self/task"):
        try:
            out.append(open(f"/proc/self/task/{t}/comm").read().strip())
        except OSError:
            pass  # a thread that ended meanwhile
    return out

def calls():
    with open("/proc/thread-self/comm", "w") as f:
        f.write("caller")
    a = pyshim.Model(sys.argv[1], n_ctx=512, n_threads=2)
    b = pyshim.Model(sys.argv[1], n_ctx=512, n_threads=2, n_seq=2)
    for m in (a, b, a, b):
        m.generate([{"role": "user", "content": "Name a colour."}], max_tokens=4, temperature=0)
    # the probe test hook evaluates more batches right after the prompt's last one
    b.generate([{"role": "user", "content": "Name a fruit."}], max_tokens=1, _test={"probe": 8})
    result["names"] = names()
    a.close()
    b.close()

before = names()
result = {}
t = threading.Thread(target=calls)
t.start()
t.join()
print(json.dumps({"before": before, "during": result["names"]}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names from /proc")
def test_every_handle_evaluates_on_the_process_compute_lane() -> None:
    # ggml's OpenMP worker team belongs to the thread that evaluates, and libgomp spins only
    # 100 times at a barrier once it manages more threads than CPUs: two teams slowed decode
    # by a third or more (native/compute_lane.h). Every llama_decode of every handle runs on
    # the lane, so the process holds one team: the lane and its n_threads - 1 workers.
    out = subprocess.run(
        [sys.executable, "-c", ONE_TEAM_SCRIPT, str(models.path(SMOL))],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    seen = json.loads(out.stdout.splitlines()[-1])
    new = Counter(seen["during"]) - Counter(seen["before"])
    assert new == Counter({"el-compute": 2, "el-evaluator": 2, "caller": 1}), new


FORK_SCRIPT = """
import os, sys, time
import pyshim

def one_call(path):
    ask = [{"role": "user", "content": "Name a colour."}]
    with pyshim.Model(path, n_ctx=512, n_threads=2) as m:
        text = m.generate(ask, max_tokens=2, temperature=0)["content"]
        streamed = "".join(d.get("content") or "" for d in m.stream(ask, max_tokens=2, temperature=0))
        return text and streamed == text

one_call(sys.argv[1])  # the parent's compute lane and the binding's stream worker now have threads
pid = os.fork()
if pid == 0:
    os._exit(0 if one_call(sys.argv[1]) else 1)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("exit", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("hung")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork()")
def test_a_child_of_fork_opens_and_uses_a_handle_of_its_own() -> None:
    # The child has no copy of the parent's threads: a compute lane kept from the parent would
    # take the child's evaluations and never run them, and an idle stream worker kept from it
    # (pyshim/_call.py) the child's stream.
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", FORK_SCRIPT, str(models.path(SMOL))],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert out.stdout.splitlines()[-1] == "exit 0", out.stdout + out.stderr


def test_cancel_from_another_thread_returns_promptly(smol: pyshim.Model) -> None:
    timer = threading.Timer(0.3, smol.cancel)
    t0 = time.monotonic()
    timer.start()
    r = smol.generate(LONG, **UNENDING)
    elapsed = time.monotonic() - t0
    assert r["finish_reason"] == "cancelled"
    assert elapsed < 3.0
    ok = smol.generate(user("Say OK."), max_tokens=4)
    assert ok["finish_reason"] in ("stop", "length") and ok["n_decoded"] >= 1


def test_cancel_with_nothing_running_does_not_affect_the_next_call(smol: pyshim.Model) -> None:
    smol.cancel()
    assert smol.generate(user("Say OK."), max_tokens=4)["finish_reason"] != "cancelled"


def test_timeout_ms_limits_a_call(smol: pyshim.Model) -> None:
    t0 = time.monotonic()
    r = smol.generate(LONG, timeout_ms=300, **UNENDING)
    assert r["finish_reason"] == "cancelled"
    assert time.monotonic() - t0 < 3.0
    assert smol.generate(user("Say OK."), max_tokens=4)["n_decoded"] >= 1


def test_cancelled_prefill_leaves_a_consistent_cache(qwen_path: Path) -> None:
    with pyshim.Model(qwen_path, n_ctx=4096, n_batch=64, temperature=0) as m:
        long_prompt = user("word " * 1500 + "Summarize.")
        r = m.generate(long_prompt, max_tokens=4, timeout_ms=200)  # expires inside the prompt's evaluation
        assert r["finish_reason"] == "cancelled"
        assert m.stats()["cache"]["n_tokens"] <= r["n_prompt"]
        with pyshim.Model(qwen_path, n_ctx=4096) as fresh:
            d, _ = divergence(m, fresh, user("What is 2+2?"))
        assert d < KL_BOUND


def test_close_while_another_thread_generates(qwen_path: Path) -> None:
    m = pyshim.Model(qwen_path, n_ctx=1024)
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = m.generate(LONG, **UNENDING)
        except pyshim.ShimError as e:
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    m.close()  # cancels the call and waits for it
    assert time.monotonic() - t0 < 3.0
    t.join(5)
    assert not t.is_alive()
    result = out.get("result")
    assert isinstance(result, dict) and result["finish_reason"] == "cancelled"
    try:
        m.generate(user("hi"))
    except pyshim.ClosedModel:
        pass
    else:
        raise AssertionError("a closed model must refuse calls")
