"""The tiny Gemma 4 and Qwen3.5 models (tests/tiny_models.py) load, render their real chat
templates, generate and reuse their caches: a sliding-window model whose window (32 tokens)
is shorter than the prompts, and a hybrid of Gated DeltaNet and attention layers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import gguf
import pytest
from conftest import WEATHER_TOOL
from oracle import GREEDY, entries, largest_difference
from tiny_models import GEMMA4_TEMPLATE, LFM2_TEMPLATE, QWEN35_TEMPLATE, sdist_template, tiny_model

import pyshim

KINDS = ["gemma4", "qwen35"]

FILLER = "hello " * 40  # about 40 tokens: longer than gemma4's window

HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny in Paris."},
    {"role": "user", "content": "And in Rome?"},
]

# Markers each real template writes for the conversation above (with the tool offered).
MARKERS = {
    "gemma4": ["<|tool>", "<|turn>user\n", "<|tool_call>call:get_weather", "<|tool_response>", "<|turn>model\n"],
    "qwen35": [
        "<tools>",
        "<|im_start|>user\n",
        "<tool_call>\n<function=get_weather>",
        "<tool_response>",
        "<|im_start|>assistant\n",
    ],
}


@pytest.fixture(scope="module", params=KINDS)
def tiny(request: pytest.FixtureRequest) -> Iterator[tuple[str, pyshim.Model]]:
    with pyshim.Model(tiny_model(request.param), n_ctx=1024, temperature=0) as m:
        yield request.param, m


def test_file_has_both_layer_kinds_and_the_real_template(tiny) -> None:
    kind, m = tiny
    reader = gguf.GGUFReader(tiny_model(kind))
    fields = reader.fields
    assert fields["general.architecture"].contents() == kind
    template = fields["tokenizer.chat_template"].contents()
    assert template == sdist_template(GEMMA4_TEMPLATE if kind == "gemma4" else QWEN35_TEMPLATE)
    stats = m.stats()
    if kind == "gemma4":
        assert set(fields["gemma4.attention.sliding_window_pattern"].contents()) == {True, False}
        assert stats["n_swa"] == 32 and not stats["swa_full"] and not stats["recurrent"]
    else:
        names = {t.name for t in reader.tensors}
        assert "blk.0.ssm_conv1d.weight" in names and "blk.1.attn_q.weight" in names  # DeltaNet, attention
        assert stats["recurrent"]


def test_real_template_renders_tools_and_history(tiny) -> None:
    kind, m = tiny
    r = m.generate(HISTORY, [WEATHER_TOOL], max_tokens=1, _test={"prepare_only": True})
    prompt = r["prepared"]["prompt"]
    for marker in MARKERS[kind]:
        assert marker in prompt, f"{kind}: {marker!r} missing from the rendered prompt"
    assert prompt.index(MARKERS[kind][2]) < prompt.index("It is sunny in Paris.") < prompt.index("And in Rome?")


def test_generates_and_reuses_across_turns(tiny) -> None:
    kind, m = tiny
    m.reset()
    u1 = {"role": "user", "content": FILLER}
    turns = [[u1], [u1, {"role": "assistant", "content": "x"}, {"role": "user", "content": "more please"}]]
    turns.append([*turns[1], {"role": "assistant", "content": "y"}, {"role": "user", "content": "and again"}])
    results = [m.generate(t, max_tokens=4) for t in turns]
    for r in results:
        assert r["n_decoded"] >= 1 and r["finish_reason"] in ("length", "stop")
    assert results[0]["n_prompt"] > 32
    # The third turn extends the second's history, whose last message starts at a checkpoint:
    # at least the first turn's prompt, less its generation prompt, is reused.
    assert results[2]["n_reused"] >= results[0]["n_prompt"] - 4, [r["n_reused"] for r in results]
    if kind == "gemma4":
        # The generation prompt is what the history renders, so the whole first prompt is reused,
        # through a checkpoint (the window is smaller than the prompt).
        assert results[1]["n_reused"] >= results[0]["n_prompt"] - 1
    else:
        # Qwen3.5 renders the reply without the <think> that the generation prompt opened: the
        # second turn diverges where the reply's turn opens, and reuses the checkpoint there.
        assert results[1]["n_reused"] >= results[0]["n_prompt"] - 8, [r["n_reused"] for r in results]
    assert m.stats()["cache"]["n_checkpoints"] > 0


def _same_up_to_a_near_tie(fresh: dict, reused: dict) -> bool:
    """The same greedy tokens, except that from a token where fresh's two best were within 0.05
    (llama.cpp's kernels round other batch shapes differently) the rest may differ."""
    for a, b in zip(entries(fresh), entries(reused), strict=False):
        if a["id"] != b["id"]:
            best = sorted((t["logprob"] for t in a["top_logprobs"]), reverse=True)
            return len(best) > 1 and best[0] - best[1] < 0.05
        if abs(a["logprob"] - b["logprob"]) > 0.05:
            return False
    return True


def _exact(a: dict, b: dict) -> float:
    return largest_difference(a, b)


@pytest.mark.parametrize("swa_full", [False, True], ids=["windowed", "deterministic"])
def test_gemma4_the_sequence_that_broke_llama_cpp_python(swa_full: bool) -> None:
    """What made llama-cpp-python's second call on Gemma 4 fail ("error during generation" after
    a shared BOS, stale position maps left by seq_rm): two unrelated conversations back to back
    (they share only BOS and the template's opening), then one growing over ten calls, then an
    edit of its first message.
    Every call succeeds and reuses where it can; with "deterministic" every call's tokens and log
    probabilities equal a fresh handle's bit for bit, and with the windowed cache (swa_full false,
    the window shorter than the prompts) its greedy tokens equal a fresh windowed handle's."""
    config = {"n_ctx": 2048, "temperature": 0}
    config |= {"deterministic": True} if swa_full else {"swa_full": False}
    path = tiny_model("gemma4")
    words = ["river", "copper", "lantern", "meadow", "falcon", "quartz", "harbor", "ember"]

    def say(i: int, n: int = 30) -> str:
        return " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(n)) + "."

    calls = [[{"role": "user", "content": say(0)}], [{"role": "user", "content": "Another topic. " + say(1)}]]
    conv: list[dict] = [{"role": "system", "content": "Be brief. " + say(2)}]
    for turn in range(10):
        conv = [*conv, {"role": "user", "content": say(3 + turn, 12)}]
        calls.append(conv)
        conv = [*conv, {"role": "assistant", "content": say(20 + turn, 6)}]
    edited = [dict(m) for m in calls[-1]]
    edited[1] = {"role": "user", "content": "Edited. " + say(40, 12)}
    calls.append(edited)
    with pyshim.Model(path, **config) as m, pyshim.Model(path, **config) as fresh:
        reused = []
        for messages in calls:
            r = m.generate(messages, max_tokens=4, **GREEDY)
            f = fresh.generate(messages, max_tokens=4, cache_prompt=False, **GREEDY)
            if swa_full:
                assert _exact(f, r) == 0, f"call {len(reused)}: reuse differs from a fresh evaluation"
            else:
                assert _same_up_to_a_near_tie(f, r), f"call {len(reused)}: windowed reuse chose other tokens"
            reused.append(r["n_reused"])
    assert reused[1] < 16, reused  # the unrelated second conversation shares only the template's opening
    assert all(n > 0 for n in reused[3:12]), reused  # the growing conversation reuses every turn
    assert reused[12] < reused[11], reused  # the edit of the first message cuts reuse short


ENUM_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
}


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}], ids=["required", "named"]
)
def test_forced_calls_come_back_parsed_through_the_real_template(tiny, choice) -> None:
    """With the model's own template (Gemma 4's, Qwen3.5's), a forced call on the random model
    comes back as a parsed tool call whose arguments match the schema, and the streamed deltas
    add up to the result."""
    _, m = tiny
    m.reset()
    ask = [*HISTORY[:-1], {"role": "user", "content": "And in Rome?"}]
    # an enum keeps a random model's arguments short (a free string could run to any length)
    r = m.generate(ask, [ENUM_WEATHER], tool_choice=choice, max_tokens=200)
    assert r["finish_reason"] == "tool_calls" and len(r["tool_calls"]) >= 1, r
    call = r["tool_calls"][0]["function"]
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]).get("city") in ("Paris", "Rome"), call
    m.reset()
    deltas = list(m.stream(ask, [ENUM_WEATHER], tool_choice=choice, max_tokens=200))
    streamed: dict[int, dict[str, str]] = {}
    for d in deltas:
        for tc in d.get("tool_calls") or []:
            entry = streamed.setdefault(tc["index"], {"name": "", "arguments": ""})
            entry["name"] += tc.get("function", {}).get("name") or ""
            entry["arguments"] += tc.get("function", {}).get("arguments") or ""
    assert [streamed[i] for i in sorted(streamed)] == [t["function"] for t in r["tool_calls"]]


