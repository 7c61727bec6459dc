"""One call never holds up, breaks or reveals another on the same handle (el_shim.h THREADS,
ERRORS, SESSIONS AND ISOLATION): real threads and processes against the C ABI, on smollm2.

Each test can fail on the smallest realistic fault it guards against, and was seen to fail on
the library before the fix it guards:
- a stream callback (a progress delta's included) run with the handle's lock held: the other
  call waits for the callback (tests with "blocking" in their name hang, bounded here by a
  watchdog, instead of passing);
- a step that waits for a late call's token at every step instead of once: the other stream's
  gaps grow by 10 ms a token (the median check of test_a_blocking_callback_holds_up_no_other_call);
- a call's preparation under the handle's lock: a multi-megabyte request freezes a running
  stream for its whole preparation (seconds);
- admission in arrival order only: a call that waits for its own session's slot keeps another
  session's call waiting (test_a_call_waiting_for_its_session_never_delays_another_session);
- JSON nested without bound: a stack overflow kills the process (a test subprocess checks it);
- a handle's threads waited for in a child of fork(): the child hangs at exit or in el_close;
- a refused request kept in the request caches: the next call's counters differ from a fresh
  handle's, and memory grows with every refused call.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import SMOL, user

import pyshim
from pyshim import models
from pyshim._lib import ffi, lib, read_json

# What a gap in a stream may grow by because of another caller, beyond the largest gap the same
# stream shows alone: far below the seconds of the stalls above, and above what a busy 2-core
# machine adds to a token now and then (its own OpenMP threads and the other call's text).
GAP_BOUND_S = 0.25
# How long a test waits for a call that should have finished before calling it a hang.
HANG_S = 60.0

LONG = " ".join(f"word{i}" for i in range(400))  # ~1,200 tokens: several chunks of n_batch 64


def config(**extra: Any) -> bytes:
    base = {"model": str(models.path(SMOL)), "n_ctx": 2048, "n_seq": 2, "n_batch": 64, "temperature": 0}
    return json.dumps({**base, **extra}).encode()


class Handle:
    """An el_handle opened straight through the C ABI, closed on exit."""

    def __init__(self, **extra: Any) -> None:
        self.h = lib().el_open(config(**extra))
        assert self.h != ffi.NULL, ffi.string(lib().el_last_error()).decode()

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        assert lib().el_close(self.h) == 0

    def generate(
        self,
        messages: Any,
        options: dict[str, Any] | None = None,
        tools: Any = None,
        on_delta: Callable[[dict[str, Any]], int] | None = None,
    ) -> dict[str, Any]:
        m = messages if isinstance(messages, bytes) else json.dumps(messages).encode()
        t = ffi.NULL if tools is None else _raw(tools)
        o = _raw({} if options is None else options)
        if on_delta is None:
            return taken(lib().el_generate(self.h, m, t, o))

        @ffi.callback("el_stream_cb")
        def cb(delta: Any, _user: Any) -> int:
            return on_delta(json.loads(ffi.string(delta)))

        return taken(lib().el_generate_stream(self.h, m, t, o, cb, ffi.NULL))

    def stats(self) -> dict[str, Any]:
        return taken(lib().el_stats(self.h))


def taken(ptr: Any) -> dict[str, Any]:
    """A result or {"error": ...} as the library returned it, freed."""
    try:
        return read_json(ptr)
    finally:
        lib().el_free(ptr)


def in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start fn on a thread; the returned function joins it (a hang fails the test) and
    returns what fn returned, or raises what it raised."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join() -> Any:
        t.join(HANG_S)
        assert not t.is_alive(), "the call hung"
        if "error" in box:
            raise box["error"]
        return box["value"]

    return join


def timed_stream(h: Handle, messages: Any, options: dict[str, Any]) -> tuple[dict[str, Any], list[float]]:
    """A streamed call and the gaps between its text deltas (the first measured from the first)."""
    times: list[float] = []

    def on_delta(d: dict[str, Any]) -> int:
        if d.get("content"):
            times.append(time.monotonic())
        return 0

    r = h.generate(messages, options, on_delta=on_delta)
    return r, [b - a for a, b in itertools.pairwise(times)]


STEADY = {"max_tokens": 48, "ignore_eos": True, "session": "steady"}


# -- stream callbacks of every kind run without the handle's lock ------------------------------


def blocking_kinds() -> list[tuple[str, dict[str, Any], Any, Callable[[dict[str, Any]], bool]]]:
    tool = {
        "type": "function",
        "function": {
            "name": "paint",
            "parameters": {
                "type": "object",
                "properties": {"colour": {"type": "string", "enum": ["red", "blue"]}},
                "required": ["colour"],
            },
        },
    }
    return [
        ("progress", {}, None, lambda d: "prompt_progress" in d),
        ("content", {}, None, lambda d: bool(d.get("content"))),
        # a forced call's deltas come with the final update, after the decode loop
        ("tool_calls", {"tool_choice": "required"}, [tool], lambda d: bool(d.get("tool_calls"))),
    ]


@pytest.mark.parametrize(("kind", "extra", "tools", "is_kind"), blocking_kinds(), ids=lambda v: str(v)[:10])
def test_a_blocking_callback_holds_up_no_other_call(kind: str, extra: dict, tools: Any, is_kind: Any) -> None:
    """A's callback blocks at its first delta of `kind` until B has finished; B (timeout 20 s)
    streams to its end meanwhile, its gaps within one grace period of its gaps alone."""
    with Handle() as h:
        _, alone = timed_stream(h, user("Count slowly."), STEADY)
        b_done = threading.Event()
        blocked = threading.Event()

        def on_delta(d: dict[str, Any]) -> int:
            if is_kind(d) and not blocked.is_set():
                blocked.set()
                b_done.wait(HANG_S)
            return 0

        a_messages = user(LONG + " Summarise.")
        join_a = in_thread(
            lambda: h.generate(a_messages, {"session": "a", "max_tokens": 64, **extra}, tools, on_delta=on_delta)
        )
        assert blocked.wait(HANG_S), f"A never sent a {kind} delta"
        t0 = time.monotonic()
        r, gaps = timed_stream(h, user("Count slowly."), {**STEADY, "timeout_ms": 20000})
        b_done.set()
        took = time.monotonic() - t0
        assert r["finish_reason"] == "length", r
        assert took < HANG_S / 2
        assert max(gaps) <= max(alone) + GAP_BOUND_S, (max(gaps), max(alone))
        # waited for once, not at every step: a step that waits the 10 ms grace for A's token
        # every time adds 10 ms to each of B's gaps (~8 ms a token alone)
        assert statistics.median(gaps) <= statistics.median(alone) + 0.006, (statistics.median(gaps), alone)
        assert "error" not in join_a()


def test_stop_from_a_progress_delta_ends_the_prefill() -> None:
    with Handle() as h:
        seen: list[dict[str, Any]] = []

        def stop_at_progress(d: dict[str, Any]) -> int:
            seen.append(d)
            return 1 if "prompt_progress" in d else 0

        r = h.generate(user(LONG), {"max_tokens": 8}, on_delta=stop_at_progress)
        assert r["finish_reason"] == "cancelled", r
        assert [d for d in seen if "prompt_progress" in d] == seen and len(seen) == 1, seen
        assert r["n_decoded"] == 0
        # the half-evaluated prompt was cleared: the next call computes what a fresh one does
        again = h.generate(user(LONG), {"max_tokens": 8})
        with Handle() as fresh:
            assert again["content"] == fresh.generate(user(LONG), {"max_tokens": 8})["content"]


def test_two_pyshim_streams_read_in_any_order() -> None:
    """pyshim's stream callback waits for its reader: reading B first while A's long prompt is
    evaluated deadlocked when progress deltas were delivered under the handle's lock."""
    medium = " ".join(LONG.split()[:150])  # ~450 tokens: seven chunks of n_batch 64
    long_a = user(medium + " First.")
    long_b = user(medium + " Second.")
    with pyshim.Model(SMOL, n_ctx=2048, n_seq=2, n_batch=64, temperature=0) as m:
        for order in ("b-then-a", "a-then-b", "interleaved"):
            m.reset()
            a = m.stream(long_a, max_tokens=6, session=f"a-{order}")
            b = m.stream(long_b, max_tokens=6, session=f"b-{order}")

            def read(order: str = order, a: Any = a, b: Any = b) -> tuple[list[Any], list[Any]]:
                if order == "interleaved":
                    ia, ib = iter(a), iter(b)
                    got_a, got_b = [], []
                    for d in ib:
                        got_b.append(d)
                        got_a.extend([next(ia, None)])
                    return [d for d in got_a if d] + list(ia), got_b
                first, second = (b, a) if order == "b-then-a" else (a, b)
                x, y = list(first), list(second)
                return (y, x) if order == "b-then-a" else (x, y)

            got_a, got_b = in_thread(read)()
            assert any(d.get("content") for d in got_a) and any(d.get("content") for d in got_b), order


