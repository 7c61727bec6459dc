"""Bad input gets a clear error, never a crash, and the next call on the same handle still works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import GEMMA, QWEN, SMOL, WEATHER_TOOL, user

import pyshim
from pyshim._lib import ffi, lib, take_json
from pyshim.errors import Code

BAD_CALLS = [
    # (messages JSON, tools JSON, options JSON, expected words in the error)
    ("not json", None, None, "not valid JSON"),
    ('{"role": "user"}', None, None, "array"),
    ("[]", None, None, "empty"),
    ('[{"role": "wizard", "content": "hi"}]', None, None, "unknown role"),
    ('[{"role": "user"}]', None, None, "content"),
    ('[{"role": "user", "content": 42}]', None, None, "content"),
    ('[{"role": "user", "content": [{"type": "image"}]}]', None, None, "parts"),
    ('[{"content": "hi"}]', None, None, "role"),
    ('[{"role": "user", "content": "hi"}]', '{"not": "a list"}', None, "tools"),
    ('[{"role": "user", "content": "hi"}]', '[{"type": "function"}]', None, "function"),
    ('[{"role": "user", "content": "hi"}]', None, "[1, 2]", "options"),
    ('[{"role": "user", "content": "hi"}]', None, '{"max_tokens": 0}', "max_tokens"),
    ('[{"role": "user", "content": "hi"}]', None, '{"max_tokens": -5}', "max_tokens"),
    ('[{"role": "user", "content": "hi"}]', None, '{"max_tokens": "ten"}', "max_tokens"),
    ('[{"role": "user", "content": "hi"}]', None, '{"temperature": "hot"}', "temperature"),
    ('[{"role": "user", "content": "hi"}]', None, '{"top_p": 7}', "top_p"),
    ('[{"role": "user", "content": "hi"}]', None, '{"top_logprobs": 3}', "logprobs"),
    ('[{"role": "user", "content": "hi"}]', None, '{"logprobs": true, "top_logprobs": 50}', "top_logprobs"),
    ('[{"role": "user", "content": "hi"}]', None, '{"logit_bias": {"-3": 1}}', "logit_bias"),
    ('[{"role": "user", "content": "hi"}]', None, '{"logit_bias": {"999999999": 1}}', "logit_bias"),
    ('[{"role": "user", "content": "hi"}]', None, '{"stop": 5}', "stop"),
    ('[{"role": "user", "content": "hi"}]', None, '{"tool_choice": "required"}', "no tools"),
    ('[{"role": "user", "content": "hi"}]', None, '{"tool_choice": "sometimes"}', "tool_choice"),
    ('[{"role": "user", "content": "hi"}]', None, '{"response_format": {"type": "xml"}}', "response_format"),
    ('[{"role": "user", "content": "hi"}]', None, '{"bogus_option": 1}', "unknown options key"),
]


def _raw(m: pyshim.Model, messages: str | None, tools: str | None, options: str | None) -> dict:
    def enc(s: str | None):
        return ffi.NULL if s is None else s.encode()

    ptr = lib().el_generate(m.handle, enc(messages), enc(tools), enc(options))
    text = ffi.string(ptr).decode()
    lib().el_free(ptr)
    return json.loads(text)


def _still_works(m: pyshim.Model) -> None:
    r = m.generate(user("Say OK."), max_tokens=4)
    assert "error" not in r and r["n_decoded"] >= 1


@pytest.mark.parametrize(("messages", "tools", "options", "words"), BAD_CALLS)
def test_bad_request_is_an_error_and_the_handle_survives(smol, messages, tools, options, words) -> None:
    r = _raw(smol, messages, tools, options)
    assert set(r) == {"error", "code"}, r
    assert r["code"] == (Code.UNKNOWN_KEY if "unknown options key" in words else Code.INVALID), r
    assert words.lower() in r["error"].lower(), r["error"]
    _still_works(smol)


def test_null_messages_is_an_error(smol) -> None:
    assert "NULL" in _raw(smol, None, None, None)["error"]


def test_tool_schema_that_cannot_become_a_grammar(qwen) -> None:
    bad = json.loads(json.dumps(WEATHER_TOOL))
    bad["function"]["parameters"] = {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}
    with pytest.raises(pyshim.InvalidRequest):
        qwen.generate(user("weather?"), [bad], tool_choice="required", max_tokens=8)
    _still_works(qwen)


def test_prompt_longer_than_the_context(qwen_path: Path) -> None:
    with pyshim.Model(qwen_path, n_ctx=128) as m:
        with pytest.raises(pyshim.InvalidRequest, match="context holds"):
            m.generate(user("word " * 400))
        _still_works(m)


@pytest.mark.parametrize("name", [SMOL, QWEN, GEMMA])
def test_a_prompt_that_cannot_fit_is_refused_without_tokenizing(name: str) -> None:
    """3 MB of text against a 2,048-token context is refused from its length alone ("at least"),
    on every registry model's vocabulary: tokenizing it takes a core for 0.7 s, which slowed a
    stream beside it 20-fold on 2 cores. Fails when a vocabulary's bound is off (smollm2's and
    qwen2.5's were: the refusal then names the exact count instead)."""
    with pyshim.Model(name, n_ctx=2048) as m:
        with pytest.raises(pyshim.InvalidRequest, match=r"prompt is at least [0-9]+ tokens; the context holds 2048"):
            m.generate(user("lorem ipsum " * 250_000))
        _still_works(m)


