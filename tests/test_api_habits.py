"""The in-process API takes what users bring from OpenAI's client and llama-cpp-python
(``pyshim.habits``), names an unknown key with the nearest known one, answers in OpenAI's shape
on request, and every public signature can be read by ``typing.get_type_hints``."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import typing

import pytest
from conftest import SMOL, model_path, user

import pyshim
from pyshim import habits


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: the city name.
    """
    return f"sunny in {city}"


def test_openai_fields_are_mapped_dropped_or_refused(smol: pyshim.Model) -> None:
    r = smol.generate(user("Say hi."), max_completion_tokens=3, n=1, user="u-1", metadata={"k": "v"}, model="x")
    assert r["n_decoded"] == 3
    with pytest.raises(pyshim.InvalidRequest, match="n=2"):
        smol.generate(user("Say hi."), n=2)
    with pytest.raises(pyshim.InvalidRequest, match=r"Model\.stream"):
        smol.generate(user("Say hi."), stream=True)
    with pytest.raises(pyshim.InvalidRequest, match="disagree"):
        smol.generate(user("Say hi."), max_tokens=3, max_completion_tokens=4)


def test_an_unknown_key_names_the_nearest_known_one(smol: pyshim.Model) -> None:
    with pytest.raises(pyshim.InvalidRequest, match='did you mean "temperature"') as e:
        smol.generate(user("Say hi."), temprature=0)
    assert "known keys:" in str(e.value) and "_test" not in str(e.value)
    with pytest.raises(pyshim.ModelLoadError, match='did you mean "n_ctx"'):
        pyshim.Model(SMOL, n_ctxx=512)
    with pytest.raises(pyshim.InvalidRequest) as e:
        smol.generate(user("Say hi."), zzzz=1)
    assert "did you mean" not in str(e.value)


def test_python_functions_are_tools_for_generate(qwen: pyshim.Model) -> None:
    r = qwen.generate(user("What is the weather in Paris?"), [get_weather], max_tokens=60)
    assert [c["function"]["name"] for c in r["tool_calls"]] == ["get_weather"]


def test_llama_cpp_python_arguments_are_mapped_or_explained() -> None:
    with pyshim.Model(model_path=model_path(SMOL), n_ctx=512, verbose=False, embedding=True) as m:
        assert m.config["log"] is False and m.stats()["n_ctx"] == 512
    with pytest.raises(pyshim.InvalidRequest, match="chat_template"):
        pyshim.Model(model_path=model_path(SMOL), chat_format="chatml")
    with pytest.raises(pyshim.InvalidRequest, match="disagree"):
        habits.open_config("a.gguf", {"model_path": "b.gguf"})


def test_chat_completion_is_the_openai_packages_own_type(smol: pyshim.Model) -> None:
    openai_types = pytest.importorskip("openai.types.chat")
    c = smol.chat_completion(user("Say hi."), max_tokens=4)
    assert isinstance(c, openai_types.ChatCompletion)
    assert c.choices[0].finish_reason == "length" and c.usage is not None and c.usage.completion_tokens == 4
    assert c.model == model_path(SMOL).name.removesuffix(".gguf")


PUBLIC = ["pyshim", "pyshim.model", "pyshim.aio", "pyshim.agent", "pyshim.tools", "pyshim.models", "pyshim.errors",
          "pyshim.habits", "pyshim.server", "pyshim.metrics", "pyshim.repeats"]  # fmt: skip


def test_every_public_signature_has_readable_type_hints() -> None:
    failures = []
    for name in PUBLIC:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]:
            obj = getattr(module, attr)
            targets = [obj]
            if inspect.isclass(obj):
                targets += [v for k, v in vars(obj).items() if not k.startswith("_") or k == "__init__"]
            for t in targets:
                t = t.__func__ if isinstance(t, (staticmethod, classmethod)) else t
                t = t.fget if isinstance(t, property) else t
                if callable(t) and hasattr(t, "__annotations__"):
                    try:
                        typing.get_type_hints(t)
                    except Exception as e:
                        failures.append(f"{name}.{attr}: {getattr(t, '__name__', t)}: {e!r}")
    assert failures == []