# -- a call's preparation never holds the handle ----------------------------------------------


def test_a_huge_request_does_not_stall_a_running_stream() -> None:
    """A 3 MB request of another session, sent three times while a stream runs: each takes
    ~1.2 s to render and tokenize before it is refused (the context cannot hold it), and the
    stream's gaps stay within GAP_BOUND_S of its gaps alone. Its words are padded with spaces,
    which the early refusal does not count (a special token may strip them), so the request is
    tokenized: that preparation is what must not hold the handle (the library that did froze
    the stream for it whole). The handle evaluates on one thread, so on 2 cores the neighbour's
    preparation has a core of its own: what is measured is the lock, not two threads sharing a
    core (a 2-thread OpenMP team waits at every barrier for a descheduled member, and then a
    neighbour's CPU work alone stretched a 10 ms token to 0.5 s in CI)."""
    huge = json.dumps(user(("word" + " " * 100) * 28_800)).encode()
    with Handle(n_threads=1) as h:
        _, alone = timed_stream(h, user("Count slowly."), STEADY)
        started = threading.Event()
        refused: list[dict[str, Any]] = []

        def send_huge() -> None:
            started.wait(HANG_S)
            for _ in range(3):
                refused.append(h.generate(huge, {"session": "huge"}))

        join = in_thread(send_huge)
        first = True

        def on_delta(d: dict[str, Any]) -> int:
            nonlocal first
            if first and d.get("content"):
                first = False
                started.set()
            return 0

        times: list[float] = []

        def timed(d: dict[str, Any]) -> int:
            if d.get("content"):
                times.append(time.monotonic())
            return on_delta(d)

        h.generate(user("Count slowly."), {**STEADY, "max_tokens": 96}, on_delta=timed)
        join()
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # refused after tokenizing ("prompt is N tokens"), not from its length ("at least")
        tokenized = re.compile(r"prompt is [0-9]+ tokens; the context holds")
        assert all(tokenized.match(r.get("error", "")) for r in refused), refused
        assert max(gaps) <= max(alone) + GAP_BOUND_S, (max(gaps), max(alone))


