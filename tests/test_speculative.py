"""Self-speculative decoding (option "speculative", native/speculation.h): drafts taken from
n-grams of the call's own context, verified by the call's own token choice in one step.

What must hold, on ``deterministic`` handles where batch shape cannot change a logit: greedy
output with speculation equals output without it, token for token, also with stop strings,
token limits, streaming, tool calls and a json_schema grammar; the rejected part of a draft
leaves the cache exactly (the next turn on the same handle equals a fresh handle's); calls at
once keep their outputs, and a call drafts only while it runs alone; and where speculation
cannot be exact or cheap it is off."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from conftest import GEMMA, QWEN, SMOL, WEATHER_TOOL, model_path, user

import pyshim

RESULT = json.dumps({"city": "Paris", "temperature_c": 18, "sky": "cloudy", "wind_kmh": 12, "humidity": 0.71})
QUOTE = user("Repeat this JSON exactly, with no other text: " + RESULT)
CODE = user(
    "Rename the function area to rect_area and show the whole code:\n"
    "def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
)
PROSE = user("Write a short poem about the sea.")
FOLLOW_UP = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": RESULT},
    {"role": "user", "content": "And in Oslo?"},
]  # fmt: skip
SPEC = {"type": "ngram-simple", "size_n": 4, "size_m": 16}


@pytest.fixture(scope="module")
def exact() -> Any:
    with pyshim.Model(SMOL, n_ctx=2048, temperature=0, deterministic=True, n_seq=2) as m:
        yield m


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in ("content", "finish_reason", "n_decoded", "truncated"):
        assert a[key] == b[key], key
    assert [c["function"] for c in a["tool_calls"]] == [c["function"] for c in b["tool_calls"]]


@pytest.mark.parametrize(
    ("messages", "tools", "options"),
    [
        (QUOTE, None, {}),
        (CODE, None, {}),
        (PROSE, None, {}),
        (QUOTE, None, {"stop": ["wind"]}),
        (QUOTE, None, {"max_tokens": 7}),
        (FOLLOW_UP, [WEATHER_TOOL], {}),
        (QUOTE, None, {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}}),
    ],
    ids=["quote", "code", "prose", "stop-inside-a-draft", "max-tokens", "tool-call", "json-schema"],
)
def test_greedy_output_is_the_same_with_and_without_speculation(exact: Any, messages, tools, options) -> None:
    options = {"max_tokens": 80, **options}
    off = exact.generate(messages, tools, speculative="off", **options)
    on = exact.generate(messages, tools, speculative=SPEC, **options)
    same(on, off)
    assert off["n_drafted"] == 0 and on["n_accepted"] <= on["n_drafted"]
    streamed = exact.stream(messages, tools, speculative=SPEC, **options)
    text = "".join(d.get("content") or "" for d in streamed)
    assert text == on["content"] or on["tool_calls"]  # a call streams as tool-call deltas
    same(streamed.result, off)


def test_drafts_are_accepted_where_the_output_quotes_the_context(exact: Any) -> None:
    on = exact.generate(QUOTE, speculative=SPEC, max_tokens=80)
    assert on["n_accepted"] >= on["n_decoded"] // 2, on


def test_a_rejected_draft_leaves_the_cache_exact(exact: Any) -> None:
    """After a call whose drafts were partly rejected, the next turn reuses that call's cache:
    it must compute what a fresh handle computes (a draft token left behind would shift it)."""
    exact.forget("s")
    first = exact.generate(CODE, speculative=SPEC, max_tokens=80, session="s")
    assert first["n_drafted"] > first["n_accepted"]  # something was rejected
    turn = [*CODE, first["message"], {"role": "user", "content": "Now rename perimeter to rect_perimeter."}]
    again = exact.generate(turn, speculative=SPEC, max_tokens=60, session="s")
    assert again["n_reused"] > 0
    with pyshim.Model(SMOL, n_ctx=2048, temperature=0, deterministic=True) as fresh:
        same(again, fresh.generate(turn, max_tokens=60))


def test_calls_at_once_keep_their_outputs(exact: Any) -> None:
    alone = {name: exact.generate(m, speculative="off", max_tokens=60) for name, m in (("q", QUOTE), ("p", PROSE))}
    got: dict[str, Any] = {}

    def run(name: str, messages: list[dict[str, Any]]) -> None:
        got[name] = exact.generate(messages, speculative=SPEC, max_tokens=60)

    threads = [threading.Thread(target=run, args=a) for a in (("q", QUOTE), ("p", PROSE))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in alone:
        same(got[name], alone[name])


def test_speculation_is_off_where_it_cannot_be_exact_or_cheap(gemma: pyshim.Model, smol: pyshim.Model) -> None:
    """Sliding-window caches cannot drop a rejected draft (gemma-3); logprobs and sampling at a
    temperature are computed on the one-token path."""
    assert gemma.generate(QUOTE, speculative=SPEC, max_tokens=30)["n_drafted"] == 0
    assert smol.generate(QUOTE, speculative=SPEC, max_tokens=30, logprobs=True, top_logprobs=1)["n_drafted"] == 0
    assert smol.generate(QUOTE, speculative=SPEC, max_tokens=30, temperature=0.7, seed=1)["n_drafted"] == 0
    assert smol.generate(QUOTE, speculative=SPEC, max_tokens=60)["n_drafted"] > 0


@pytest.mark.parametrize(
    "bad", ["fast", {"type": "ngram-simple", "size_n": 0}, {"size_m": 65}, {"type": "eagle"}, 3, {"n": 2}], ids=repr
)
def test_bad_settings_are_refused(smol: pyshim.Model, bad: Any) -> None:
    with pytest.raises(pyshim.InvalidRequest, match="speculative"):
        smol.generate(QUOTE, speculative=bad, max_tokens=2)
    assert smol.generate(QUOTE, max_tokens=2)["n_decoded"] == 2


def test_the_handle_default_and_a_call_override() -> None:
    with pyshim.Model(QWEN, n_ctx=1024, temperature=0, speculative="ngram-simple") as m:
        assert m.generate(QUOTE, max_tokens=60)["n_drafted"] > 0
        assert m.generate(QUOTE, max_tokens=60, speculative="off")["n_drafted"] == 0
    with pytest.raises(pyshim.ModelLoadError, match="speculative"):
        pyshim.Model(model_path(GEMMA), speculative="fast")


def test_a_call_drafts_only_while_it_runs_alone(exact: Any) -> None:
    """Drafted rows lengthen the shared step for every call in it (a call decoding beside a
    drafting one ran at 0.72x in make bench-speculative when this was written), so a call drafts only while no other
    call runs on the handle. Fails if the engine drafts regardless of its neighbours."""
    started = threading.Event()

    def neighbour() -> None:
        for _ in exact.stream(PROSE, max_tokens=300, ignore_eos=True, speculative="off"):
            started.set()

    thread = threading.Thread(target=neighbour)
    thread.start()
    assert started.wait(60)
    beside = exact.generate(QUOTE, speculative=SPEC, max_tokens=40)
    thread.join()
    assert beside["n_drafted"] == 0, beside
    assert exact.generate(QUOTE, speculative=SPEC, max_tokens=40)["n_drafted"] > 0
