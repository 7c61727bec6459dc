"""el_generate on real models: chat, tool calls, grammars, limits, sampling options."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import SMOL, WEATHER_TOOL, user
from oracle import entries

import pyshim


@pytest.mark.parametrize("fixture", ["qwen", "smol", "gemma"])
def test_plain_chat_on_every_catalogue_model(request: pytest.FixtureRequest, fixture: str) -> None:
    m: pyshim.Model = request.getfixturevalue(fixture)
    r = m.generate(user("Say hello in one short sentence."), max_tokens=24)
    assert isinstance(r["content"], str) and r["content"].strip()
    assert r["finish_reason"] in ("stop", "length")
    assert r["tool_calls"] == []
    assert r["usage"]["prompt_tokens"] == r["n_prompt"] > 5
    assert r["usage"]["completion_tokens"] == r["n_decoded"] >= 1
    assert r["message"] == {"role": "assistant", "content": r["content"]}
    for key in ("ms_reset", "ms_prefill", "ms_decode"):
        assert r[key] >= 0
    assert 0 < r["ms_template"] <= r["ms_prepare"]  # rendering is part of preparing the request


def test_required_tool_choice_gives_exactly_one_weather_call(qwen: pyshim.Model) -> None:
    r = qwen.generate(user("What is the weather in Paris?"), [WEATHER_TOOL], tool_choice="required")
    assert r["finish_reason"] == "tool_calls"
    assert len(r["tool_calls"]) == 1
    call = r["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["city"] == "Paris"
    assert r["content"] is None and r["message"]["tool_calls"] == r["tool_calls"]


def test_named_tool_choice_forces_that_tool(qwen: pyshim.Model) -> None:
    other = json.loads(json.dumps(WEATHER_TOOL))
    other["function"]["name"] = "get_time"
    r = qwen.generate(
        user("What is the weather in Paris?"),
        [WEATHER_TOOL, other],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    assert [c["function"]["name"] for c in r["tool_calls"]] == ["get_time"]
    json.loads(r["tool_calls"][0]["function"]["arguments"])


def test_tool_choice_none_never_calls(qwen: pyshim.Model) -> None:
    r = qwen.generate(user("What is the weather in Paris?"), [WEATHER_TOOL], tool_choice="none", max_tokens=40)
    assert r["tool_calls"] == []


def test_json_schema_output_parses_and_validates(qwen: pyshim.Model) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        },
        "required": ["name", "age", "languages"],
        "additionalProperties": False,
    }
    r = qwen.generate(
        user("Describe a fictional programmer as JSON."),
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        max_tokens=200,
    )
    assert r["finish_reason"] == "stop"
    data = json.loads(r["content"])
    assert set(data) == {"name", "age", "languages"}
    assert isinstance(data["name"], str) and isinstance(data["age"], int) and data["age"] >= 0
    assert isinstance(data["languages"], list) and len(data["languages"]) <= 3
    assert all(isinstance(x, str) for x in data["languages"])


WORD = {
    "type": "json_schema",
    "json_schema": {"name": "word", "schema": {"type": "object", "properties": {"word": {"type": "string"}},
                                                "required": ["word"], "additionalProperties": False}},
}  # fmt: skip


def test_response_format_beside_tools_gives_a_call_or_an_answer_in_the_schema(
    qwen: pyshim.Model, smol: pyshim.Model
) -> None:
    """OpenAI takes both (openai-agents sends both for an agent with an output_type and tools).
    A model that means to call gets a valid call; one that means to answer in text -- smollm2
    here, which under the call-or-answer grammar alone wrote a call every time -- answers in
    the schema, because its first unconstrained token chose (el_shim.h, response_format)."""
    call = qwen.generate(
        user("What is the weather in Paris?"), [WEATHER_TOOL], response_format=WORD, max_tokens=60, temperature=0
    )
    assert call["finish_reason"] == "tool_calls" and [c["function"]["name"] for c in call["tool_calls"]] == [
        "get_weather"
    ]
    assert "city" in json.loads(call["tool_calls"][0]["function"]["arguments"])
    question = user("Translate the word 'cat' into French.")
    answer = smol.generate(question, [WEATHER_TOOL], response_format=WORD, max_tokens=30, temperature=0)
    assert answer["tool_calls"] == [] and set(json.loads(answer["content"])) == {"word"}
    stream = smol.stream(question, [WEATHER_TOOL], response_format=WORD, max_tokens=30, temperature=0)
    assert "".join(d.get("content") or "" for d in stream) == answer["content"]
    # A forced call still wins over the schema.
    # (smollm2 pads a forced call with blank lines the grammar allows: give it room.)
    forced = smol.generate(
        question, [WEATHER_TOOL], response_format=WORD, tool_choice="required", max_tokens=120, temperature=0
    )
    assert [c["function"]["name"] for c in forced["tool_calls"]] == ["get_weather"]


def test_json_object_output_is_an_object(smol: pyshim.Model) -> None:
    r = smol.generate(
        user("Give me a JSON object about cats."), response_format={"type": "json_object"}, max_tokens=120
    )
    if r["finish_reason"] == "stop":
        assert isinstance(json.loads(r["content"]), dict)
    else:
        assert r["content"].lstrip().startswith("{")


def test_max_tokens_gives_length(smol: pyshim.Model) -> None:
    r = smol.generate(user("Write a long story about a dragon."), max_tokens=5)
    assert r["finish_reason"] == "length"
    assert r["n_decoded"] == 5
    assert r["truncated"] is False


def test_context_overflow_while_generating_is_truncated(qwen_path) -> None:
    with pyshim.Model(qwen_path, n_ctx=256, temperature=0) as m:
        n_ctx = m.stats()["n_ctx"]
        r = m.generate(user("Count from 1 to 300, one number per line."), max_tokens=1000)
    assert r["finish_reason"] == "length" and r["truncated"] is True
    assert r["n_prompt"] + r["n_decoded"] <= n_ctx


def test_stop_strings_cut_the_output(smol: pyshim.Model) -> None:
    smol.reset()  # compared outputs come from identical (fresh) evaluations
    free = smol.generate(user("List the numbers 1 to 10 separated by commas."), max_tokens=40)
    assert "5" in free["content"]
    smol.reset()
    r = smol.generate(user("List the numbers 1 to 10 separated by commas."), max_tokens=40, stop=["5"])
    assert r["finish_reason"] == "stop"
    assert "5" not in r["content"]
    assert free["content"].startswith(r["content"])


def test_logprobs_openai_shape(smol: pyshim.Model) -> None:
    r = smol.generate(user("Hi"), max_tokens=4, logprobs=True, top_logprobs=5)
    content = entries(r)  # the output's tokens, then the end token's apart (ABI 1.12)
    assert len(content) == r["n_decoded"]
    assert "".join(e["token"] for e in r["logprobs"]["content"]) == r["content"]
    for entry in content:
        assert entry["logprob"] <= 0
        assert bytes(entry["bytes"]).decode("utf-8", "replace") == entry["token"] or entry["bytes"]
        tops = entry["top_logprobs"]
        assert len(tops) == 5
        values = [t["logprob"] for t in tops]
        assert values == sorted(values, reverse=True)
        # greedy: the chosen token is the most likely one
        assert entry["logprob"] == pytest.approx(values[0])
    assert "logprobs" not in smol.generate(user("Hi"), max_tokens=2)


def test_logit_bias_bans_a_token(smol: pyshim.Model) -> None:
    smol.reset()
    r = smol.generate(user("Hi"), max_tokens=1, logprobs=True, top_logprobs=2)
    first, second = entries(r)[0]["top_logprobs"]
    smol.reset()
    banned = smol.generate(user("Hi"), max_tokens=1, logprobs=True, logit_bias={str(first["id"]): -100})
    assert entries(banned)[0]["id"] == second["id"]
    boosted = smol.generate(user("Hi"), max_tokens=1, logprobs=True, logit_bias={str(second["id"]): 100})
    assert entries(boosted)[0]["id"] == second["id"]


def test_ignore_eos_runs_to_max_tokens(smol: pyshim.Model) -> None:
    natural = smol.generate(user("Reply with the single word OK."), max_tokens=128)
    assert natural["finish_reason"] == "stop" and natural["n_decoded"] < 128  # the model ends on its own
    forced = smol.generate(user("Reply with the single word OK."), max_tokens=48, ignore_eos=True)
    assert forced["finish_reason"] == "length" and forced["n_decoded"] == 48


@pytest.mark.parametrize("flash_attn", ["on", "off"])
def test_flash_attn_setting_is_applied(flash_attn: str) -> None:
    with pyshim.Model(SMOL, n_ctx=512, temperature=0, flash_attn=flash_attn) as m:
        stats = m.stats()
        assert stats["flash_attn"] == flash_attn
        # read back from llama.cpp's context, not echoed from our config
        assert stats["flash_attn_in_use"] is (flash_attn == "on")
        assert m.generate(user("Say OK."), max_tokens=4)["n_decoded"] >= 1


def test_seeded_sampling_is_reproducible(smol: pyshim.Model) -> None:
    opts = {"temperature": 1.0, "seed": 1234, "max_tokens": 16}
    smol.reset()
    a = smol.generate(user("Tell me a fun fact."), **opts)
    smol.reset()
    b = smol.generate(user("Tell me a fun fact."), **opts)
    assert a["content"] == b["content"]


@pytest.mark.parametrize("options", [{}, {"ignore_eos": True}, {"logit_bias": {"13": 5.0, "11": -100}}])
def test_greedy_fast_path_picks_what_the_sampler_chain_picks(smol: pyshim.Model, options: dict) -> None:
    """Greedy decoding reads the argmax of the (biased) logits directly; the full chain must agree."""
    outputs = []
    for hooks in ({}, {"sampler_chain": True}):
        smol.reset()  # identical evaluations, so identical logits
        r = smol.generate(user("Write a short poem about rain."), max_tokens=40, temperature=0, _test=hooks, **options)
        outputs.append((r["content"], r["n_decoded"]))
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(
    "question",
    ["What is the weather in Paris right now?", "Write two sentences about rain. Do not call any tool."],
)
def test_greedy_reads_the_argmax_only_without_a_grammar(qwen: pyshim.Model, question: str) -> None:
    """Greedy decoding reads the argmax only where no grammar is carried; with tools (a lazy
    tool-call grammar) the sampler picks every token, before the trigger too (docs/patches.md:
    the patch that let it read the argmax there was dropped). n_argmax, the tokens read off the
    logits, is the check: 0 with tools, every token without; without tools the fast path must
    also give the full chain's reply and tokens (with tools both take the chain's path)."""

    def greedy(tools: list[dict[str, Any]] | None, hooks: dict[str, Any]) -> dict[str, Any]:
        qwen.reset()  # identical evaluations, so identical logits
        return qwen.generate(user(question), tools, max_tokens=48, temperature=0, _test=hooks)

    with_tools = greedy([WEATHER_TOOL], {})
    assert with_tools["n_decoded"] > 0 and with_tools["n_argmax"] == 0
    fast, chain = greedy(None, {}), greedy(None, {"sampler_chain": True})
    for key in ("content", "n_decoded", "finish_reason"):
        assert fast[key] == chain[key], key
    assert chain["n_argmax"] == 0
    assert fast["n_argmax"] == fast["n_decoded"] > 0