# -- admission: no head-of-line blocking ------------------------------------------------------


def test_a_call_waiting_for_its_session_never_delays_another_session() -> None:
    """n_seq 2: a1 runs, a2 (same session) waits for a's slot; b must not wait behind a2."""
    with Handle() as h:
        ends: dict[str, float] = {}

        def call(name: str, session: str, tokens: int) -> Callable[[], Any]:
            def run() -> Any:
                options = {"session": session, "max_tokens": tokens, "ignore_eos": True}
                r = h.generate(user(f"Tell a story {name}."), options)
                ends[name] = time.monotonic()
                return r

            return run

        join_a1 = in_thread(call("a1", "a", 160))
        time.sleep(0.3)
        join_a2 = in_thread(call("a2", "a", 4))
        time.sleep(0.2)
        join_b = in_thread(call("b", "b", 4))
        for join in (join_b, join_a1, join_a2):
            assert "error" not in join()
        assert ends["b"] < ends["a1"], ends
        assert ends["a2"] > ends["a1"], ends


# -- nesting depth: a clear error at any depth, never a crash ---------------------------------

DEPTH_SCRIPT = r"""
import json, sys
sys.path[:0] = ["tests", "."]
from test_neighbours import Handle, nested_inputs
with Handle(n_seq=1) as h:
    for depth in [int(x) for x in sys.argv[1:]]:
        for where, (messages, tools, options) in nested_inputs(depth).items():
            r = h.generate(messages, options, tools)
            err = r.get("error", "")
            if depth > 512:
                assert "nests arrays and objects deeper than 512" in err, (where, depth, r)
            else:
                assert "deeper" not in err, (where, depth, r)
    assert h.generate([{"role": "user", "content": "Hi"}], {"max_tokens": 2}).get("error") is None
print("ok")
"""


