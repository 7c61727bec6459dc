"""The caller's messages are read at the cost of what is new in them (native/message_cache.h): a
handle keeps each message it has read, keyed by the exact bytes of its JSON text, and a later
call parses and checks only the messages it has not seen. Exactness is checked by the
``check_messages`` hook, which reads the whole array again and fails the call where the two
readings differ (the random conversations of test_token_cache.py and test_render_exact.py run
with it on every catalogue model and the tiny ones). Here: what is reused, that a cache keyed by
position is caught, that errors read as they always did, and messages common/ needs normalised."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from conftest import SMOL, WEATHER_TOOL, model_path
from oracle import text, tool_exchange

import pyshim
from pyshim._lib import ffi, lib, take_json

CHECK = {"check_messages": True, "prepare_only": True}


def prepare(m: pyshim.Model, conv: Any, tools: Any = None, session: str | None = None, **test: Any) -> dict[str, Any]:
    options = {"session": session} if session is not None else {}
    r = m.generate(conv, tools, max_tokens=1, _test={**CHECK, **test}, **options)
    assert r["finish_reason"] == "prepare_only"
    return r


@pytest.fixture(scope="module")
def smol() -> Any:
    with pyshim.Model(model_path(SMOL), n_ctx=4096) as m:
        yield m


def test_a_later_call_reads_only_what_changed(smol: pyshim.Model) -> None:
    rng = random.Random("messages-reused")
    conv = [{"role": "system", "content": text(rng, 40)}, {"role": "user", "content": text(rng, 10)}]
    conv += [*tool_exchange(rng, 1), {"role": "user", "content": text(rng, 10)}]
    first = prepare(smol, conv, [WEATHER_TOOL])
    assert first["n_messages_reused"] == 0
    conv = [*conv, {"role": "assistant", "content": text(rng, 8)}, {"role": "user", "content": text(rng, 8)}]
    assert prepare(smol, conv, [WEATHER_TOOL])["n_messages_reused"] == 5
    edited = [dict(x) for x in conv]
    edited[1]["content"] = "Edited. " + conv[1]["content"]
    assert prepare(smol, edited, [WEATHER_TOOL])["n_messages_reused"] == len(conv) - 1
    assert prepare(smol, conv, [WEATHER_TOOL])["n_messages_reused"] == len(conv)


def test_a_cache_keyed_by_position_is_caught(smol: pyshim.Model) -> None:
    """The differential check can fail: the ``messages_by_position`` hook takes each message as
    the previous call's message at the same place, whatever its bytes; one word changed in the
    first message turns the call red."""
    rng = random.Random("by-position")
    conv = [{"role": "system", "content": text(rng, 30)}, {"role": "user", "content": text(rng, 10)}]
    prepare(smol, conv)
    edited = [dict(x) for x in conv]
    edited[0]["content"] = conv[0]["content"].replace(" ", " very ", 1)
    prepare(smol, edited)  # the real cache sees the edit
    prepare(smol, conv)
    with pytest.raises(pyshim.ShimError, match="cached reading of the messages differs from a whole one at message 0"):
        prepare(smol, edited, messages_by_position=True)
    prepare(smol, edited)  # and the next call is right again


HI = '{"role": "user", "content": "hi"}'
BAD = [  # (messages JSON, the error's words)
    ("[]", "messages is empty"),
    ('{"role": "user"}', "messages must be a JSON array"),
    (f"[{HI}, 3]", r"messages\[1\] must be an object"),
    (f'[{HI}, {{"role": "robot", "content": "x"}}]', r'messages\[1\] has unknown role "robot"'),
    (f'[{HI}, {{"role": "user"}}]', r'messages\[1\] needs "content"'),
    (f'[{HI}, {{"role": "user", "content": "x", "tool_calls": []}}]', r"messages\[1\]\.tool_calls must be an array on"),
    (f'[{HI}, {{"role": "user", "content": 42}}]', r"messages\[1\]\.content must be a string"),
    (f"[{HI}, {HI}", "messages is not valid JSON"),
    (f"[{HI}, {{]", "messages is not valid JSON"),
    (f"[{HI}] x", "messages is not valid JSON"),
]


@pytest.mark.parametrize(("messages", "error"), BAD)
def test_errors_read_as_a_whole_read_words_them(smol: pyshim.Model, messages: str, error: str) -> None:
    """An invalid array whose first message the handle has cached is reported as a handle that
    never saw it reports it, and the next call is still right."""
    warm = [{"role": "user", "content": "hi"}]
    prepare(smol, warm)
    with pytest.raises(pyshim.ShimError, match=error):
        raw(smol, messages)
    assert prepare(smol, warm)["n_messages_reused"] == 1


def test_text_the_element_scanner_must_follow(smol: pyshim.Model) -> None:
    """Strings holding brackets, quotes, backslashes and escapes; odd spacing between elements;
    and invalid JSON inside a cached array, which the whole read words."""
    tricky = ['a "quoted" {brace} [bracket] \\ back\\slash', "}]},{", "\\", "\u00e9\u65e5\U0001f642", '"]']
    conv = [{"role": "user", "content": t} for t in tricky]
    text_ = "[ \n" + " ,\t".join(json.dumps(c) for c in conv) + " \r\n]"
    for _ in range(2):
        r = raw(smol, text_)
        assert r["finish_reason"] == "prepare_only"
    assert r["n_messages_reused"] == len(conv)
    with pytest.raises(pyshim.ShimError, match="messages is not valid JSON"):
        raw(smol, text_[: -len(" \r\n]")] + ", {]")


def raw(m: pyshim.Model, messages: str) -> dict[str, Any]:
    """A call with the messages' JSON text as given."""
    options = json.dumps({"max_tokens": 1, "_test": CHECK}).encode()
    return take_json(lib().el_generate(m.handle, messages.encode(), ffi.NULL, options))


