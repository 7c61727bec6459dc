"""A prompt is tokenized at the cost of what is new in it, and its tokens are exactly those of a
tokenization from scratch (native/token_cache.h). Random conversations on every catalogue model
and the tiny ones: appended turns and tool results, an edited early message, dropped turns,
switched tools, a partial assistant message to continue, multi-byte text and text that spells a
special token. Every call runs with the ``check_tokens`` hook (the library tokenizes the prompt
from scratch as well and fails the call if the two differ) and ``prepare_only`` (nothing is
evaluated, so the test costs what tokenizing costs). A cache that ignored edits is caught."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import GEMMA, QWEN, SMOL, WEATHER_TOOL, model_path
from oracle import text, tool_exchange

import pyshim

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
TOOLSETS: list[list[dict[str, Any]] | None] = [None, [WEATHER_TOOL], [WEATHER_TOOL, CALCULATOR]]
ODD = ["naïve café", "日本語のテキスト", "🙂👍", "<|im_end|>", "<end_of_turn>", "  two  spaces ", "\n\nnew lines\n"]
OPS = ["append", "tool", "append", "edit", "append", "switch", "partial", "append", "drop", "odd", "append", "edit"]
CHECK = {"check_tokens": True, "check_messages": True, "prepare_only": True}


def words(rng: random.Random, n: int) -> str:
    return text(rng, n) + (" " + rng.choice(ODD) if rng.random() < 0.3 else "")


def turn(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "content": content}


def prepare(m: pyshim.Model, conv: list[dict[str, Any]], tools: Any, **test: Any) -> dict[str, Any]:
    r = m.generate(conv, tools, max_tokens=1, _test={**CHECK, **test})
    assert r["finish_reason"] == "prepare_only"
    return r


@pytest.mark.parametrize("spec", [QWEN, SMOL, GEMMA, "tiny:mamba", "tiny:hybrid", "tiny:gemma4", "tiny:qwen35"])
def test_cached_tokenization_equals_a_full_one(spec: str) -> None:
    rng = random.Random(f"tokens-{spec}")
    with pyshim.Model(model_path(spec), n_ctx=8192) as m:
        conv: list[dict[str, Any]] = [
            {"role": "system", "content": "You are terse. " + words(rng, 200)},
            {"role": "user", "content": words(rng, 30)},
        ]
        tools = TOOLSETS[1]
        reused_on_append = []
        for step, op in enumerate(OPS):
            if op == "append":
                conv = [*conv, turn("assistant", words(rng, 15)), turn("user", words(rng, 20))]
            elif op == "tool":
                conv = [*conv, *tool_exchange(rng, step), {"role": "user", "content": words(rng, 10)}]
            elif op == "edit":
                conv = [dict(x) for x in conv]
                i = rng.randrange(len(conv))
                conv[i]["content"] = (conv[i]["content"] or "") + " " + words(rng, 3)
            elif op == "drop" and len(conv) > 4:
                conv = conv[:-2]
            elif op == "switch":
                tools = rng.choice([t for t in TOOLSETS if t is not tools])
            elif op == "partial":
                conv = [*conv, {"role": "assistant", "content": "Partly written: " + words(rng, 5)}]
            elif op == "odd":
                conv = [*conv, turn("assistant", rng.choice(ODD)), turn("user", " ".join(ODD))]
            r = prepare(m, conv, tools)  # check_tokens fails the call if the tokens differ
            if op == "append" and step > 0:
                reused_on_append.append(r["n_tokenize_reused"] / r["n_prompt"])
            if conv[-1]["role"] == "assistant":
                conv = conv[:-1]  # the partial message is continued once, then dropped
        assert min(reused_on_append) > 0.5, f"{spec}: share of prompt tokens reused on appends {reused_on_append}"


def test_a_cache_that_ignores_edits_is_caught() -> None:
    """The differential check can fail: the ``tokens_ignore_edits`` hook reuses tokens past the
    first changed byte, and one word changed early in the system message turns the call red."""
    rng = random.Random("ignore-edits")
    with pyshim.Model(model_path(SMOL), n_ctx=4096) as m:
        conv = [{"role": "system", "content": text(rng, 200)}, {"role": "user", "content": text(rng, 20)}]
        prepare(m, conv, None)
        edited = [dict(x) for x in conv]
        edited[0]["content"] = "Changed. " + conv[0]["content"]
        prepare(m, edited, None)  # the real cache sees the edit
        prepare(m, conv, None)
        with pytest.raises(pyshim.ShimError, match="cached tokenization differs from a full one"):
            prepare(m, edited, None, tokens_ignore_edits=True)