def nested(depth: int) -> str:
    """JSON text of `depth` nested arrays."""
    return "[" * depth + "]" * depth


def nested_inputs(depth: int) -> dict[str, tuple[Any, Any, dict[str, Any]]]:
    """Every JSON input of a generate call, nested `depth` levels deep in total (messages whose
    depth is counted from the array around them)."""
    hi = [{"role": "user", "content": "Hi"}]
    # messages > message > tool_calls > call > function > arguments > the arrays in it
    args_obj = f'{{"x": {nested(depth - 6)}}}'
    call = '{"id": "c1", "type": "function", "function": {"name": "f", "arguments": %s}}'
    as_object = f'[{{"role": "user", "content": "Hi"}}, {{"role": "assistant", "tool_calls": [{call % args_obj}]}}]'
    as_string = json.dumps(
        [hi[0], {"role": "assistant", "tool_calls": [json.loads(call % '""')]}, {"role": "user", "content": "ok"}]
    ).replace('"arguments": ""', '"arguments": ' + json.dumps(nested(depth)))
    schema = "{" + '"items": {' * (depth - 4) + '"type": "array"' + "}" * (depth - 4) + "}"
    options = f'{{"response_format": {{"type": "json_schema", "json_schema": {{"schema": {schema}}}}}}}'
    tool = '[{"type": "function", "function": {"name": "f", "parameters": %s}}]'
    return {
        "messages.arguments-object": (as_object.encode(), None, {}),
        "messages.arguments-string": (as_string.encode(), None, {}),
        "messages.content": (f'[{{"role": "user", "content": {nested(depth - 2)}}}]'.encode(), None, {}),
        "options.schema": (hi, None, RawJSON(options)),
        "tools.parameters": (hi, RawJSON(tool % ("{" + '"a": {' * (depth - 4) + "}" * (depth - 3))), {}),
    }


class RawJSON(dict):
    """JSON text passed to the library as it is (json.dumps of a deep value would recurse)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


def _raw(value: Any) -> bytes:
    return value.text.encode() if isinstance(value, RawJSON) else json.dumps(value).encode()


def test_nesting_is_refused_clearly_at_any_depth() -> None:
    depths = ["200", "512", "513", "1000", "60000", "1000000"]
    out = subprocess.run(
        [sys.executable, "-c", DEPTH_SCRIPT, *depths], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-3000:]


# -- fork(): an inherited handle is unusable in the child and never blocks it -----------------

FORK_SCRIPT = r"""
import os, sys, time, warnings
warnings.simplefilter("ignore")
sys.path[:0] = ["tests", "."]
from pyshim._lib import lib
from test_neighbours import Handle
mode = sys.argv[1]
h = Handle()
h.generate([{"role": "user", "content": "Hi"}], {"max_tokens": 2})
pid = os.fork()
if pid == 0:
    if mode == "use":
        r = h.generate([{"role": "user", "content": "Hi"}], {"max_tokens": 2})
        os._exit(0 if "before fork()" in r.get("error", "") else 3)
    if mode == "close":
        os._exit(0 if lib().el_close(h.h) == 0 and lib().el_close(h.h) == -1 else 4)
    sys.exit(0)  # "exit": static destructors and atexit run with the handle still open
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("exit", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.02)
else:
    os.kill(pid, 9)
    print("hung")