def test_messages_common_needs_normalised(smol: pyshim.Model) -> None:
    """OpenAI allows a tool call without "type" and an assistant message with tool calls and no
    "content"; both are read as common/ wants them, from the cache as from the whole read."""
    conv = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert prepare(smol, conv, [WEATHER_TOOL])["n_messages_reused"] == 0
    assert prepare(smol, conv, [WEATHER_TOOL])["n_messages_reused"] == len(conv)


# A template that writes to the messages it renders: each render must see the caller's messages,
# not what an earlier render wrote into values shared between renders
# (native/patches/common-shared-message-values.patch refuses the write; the call renders again
# with values of its own).
WRITES = (
    "{%- for m in messages %}{%- set m.content = (m.content or '') + '!' %}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_a_template_that_writes_to_a_message_renders_each_call_afresh() -> None:
    rng = random.Random("writes")
    conv = [{"role": "user", "content": text(rng, 5)}]
    with pyshim.Model(model_path(SMOL), n_ctx=4096, chat_template=WRITES) as m:
        for _ in range(3):
            got = prepare(m, conv)["prepared"]["prompt"]
            want = "".join(f"<|im_start|>{x['role']}\n{x['content']}!<|im_end|>\n" for x in conv)
            assert got == want + "<|im_start|>assistant\n"
            conv = [*conv, {"role": "assistant", "content": text(rng, 4)}, {"role": "user", "content": text(rng, 4)}]


def test_a_session_never_takes_another_sessions_messages() -> None:
    """el_shim.h: nothing a call reports depends on another session's prompts. The same messages
    sent by a second session are read and rendered afresh; el_forget drops what a session read."""
    rng = random.Random("sessions")
    conv = [{"role": "system", "content": text(rng, 20)}, {"role": "user", "content": text(rng, 10)}]
    conv += [{"role": "assistant", "content": text(rng, 10)}, {"role": "user", "content": text(rng, 10)}]
    with pyshim.Model(model_path(SMOL), n_ctx=4096, n_seq=2) as m:
        assert prepare(m, conv, session="a")["n_messages_reused"] == 0
        other = prepare(m, conv, session="b")
        assert (other["n_messages_reused"], other["n_render_reused"]) == (0, 0)
        assert prepare(m, conv, session="a")["n_messages_reused"] == len(conv)
        m.forget("a")
        assert prepare(m, conv, session="a")["n_messages_reused"] == 0
        assert prepare(m, conv, session="b")["n_messages_reused"] == len(conv)


def test_a_sessions_next_read_keeps_only_the_messages_it_repeats() -> None:
    """A call gives its messages back to the handle once it has rendered them, and its session's
    next read keeps each leading message whose number in the cache is unchanged instead of
    copying it again (MessageCache::give_back). Whatever the next conversation does to the last
    one (append, edit an early message, drop the last ones, swap two, repeat itself), with another
    session's calls in between, each read equals a whole read (check_messages). Keeping the given
    back messages by their place alone turns the edit red."""
    rng = random.Random("given-back")

    def turn(n: int) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": text(rng, n)}, {"role": "user", "content": text(rng, n)}]

    conv = [{"role": "system", "content": text(rng, 20)}, {"role": "user", "content": text(rng, 8)}, *turn(8), *turn(8)]
    edited = [dict(x) for x in conv]
    edited[1]["content"] = "Edited. " + conv[1]["content"]
    swapped = [conv[0], conv[3], conv[2], conv[1], *conv[4:]]
    other = [{"role": "user", "content": text(rng, 12)}]
    steps = [conv, [*conv, *turn(6)], edited, conv[:3], conv, swapped, conv, conv]
    with pyshim.Model(model_path(SMOL), n_ctx=4096, n_seq=2) as m:
        for step in steps:
            prepare(m, step, session="a")  # check_messages: fails the call where they differ
            prepare(m, [*other, *turn(4)[1:]], session="b")