def test_a_tool_history_reuses_exactly(tiny) -> None:
    """A conversation with assistant tool calls and tool results, grown turn by turn through the
    real template on deterministic handles: each turn reuses the last and computes exactly what
    a fresh handle computes."""
    kind, _ = tiny
    config = {"n_ctx": 2048, "temperature": 0, "deterministic": True}
    path = tiny_model(kind)
    with pyshim.Model(path, **config) as m, pyshim.Model(path, **config) as fresh:
        for turn in range(1, len(HISTORY) + 1):
            conv = HISTORY[:turn]
            if conv[-1]["role"] == "assistant":
                continue
            r = m.generate(conv, [WEATHER_TOOL], max_tokens=3, **GREEDY)
            f = fresh.generate(conv, [WEATHER_TOOL], max_tokens=3, cache_prompt=False, **GREEDY)
            assert largest_difference(f, r) == 0, f"{kind}: turn {turn} differs from a fresh evaluation"
            if turn > 1:
                assert r["n_reused"] > 0, f"{kind}: turn {turn} reused nothing"


def test_lfm2_loads_generates_and_reuses() -> None:
    """The tiny LFM2 (short convolutions and attention, run as a hybrid) carries LFM2.5's
    template, generates, reuses a grown conversation, and on deterministic handles computes
    exactly what a fresh handle computes. (Not in KINDS: that template renders no tool calls,
    so the tool-history fixtures above do not apply.)"""
    path = tiny_model("lfm2")
    reader = gguf.GGUFReader(path)
    assert reader.fields["general.architecture"].contents() == "lfm2"
    assert reader.fields["tokenizer.chat_template"].contents() == sdist_template(LFM2_TEMPLATE)
    assert list(reader.fields["lfm2.attention.head_count_kv"].contents()) == [0, 2, 0, 2]
    u1 = {"role": "user", "content": FILLER}
    with pyshim.Model(path, n_ctx=1024, temperature=0) as m:
        assert m.stats()["recurrent"]
        r1 = m.generate([u1], max_tokens=4)
        assert r1["n_decoded"] >= 1 and r1["n_prompt"] > 32
        r2 = m.generate([u1, r1["message"], {"role": "user", "content": "more"}], max_tokens=4)
        assert r2["n_reused"] >= r1["n_prompt"], (r1["n_prompt"], r2["n_reused"])
    config = {"n_ctx": 1024, "temperature": 0, "deterministic": True}
    with pyshim.Model(path, **config) as m, pyshim.Model(path, **config) as fresh:
        conv = [u1]
        for turn in range(3):
            r = m.generate(conv, max_tokens=3, **GREEDY)
            f = fresh.generate(conv, max_tokens=3, cache_prompt=False, **GREEDY)
            assert largest_difference(f, r) == 0, f"turn {turn} differs from a fresh evaluation"
            assert turn == 0 or r["n_reused"] > 0, f"turn {turn} reused nothing"
            conv = [*conv, r["message"], {"role": "user", "content": f"and {turn}"}]
