"""Streaming deltas: they add up to exactly the final result, and the callback can stop cleanly."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from conftest import SMOL, WEATHER_TOOL, user
from oracle import KL_BOUND, divergence

import pyshim
from pyshim import models


def concat(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    content, reasoning = "", ""
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        content += d.get("content", "")
        reasoning += d.get("reasoning_content", "")
        for c in d.get("tool_calls", []):
            slot = calls.setdefault(c["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in c:
                slot["id"] = c["id"]
            fn = c.get("function", {})
            if "name" in fn:
                slot["name"] = fn["name"]
            slot["arguments"] += fn.get("arguments", "")
    return {"content": content, "reasoning": reasoning, "calls": [calls[i] for i in sorted(calls)]}


def test_text_deltas_concatenate_to_the_result(smol: pyshim.Model) -> None:
    deltas: list[dict[str, Any]] = []
    smol.reset()  # compared outputs come from identical (fresh) evaluations
    r = smol.generate(user("Write two sentences about the sea."), on_delta=deltas.append, max_tokens=60)
    assert len(deltas) > 3
    got = concat(deltas)
    assert got["content"] == r["content"]
    assert got["calls"] == []
    smol.reset()
    plain = smol.generate(user("Write two sentences about the sea."), max_tokens=60)
    assert plain["content"] == r["content"]  # streaming does not change the output


def test_model_stream_iterator_and_result(smol: pyshim.Model) -> None:
    s = smol.stream(user("Count to five."), max_tokens=30)
    deltas = list(s)
    assert s.result is not None
    assert "".join(d.get("content", "") for d in deltas) == s.result["content"]


def test_tool_call_deltas_build_the_final_calls(qwen: pyshim.Model) -> None:
    deltas: list[dict[str, Any]] = []
    r = qwen.generate(
        user("What is the weather in Paris?"), [WEATHER_TOOL], on_delta=deltas.append, tool_choice="required"
    )
    got = concat(deltas)
    assert got["content"] == ""  # the JSON of the call never leaks out as text
    assert [(c["id"], c["name"]) for c in got["calls"]] == [(c["id"], c["function"]["name"]) for c in r["tool_calls"]]
    assert [json.loads(c["arguments"]) for c in got["calls"]] == [
        json.loads(c["function"]["arguments"]) for c in r["tool_calls"]
    ]


def test_stopping_from_the_callback_leaves_the_next_call_correct(smol: pyshim.Model) -> None:
    messages = user("Tell me a long story about a lighthouse keeper.")
    seen: list[dict[str, Any]] = []

    def stop_after_three(delta: dict[str, Any]) -> bool:
        seen.append(delta)
        return len(seen) < 3

    r = smol.generate(messages, on_delta=stop_after_three, max_tokens=200)
    assert r["finish_reason"] == "cancelled"
    assert r["n_decoded"] < 50
    assert concat(seen)["content"] == r["content"]
    # the cache still matches its mirror: the next call reuses it and sees what a fresh model sees
    # (a divergence bound, not text equality: other batch splits may flip near-ties; FACTS.md)
    with pyshim.Model(models.path(SMOL), n_ctx=2048) as fresh:
        d, after = divergence(smol, fresh, messages)
    assert after["n_reused"] > 0
    assert d < KL_BOUND


def test_breaking_out_of_a_stream_stops_generation(smol: pyshim.Model) -> None:
    s = smol.stream(user("Tell me a long story about a dragon."), max_tokens=300)
    for i, _ in enumerate(s):
        if i == 2:
            break
    assert s.result is not None and s.result["finish_reason"] == "cancelled"
    assert smol.generate(user("Say hi."), max_tokens=5)["n_decoded"] >= 1


def test_long_prompts_report_progress(smol: pyshim.Model) -> None:
    smol.reset()
    deltas: list[dict[str, Any]] = []
    r = smol.generate(user("word " * 1200 + "Say OK."), on_delta=deltas.append, max_tokens=2)
    progress = [d["prompt_progress"] for d in deltas if "prompt_progress" in d]
    assert len(progress) >= 2
    assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
    assert progress[-1]["processed"] == progress[-1]["total"] == r["n_prompt"] - r["n_reused"]
    assert all(set(d) <= {"prompt_progress", "prompt"} for d in deltas if "prompt_progress" in d)  # no text
    # the first delta says the prompt's size and what the cache held, once (ABI 1.12)
    assert deltas[0]["prompt"] == {"n_prompt": r["n_prompt"], "n_reused": r["n_reused"]}
    assert sum("prompt" in d for d in deltas) == 1


# -- streams that are dropped, closed or finished release the model -----------------------------


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """fn() on a helper thread; fails (instead of hanging the suite) if it has not returned in time."""
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds} s"
    return box[0]


def test_a_stream_never_iterated_and_dropped_frees_the_model(smol: pyshim.Model) -> None:
    s = smol.stream(user("Tell me a long story about a dragon."), max_tokens=300)
    del s
    r = _within(30, lambda: smol.generate(user("Say hi."), max_tokens=5))
    assert r["n_decoded"] >= 1


def test_a_finished_stream_iterated_again_ends_at_once(smol: pyshim.Model) -> None:
    s = smol.stream(user("Count to three."), max_tokens=20)
    first = list(s)
    assert first and _within(5, lambda: list(s)) == []
    assert s.result is not None and s.result["finish_reason"] in ("stop", "length")


def test_closing_a_stream_early_stops_it_and_the_model_goes_on(smol: pyshim.Model) -> None:
    with smol.stream(user("Tell me a long story about a dragon."), max_tokens=300) as s:
        next(iter(s))
    assert s.result is not None and s.result["finish_reason"] == "cancelled"
    assert s.result["n_decoded"] < 20
    assert _within(30, lambda: smol.generate(user("Say hi."), max_tokens=5))["n_decoded"] >= 1


def test_closing_the_model_with_an_unread_stream_does_not_hang() -> None:
    m = pyshim.Model(models.path(SMOL), n_ctx=1024)
    s = m.stream(user("Tell me a long story."), max_tokens=200)
    _within(30, m.close)
    assert s.result is None or s.result["finish_reason"] == "cancelled"