def test_bytes_the_tokenizer_drops_do_not_count_towards_the_bound(smol) -> None:
    """smollm2's vocabulary has no token for the control byte 0x04: 200,000 of them tokenize to
    nothing, so the prompt fits in 2,048 tokens and must run. Fails when the early refusal counts
    every byte (it then refuses a prompt of a few dozen tokens as "at least 2,470")."""
    r = smol.generate(user("hi " + "\x04" * 200_000), max_tokens=1)
    assert r["n_prompt"] < 100, r["n_prompt"]


def test_python_errors_are_shim_errors(smol) -> None:
    with pytest.raises(pyshim.ShimError):
        smol.generate([{"role": "nobody", "content": "x"}])
    with pytest.raises(pyshim.InvalidRequest):
        smol.generate(user("hi"), max_tokens=0)


@pytest.mark.parametrize(
    ("config", "words", "code"),
    [
        ('{"model": "/nonexistent/model.gguf"}', "not found", Code.NOT_FOUND),
        ("{not json", "not valid JSON", Code.INVALID),
        ("[]", "object", Code.INVALID),
        ("{}", "model", Code.INVALID),
        ('{"model": "x.gguf", "n_ctx": "big"}', "n_ctx", Code.INVALID),
        ('{"model": "x.gguf", "frobnicate": 1}', "unknown config key", Code.UNKNOWN_KEY),
        ('{"model": "x.gguf", "flash_attn": "fast"}', "flash_attn", Code.INVALID),
    ],
)
def test_el_open_failure_has_a_readable_message(config: str, words: str, code: Code) -> None:
    assert lib().el_open(config.encode()) == ffi.NULL
    err = json.loads(ffi.string(lib().el_last_error()).decode())
    assert words.lower() in err["error"].lower() and err["code"] == code, err


def test_not_a_gguf_file(tmp_path: Path) -> None:
    p = tmp_path / "fake.gguf"
    p.write_bytes(b"this is not a model" * 10)
    with pytest.raises(pyshim.ModelLoadError, match="not a GGUF"):
        pyshim.Model(p)


def test_truncated_gguf_file(tmp_path: Path, qwen_path: Path) -> None:
    p = tmp_path / "cut.gguf"
    with qwen_path.open("rb") as f:
        p.write_bytes(f.read(1 << 20))
    with pytest.raises(pyshim.ModelLoadError, match="could not load"):
        pyshim.Model(p)


def test_closed_and_bogus_handles_are_errors(qwen_path: Path) -> None:
    m = pyshim.Model(qwen_path, n_ctx=256)
    h = m.handle
    assert lib().el_close(h) == 0
    assert lib().el_close(h) == -1
    assert lib().el_cancel(h) == -1
    assert lib().el_reset(h) == -1
    with pytest.raises(pyshim.ClosedModel):
        take_json(lib().el_generate(h, b'[{"role": "user", "content": "hi"}]', ffi.NULL, ffi.NULL))
    with pytest.raises(pyshim.ClosedModel):
        take_json(lib().el_generate(ffi.NULL, b"[]", ffi.NULL, ffi.NULL))
    bogus = ffi.cast("el_handle *", 0xDEADBEEF)
    with pytest.raises(pyshim.ClosedModel):
        take_json(lib().el_stats(bogus))
    m._handle = None  # already closed by hand
    with pytest.raises(pyshim.ClosedModel):
        m.generate(user("hi"))