r = h.generate([{"role": "user", "content": "Hi"}], {"max_tokens": 2})
print("parent", "ok" if r.get("error") is None else r)
"""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork()")
@pytest.mark.parametrize("mode", ["exit", "close", "use"])
def test_a_handle_inherited_through_fork(mode: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, mode], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    lines = out.stdout.splitlines()
    assert lines[-2:] == ["exit 0", "parent ok"], out.stdout + out.stderr


# -- a refused call leaves the handle as it found it ------------------------------------------


def counters(r: dict[str, Any]) -> tuple[Any, ...]:
    # n_render_reused is left out: the template's loop memo is process-wide, so the two
    # handles compared here share it (SESSIONS AND ISOLATION: cache pressure, never content)
    return (r.get("content"), r["n_reused"], r["n_tokenize_reused"], r["n_messages_reused"])


def refused_requests(messages: list[dict[str, Any]], i: int) -> list[tuple[Any, dict[str, Any]]]:
    """Requests refused after they were read (and some rendered): the next good call's own
    messages among them, so that anything they leave in the caches shows in its counters."""
    big = {"role": "user", "content": f"call {i} " + "x y " * 120_000}
    return [
        (messages, {"session": "s", "temperature": "hot"}),  # read, then refused
        (messages, {"session": "s", "tool_choice": "required"}),  # read, then refused
        ([*messages, {"role": "assistant", "content": "ok"}, big], {"session": "s"}),  # rendered, too long
        ([*messages, big], {"session": f"other{i}"}),  # too long, another session each time
        ([*messages[:1], {"role": "user", "content": "y " * 1500}], {"session": "s"}),  # tokenized, too long
    ]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_refused_calls_change_nothing_a_later_call_reports() -> None:
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Name a colour."}]
    with Handle(n_seq=1, n_ctx=1024) as clean, Handle(n_seq=1, n_ctx=1024) as h:
        first = [x.generate(history, {"session": "s", "max_tokens": 4}) for x in (clean, h)]
        follow = [*history, first[0]["message"], {"role": "user", "content": "Another."}]
        for i in range(3):
            for messages, options in refused_requests(follow, i):
                assert "error" in h.generate(messages, options)
        a, b = (x.generate(follow, {"session": "s", "max_tokens": 4}) for x in (clean, h))
        assert counters(b) == counters(a), (counters(a), counters(b))
        assert h.stats()["cache"] == clean.stats()["cache"]


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_memory_and_stats_stay_flat_over_refused_calls() -> None:
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Name a colour."}]
    with Handle(n_seq=1, n_ctx=1024) as h:
        h.generate(history, {"session": "s", "max_tokens": 2})
        for i in range(10):  # the allocator's high-water mark for one refused call
            for messages, options in refused_requests(history, i):
                h.generate(messages, options)
        gc.collect()
        before, stats = rss_bytes(), h.stats()
        for i in range(100):
            for messages, options in refused_requests(history, i):
                assert "error" in h.generate(messages, options)
        gc.collect()
        grown = rss_bytes() - before
        assert grown < 16 << 20, f"RSS grew {grown / 2**20:.1f} MiB over 100 rounds of refused calls"
        assert h.stats()["cache"] == stats["cache"]