def test_errors_in_pythons_habits(smol: pyshim.Model, tmp_path: pathlib.Path) -> None:
    """Issue 57, item 7: a missing file is a FileNotFoundError, an unknown keyword a TypeError,
    and a string is one user message (as Agent.run takes it), not a list of characters."""
    missing = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError) as e:
        pyshim.Model(missing)
    assert isinstance(e.value, pyshim.ModelLoadError) and e.value.filename == str(missing)
    with pytest.raises(TypeError, match='unknown config key "n_context"') as t:
        pyshim.Model(SMOL, n_context=512)
    assert isinstance(t.value, pyshim.InvalidConfig)
    r = smol.generate("Say hi.", max_tokens=2)
    assert r["n_prompt"] == smol.generate(user("Say hi."), max_tokens=2)["n_prompt"]


def test_repetition_penalties_go_through_llama_cpps_sampler(smol: pyshim.Model) -> None:
    """Issue 57, item 4: repeat_penalty (llama-cpp-python's), frequency_penalty and
    presence_penalty (OpenAI's) are llama.cpp's penalties sampler, greedy included: a prompt the
    model answers by looping repeats itself less with them."""
    ask = user("Repeat after me: hello hello hello hello hello hello hello hello")
    plain = smol.generate(ask, max_tokens=48, temperature=0, ignore_eos=True)["content"]
    # without a penalty it loops: every "hello" of 48 tokens ("hello," is two tokens)
    assert plain.lower().count("hello") >= 20
    for options in ({"repeat_penalty": 1.5}, {"frequency_penalty": 1.5}, {"presence_penalty": 1.5}):
        got = smol.generate(ask, max_tokens=48, temperature=0, ignore_eos=True, **options)
        assert got["content"].lower().count("hello") < 15, (options, got["content"])
        assert got["n_argmax"] == 0  # the greedy fast path would skip the penalties
    with pytest.raises(pyshim.InvalidRequest, match="frequency_penalty"):
        smol.generate(ask, max_tokens=2, frequency_penalty=3.0)


def test_response_format_takes_a_pydantic_model_or_a_dataclass(qwen: pyshim.Model) -> None:
    """Issue 57, item 2: the type is the schema, and the answer comes back parsed; an answer cut
    at max_tokens keeps its text and is not parsed."""
    import dataclasses

    import pydantic

    class City(pydantic.BaseModel):
        name: str
        country: str

    @dataclasses.dataclass
    class Point:
        x: int
        y: int

    ask = user("Name a large city in France, as JSON.")
    r = qwen.generate(ask, response_format=City, max_tokens=60, temperature=0)
    assert isinstance(r["parsed"], City) and r["parsed"].name, r
    p = qwen.generate(user("A point with x=3 and y=4, as JSON."), response_format=Point, max_tokens=40, temperature=0)
    assert p["parsed"] == Point(3, 4), p
    cut = qwen.generate(ask, response_format=City, max_tokens=3, temperature=0)
    assert cut["finish_reason"] == "length" and cut["parsed"] is None
    with qwen.stream(ask, response_format=City, max_tokens=60, temperature=0) as s:
        for _ in s:
            pass
    assert s.result is not None and isinstance(s.result["parsed"], City)


def test_the_typed_options_are_the_librarys() -> None:
    """GenerateOptions names every option el_generate takes (native/request_options.cpp), so that a
    type checker accepts each and refuses a typo, as the library does at run time."""
    import re
    import typing
    from pathlib import Path

    from pyshim.shapes import GenerateOptions

    source = (Path(__file__).resolve().parent.parent / "native" / "request_options.cpp").read_text()
    listed = source.split("reject_unknown_keys(in.opt, {", 1)[1].split("}", 1)[0]
    native = set(re.findall(r'"(\w+)"', listed))
    typed = set(typing.get_type_hints(GenerateOptions))
    assert native <= typed, native - typed
    from pyshim.habits import OPENAI_IGNORED, OPENAI_RENAMES

    # OpenAI's spellings, typed too: each mapped or dropped by pyshim.habits' one table
    assert typed - native == OPENAI_IGNORED | set(OPENAI_RENAMES) | {"n"}
