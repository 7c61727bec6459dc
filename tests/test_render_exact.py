"""The cheaper request path renders and tokenizes exactly what the pinned llama.cpp does.

pyshim patches llama.cpp's ``common/`` to render a call's chat template once where it can, and
faster (native/patches/common-render-*.patch, common-shared-*.patch), and its tokenizer to skip
special tokens that cannot occur (llama-vocab-special-prefilter.patch); the shim keeps caches of
messages and tokens on top. None of that may change a byte or a token of what reaches the engine.
``tests/data/rendered.json`` holds, for every catalogue model and the tiny ones (Mamba, Jamba,
Gemma 4, Qwen3.5, LFM2, with their real templates), the SHA-256 of what the ``prepare_only`` hook
reports (rendered prompt, generation prompt, grammar, its triggers, where the last message and the
reply start, and the prompt's tokens) for random conversations with tool calls and results and
request options. The digests are recorded from the build with **no patch at all** (``make
test-nopatch``'s build-nopatch, pristine ``common/`` and tokenizer), and the same test runs on
both builds, so the patched renderer and tokenizer are checked against upstream, not against
themselves. Two templates of our own cover the render patch's fallback (two renders) and its
single render with text after the generation prompt; four more the loop memo. Shown to fail:
leaving the generation prompt in the render meant to be without it turns all but the fallback
red; one more character in one early message changes its digest (test below). To record again
(after a new pin): ``PYSHIM_RECORD_RENDERS=1 PYSHIM_LIB=build-nopatch/libel_shim.so pytest
tests/test_render_exact.py``, which refuses a patched library.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import GEMMA, QWEN, SMOL, WEATHER_TOOL, has_patch, model_path, needs_patch
from oracle import text, tool_exchange

import pyshim

GOLDEN = Path(__file__).parent / "data" / "rendered.json"
RECORD = os.environ.get("PYSHIM_RECORD_RENDERS") == "1"
SPECS = [
    QWEN,
    SMOL,
    GEMMA,
    "tiny:mamba",
    "tiny:hybrid",
    "tiny:gemma4",
    "tiny:qwen35",
    "tiny:lfm2",
    f"{SMOL}+else",
    f"{SMOL}+trailing",
    f"{SMOL}+carried",
    f"{SMOL}+namespace",
    f"{SMOL}+length",
    f"{SMOL}+last",
]
# The models whose calls place a cache checkpoint where the last message starts.
CHECKPOINTED = {GEMMA, "tiny:mamba", "tiny:hybrid", "tiny:gemma4", "tiny:qwen35", "tiny:lfm2"}
# Of them, those whose template's loop output for the last message is read off the main render;
# LFM2's template loops over a slice of the messages (new values, which the render watch, comparing
# by identity, does not know), so its last message is found by rendering the history again.
READ_OFF_RENDER = {GEMMA, "tiny:mamba", "tiny:hybrid", "tiny:gemma4", "tiny:qwen35"}
# Where reading it off the render finds another place than upstream's way (rendering the history):
# Qwen3.5 renders the previous reply's <think> block otherwise once no user query follows it, so
# the history's render leaves the prompt 13 or more tokens before the last message starts, while
# the render watch finds where it really starts. The place is a checkpoint's, a hint (a checkpoint
# holds the state of the tokens before it, wherever it is): its digest leaves the place out, and
# test_the_place_read_off_qwen35s_render_is_never_before_the_history_renders checks it.
PLACE_DIFFERS = {"tiny:qwen35"}
# Two templates of our own, on smollm2, for the two ways the patched renderer finds the generation
# prompt: with an `else` beside `if add_generation_prompt` it renders twice (with and without);
# with constant text after that `if` it still renders once and drops the `if`'s output.
_TURNS = "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}"
_OPEN = "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
# Four more for the loop memo (native/patches/common-render-memo-loops.patch), which reuses a
# message loop's iterations from earlier calls: a running total that each iteration reads and
# updates, neighbours read through `messages[loop.index0 ± 1]`, a nested loop; a namespace
# written in the loop (not memoised: the loop renders as before); `loop.length`; `loop.last`.
_CARRIED = (
    "{%- for m in messages %}"
    "{%- if loop.first %}{{ '<|im_start|>system\\n' + (m.content if m.role == 'system' else 'Hi') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user\\n' }}{%- endif %}"
    "{{ '<r>' + m.content + '</r>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m.role != 'system' %}"
    "{{ '<|im_start|>' + m.role + (' after ' + (total | string) if total is defined else '') + '\\n' }}"
    "{{ m.content or '' }}"
    "{%- for tc in m.tool_calls or [] %}"
    "{{ '<call>' + tc.function.name + (tc.function.arguments | tojson) }}"
    "{%- endfor %}"
    "{{ '<|im_end|>\\n' }}{%- set total = (total if total is defined else 0) + ((m.content or '') | length) %}"
    "{%- endif %}"
)
_NAMESPACE = (
    "{%- set ns = namespace(n=0) %}{%- for m in messages %}{%- set ns.n = ns.n + 1 %}"
    "{{ '<|im_start|>' + m.role + ' ' + (ns.n | string) + '\\n' + (m.content or '') + '<|im_end|>\\n' }}"
)
_LAST = (
    "{%- for m in messages %}"
    "{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + ('' if loop.last else '<|im_end|>\\n') }}"
)
_LENGTH = (
    "{%- for m in messages %}"
    "{{ '<|im_start|>' + m.role + ' ' + (loop.revindex | string) + '/' + (loop.length | string) + '\\n' }}"
    "{{ (m.content or '') + '<|im_end|>\\n' }}"
)
TEMPLATES = {
    f"{SMOL}+else": _TURNS + _OPEN + "{%- else %}{{ '' }}{%- endif %}",
    f"{SMOL}+trailing": _TURNS + _OPEN + "{% endif %}\n",
    f"{SMOL}+carried": _CARRIED + _OPEN + "{%- endif %}",
    f"{SMOL}+namespace": _NAMESPACE + _OPEN + "{%- endif %}",
    f"{SMOL}+length": _LENGTH + _OPEN + "{%- endif %}",
    f"{SMOL}+last": _LAST + _OPEN + "{%- endif %}",
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
# Request options cycled through the conversation; response_format only without tools.
OPTIONS: list[dict[str, Any]] = [
    {},
    {"tool_choice": "required"},
    {"tool_choice": NAMED},
    {"parallel_tool_calls": False},
    {"tool_choice": "none"},
    {"response_format": SCHEMA, "_no_tools": True},
]
OPS = [
    "append",
    "tool",
    "append",
    "tool",
    "edit",
    "append",
    "partial",
    "append",
    "drop",
    "append",
    "tool",
    "late_tool",
    "append",
]


def conversations(spec: str) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """The calls of one model's run: a conversation growing the way an agent's does, with edits,
    dropped turns, a partial assistant message and tool exchanges, each with other options."""
    rng = random.Random(f"render-{spec}")
    conv: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse. " + text(rng, 40)},
        {"role": "user", "content": text(rng, 12)},
    ]
    calls = []
    for step, op in enumerate(OPS):
        if op == "append":
            conv = [*conv, {"role": "assistant", "content": text(rng, 9)}, {"role": "user", "content": text(rng, 7)}]
        elif op == "tool":
            conv = [*conv, *tool_exchange(rng, step), {"role": "user", "content": text(rng, 5)}]
        elif op == "edit":
            conv = [dict(x) for x in conv]
            conv[1]["content"] += " " + text(rng, 3)
        elif op == "drop":
            conv = conv[:-2]
        elif op == "late_tool":  # a second result arrives before the model answers the first
            late = {"role": "tool", "tool_call_id": f"call_{step - 1}", "name": "get_weather", "content": text(rng, 9)}
            conv = [*conv[:-1], late, {"role": "user", "content": text(rng, 5)}]
        elif op == "partial":
            calls.append(([*conv, {"role": "assistant", "content": "Partly: " + text(rng, 4)}], {}))
        calls.append((conv, OPTIONS[step % len(OPTIONS)]))
    return calls


def prepare(m: pyshim.Model, conv: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    options = dict(options)
    tools = None if options.pop("_no_tools", False) else [WEATHER_TOOL]
    r = m.generate(conv, tools, max_tokens=1, _test={"prepare_only": True, "check_messages": True}, **options)
    assert r["finish_reason"] == "prepare_only"
    return r


def prepared(m: pyshim.Model, conv: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    return prepare(m, conv, options)["prepared"]


def digest(p: dict[str, Any], spec: str = "") -> str:
    if spec in PLACE_DIFFERS:
        p = {k: v for k, v in p.items() if k != "last_message_start"}
    return hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("spec", SPECS)
def test_prepared_requests_match_the_unpatched_render(spec: str) -> None:
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    extra = {"chat_template": TEMPLATES[spec]} if spec in TEMPLATES else {}
    calls = conversations(spec)
    with pyshim.Model(model_path(spec.split("+")[0]), n_ctx=8192, **extra) as m:
        results = [prepare(m, conv, opt) for conv, opt in calls]
    got = [digest(r["prepared"], spec) for r in results]
    if spec in READ_OFF_RENDER and has_patch("common-shared-values-last-message"):
        # The digests hold where the last message starts, and this is how it was found: off the
        # main render, except for a continued message (common/ appends it after the render),
        # where the history is rendered again (always, without the patch).
        how = [r["last_message_rendered"] for r in results]
        assert how == [conv[-1]["role"] == "assistant" for conv, _ in calls]
    if RECORD:
        assert not pyshim.build_info()["patches"], "record from a library built with no patch (make test-nopatch)"
        golden[spec] = got
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    want = golden[spec]
    differ = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
    assert not differ, f"{spec}: calls {differ} of {len(want)} prepare something other than the unpatched render"


@pytest.mark.parametrize("spec", [GEMMA, "tiny:hybrid"])
def test_the_checkpoint_place_read_off_the_render_is_the_history_renders(spec: str) -> None:
    """Where the last message starts, read off the main render, equals what rendering the history
    again finds (the ``render_history`` hook), call after call."""
    with pyshim.Model(model_path(spec), n_ctx=8192) as m:
        for conv, options in conversations(spec):
            opt = dict(options)
            tools = None if opt.pop("_no_tools", False) else [WEATHER_TOOL]
            again = m.generate(conv, tools, max_tokens=1, _test={"prepare_only": True, "render_history": True}, **opt)
            assert again["last_message_rendered"]
            assert prepared(m, conv, options) == again["prepared"]


def test_the_place_read_off_qwen35s_render_is_never_before_the_history_renders() -> None:
    spec = "tiny:qwen35"
    with pyshim.Model(model_path(spec), n_ctx=8192) as m:
        for conv, options in conversations(spec):
            opt = dict(options)
            tools = None if opt.pop("_no_tools", False) else [WEATHER_TOOL]
            again = m.generate(conv, tools, max_tokens=1, _test={"prepare_only": True, "render_history": True}, **opt)
            read_off = prepared(m, conv, options)
            assert read_off["last_message_start"] >= again["prepared"]["last_message_start"]
            assert {**read_off, "last_message_start": 0} == {**again["prepared"], "last_message_start": 0}


def test_a_one_byte_difference_is_caught() -> None:
    """The check can fail: one more character in one early message changes its digest."""
    with pyshim.Model(model_path(SMOL), n_ctx=8192) as m:
        conv, opt = conversations(SMOL)[3]
        edited = [dict(x) for x in conv]
        edited[1]["content"] += "!"
        assert digest(prepared(m, edited, opt)) != json.loads(GOLDEN.read_text())[SMOL][3]


@needs_patch("common-render-memo-loops")
@pytest.mark.parametrize("spec", [QWEN, GEMMA, SMOL, f"{SMOL}+namespace"])
def test_a_later_call_takes_the_earlier_messages_from_the_loop_memo(spec: str) -> None:
    """What the digests prove exact is also what runs: the next call of a conversation renders
    only its new messages, and a loop the memo cannot key (a namespace written in it) none."""
    extra = {"chat_template": TEMPLATES[spec]} if spec in TEMPLATES else {}
    calls = conversations(spec)
    with pyshim.Model(model_path(spec.split("+")[0]), n_ctx=8192, **extra) as m:
        prepare(m, *calls[-2])
        conv, options = calls[-1]
        reused = prepare(m, conv, options)["n_render_reused"]
    if spec.endswith("+namespace"):
        assert reused == 0
    else:
        # new: the last two messages, the one before them (no longer last) and, on qwen2.5, the
        # first (its template reads messages[loop.index0 - 1], which is the last message there)
        assert reused >= len(conv) - 4, f"{spec}: {reused} of {len(conv)} messages taken from the memo"
