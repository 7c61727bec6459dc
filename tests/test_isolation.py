"""The handle's promises (issue: session isolation and the races around close, cancel and failure).

Isolation: a call never reuses, trims or restores another session's cached state, so neither its
output nor its ``n_reused`` can tell it anything about another session's prompt. These run on
handles whose sessions are in no scope (``scope=None``, the C ABI's default); sessions of one
scope may start from each other's prefixes by copy, and the same probes across scopes are in
tests/test_scopes.py. Failure: a call
that fails after routing puts back the host-memory copy it consumed. Races: ``el_close`` and
``el_cancel`` never lose their cancel, whatever the timing.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest
from conftest import SMOL, WEATHER_TOOL, user
from oracle import text
from test_stream import concat

import pyshim
from pyshim import models
from pyshim._lib import encode, ffi, lib

FILLER = text(random.Random("isolation"), 60)


def secret_conversation(codename: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"Secret project codename is {codename}. {FILLER}"}, *user("Hello.")]


def test_a_call_without_a_session_never_touches_a_pinned_slot() -> None:
    with pyshim.Model(models.path(SMOL), n_ctx=2048, n_seq=2, temperature=0, scope=None) as m:
        a = secret_conversation("BLUEBIRD")
        first = m.generate(a, max_tokens=4, session="A")
        # Shares A's whole system prompt, names no session: it must take the empty slot
        # and reuse nothing, rather than trim A's cache to their shared prefix.
        probe = m.generate(secret_conversation("BLUEBIRD"), max_tokens=1)
        assert probe["slot"] != first["slot"]
        assert probe["n_reused"] == 0
        again = m.generate([*a, first["message"], *user("And then?")], max_tokens=1, session="A")
        assert again["slot"] == first["slot"]
        assert again["n_reused"] >= first["n_prompt"]  # A's cache is whole


@pytest.mark.parametrize("n_seq", [1, 2])
def test_n_reused_reveals_nothing_about_another_sessions_prompt(n_seq: int) -> None:
    with pyshim.Model(models.path(SMOL), n_ctx=2048, n_seq=n_seq, temperature=0, scope=None) as m:
        m.generate(secret_conversation("BLUEBIRD"), max_tokens=2, session="A")
        reused = {}
        for guess in ("BLUEBIRD", "REDFOX"):
            for session in ("B", None):
                opts = {"session": session} if session else {}
                m.forget(session or "")  # each guess starts from what A left, not from the last guess
                r = m.generate(secret_conversation(guess), max_tokens=1, **opts)
                reused[guess, session] = r["n_reused"]
        assert set(reused.values()) == {0}, reused
        # A itself lost nothing: with one slot it comes back from host memory.
        back = m.generate(secret_conversation("BLUEBIRD"), max_tokens=1, session="A")
        assert back["n_reused"] > 0.9 * back["n_prompt"], back


def test_a_failed_call_puts_back_the_host_copy_it_restored() -> None:
    with pyshim.Model(models.path(SMOL), n_ctx=2048, n_seq=1, temperature=0) as m:
        a = secret_conversation("BLUEBIRD")
        m.generate(a, max_tokens=2, session="A")
        m.generate(secret_conversation("REDFOX"), max_tokens=2, session="B")  # A goes to host memory
        with pytest.raises(pyshim.ShimError):
            m.generate(a, max_tokens=2, session="A", _test={"fail_after_prefill": True})
        r = m.generate(a, max_tokens=1, session="A")
        assert r["restored_from_host"], r
        assert r["n_reused"] > 0.9 * r["n_prompt"], r


def test_n_ctx_zero_is_the_models_context_per_slot() -> None:
    with pyshim.Model(models.path(SMOL), n_ctx=0, n_seq=2) as m:
        assert m.stats()["n_ctx"] == 8192  # smollm2's own context, for each of the two slots


LONG = json.dumps(user("Write a very long story about a lighthouse keeper.")).encode()


def _long_call(handle: Any, out: dict[str, Any]) -> None:
    opts = encode({"max_tokens": 4000, "ignore_eos": True, "temperature": 0})
    ptr = lib().el_generate(handle, LONG, ffi.NULL, opts)
    text_out = ffi.string(ptr).decode()
    lib().el_free(ptr)
    out["result"] = json.loads(text_out)


def test_close_never_loses_its_cancel() -> None:
    """el_close at random moments around the start of a long call: it always returns quickly."""
    config = encode({"model": str(models.path(SMOL)), "n_ctx": 1024})
    rng = random.Random("close-race")
    for _ in range(30):
        h = lib().el_open(config)
        assert h != ffi.NULL
        out: dict[str, Any] = {}
        t = threading.Thread(target=_long_call, args=(h, out))
        t.start()
        time.sleep(rng.uniform(0, 0.004))
        t0 = time.monotonic()
        assert lib().el_close(h) == 0
        assert time.monotonic() - t0 < 5.0  # a lost cancel would wait out 4,000 tokens
        t.join(10)
        r = out["result"]
        assert r.get("finish_reason") == "cancelled" or "closed" in r.get("error", ""), r


def test_cancel_reaches_a_call_still_waiting_for_the_handle(smol: pyshim.Model) -> None:
    outs: list[dict[str, Any]] = [{}, {}]
    running = threading.Thread(target=_long_call, args=(smol.handle, outs[0]))
    running.start()
    time.sleep(0.3)
    waiting = threading.Thread(target=_long_call, args=(smol.handle, outs[1]))
    waiting.start()
    time.sleep(0.3)
    assert lib().el_cancel(smol.handle) == 0
    running.join(10)
    waiting.join(10)
    assert outs[0]["result"]["finish_reason"] == "cancelled"
    assert outs[1]["result"]["finish_reason"] == "cancelled"
    assert outs[1]["result"]["slot"] is None  # it never ran: nothing on the handle changed
    r = smol.generate(user("Say OK."), max_tokens=4)
    assert r["finish_reason"] in ("stop", "length")


TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _streamed(m: pyshim.Model, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    deltas: list[dict[str, Any]] = []
    r = m.generate(
        user("What is the weather in Paris?"),
        [WEATHER_TOOL],
        on_delta=deltas.append,
        _test={"force_output": TOOL_CALL},
        **options,
    )
    return concat(deltas), r


def _calls(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in r["tool_calls"]
    ]


def test_a_streamed_native_tool_call_keeps_its_id(qwen: pyshim.Model) -> None:
    got, r = _streamed(qwen, max_tokens=100)
    assert r["finish_reason"] == "tool_calls"
    assert got["calls"] == _calls(r)
    assert r["tool_calls"][0]["id"].startswith("call_")
    assert json.loads(r["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


def test_a_call_cut_off_by_max_tokens_agrees_with_its_deltas(qwen: pyshim.Model) -> None:
    for max_tokens in (8, 11, 14):
        got, r = _streamed(qwen, max_tokens=max_tokens)
        assert r["finish_reason"] == "length", r
        assert got["content"] == (r["content"] or ""), (max_tokens, got, r)
        assert got["calls"] == _calls(r), (max_tokens, got, r)


@pytest.mark.parametrize(
    ("stop", "words"),
    [([f"s{i}" for i in range(17)], "at most 16"), (["x" * 1025], "1024 bytes")],
)
def test_stop_strings_are_bounded(smol: pyshim.Model, stop: list[str], words: str) -> None:
    with pytest.raises(pyshim.ShimError, match=words):
        smol.generate(user("hi"), stop=stop)
    assert smol.generate(user("Count to ten."), max_tokens=30, stop=["5"])["content"].count("5") == 0
