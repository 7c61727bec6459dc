"""Python functions become OpenAI tool schemas from their type hints and docstrings."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import json
import math
from typing import TYPE_CHECKING, Literal, Optional

if TYPE_CHECKING:
    from decimal import Decimal

import pydantic
import pytest

import pyshim
from pyshim._lib import ffi, lib
from pyshim.errors import InvalidTool, ShimError
from pyshim.tools import Tool, as_tool, as_tools, function_schema


def search(query: str, limit: int = 5, tags: list[str] | None = None, mode: Literal["fast", "exact"] = "fast") -> str:
    """Search the notes.

    Args:
        query: what to look for.
        limit: how many hits to return
            at most.
        tags: only notes with these tags.
        mode: the matching strategy.
    """
    return query


def legacy(path: Optional[str], weight: float, flags: dict, *args: int, **kw: str) -> None:  # noqa: UP045
    """Old style.

    :param path: a path, or None
    :param weight: how heavy
    """


def test_schema_from_hints_and_google_docstring() -> None:
    s = function_schema(search)
    assert s["type"] == "function"
    fn = s["function"]
    assert fn["name"] == "search"
    assert fn["description"] == "Search the notes."
    props = fn["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for."}
    assert props["limit"] == {"type": "integer", "description": "how many hits to return at most.", "default": 5}
    # `= None` keeps None in the type: the model may send null (issue 57), as well as leave it out
    assert props["tags"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert props["mode"]["enum"] == ["fast", "exact"] and props["mode"]["default"] == "fast"
    assert fn["parameters"]["required"] == ["query"]


def test_optional_without_default_is_required_and_nullable_and_rest_docstring() -> None:
    fn = function_schema(legacy)["function"]
    props = fn["parameters"]["properties"]
    assert set(props) == {"path", "weight", "flags"}
    assert props["path"] == {"type": ["string", "null"], "description": "a path, or None"}
    assert props["weight"] == {"type": "number", "description": "how heavy"}
    assert props["flags"] == {"type": "object"}
    # the function cannot be called without `path`, so the model must send it (null is allowed)
    assert fn["parameters"]["required"] == ["path", "weight", "flags"]


def test_raw_openai_dicts_are_accepted_and_bad_ones_refused() -> None:
    raw = {"type": "function", "function": {"name": "x", "parameters": {"type": "object", "properties": {}}}}
    t = as_tool(raw)
    assert t.name == "x" and t.fn is None and t.schema["function"]["name"] == "x"
    with pytest.raises(InvalidTool):
        as_tool({"type": "retrieval"})
    with pytest.raises(InvalidTool):
        as_tool(42)  # type: ignore[arg-type]


# -- annotations that cannot be resolved, and callables that are not plain functions ----------


def typed_elsewhere(amount: Decimal, note: str) -> Later:  # noqa: F821
    """Uses a TYPE_CHECKING import and a forward-referenced return type."""
    return amount


def test_unresolvable_annotations_accept_any_json_and_the_return_is_never_resolved() -> None:
    fn = function_schema(typed_elsewhere)["function"]
    assert fn["parameters"]["properties"] == {"amount": {}, "note": {"type": "string"}}
    assert fn["parameters"]["required"] == ["amount", "note"]


def scale(value: float, factor: float = 2.0) -> float:
    """Scale a value.

    Args:
        value: the value.
        factor: by how much.
    """
    return value * factor


class Counter:
    """Count words."""

    def __call__(self, text: str, minimum: int = 1) -> int:
        return len(text.split()) if len(text.split()) >= minimum else 0


def test_partial_and_callable_instances() -> None:
    t = as_tool(functools.partial(scale, factor=3.0))
    assert t.name == "scale"
    assert t.schema["function"]["description"] == "Scale a value."
    assert t.schema["function"]["parameters"] == {
        "type": "object",
        "properties": {"value": {"type": "number", "description": "the value."}},
        "required": ["value"],
    }
    assert t.call({"value": 2}) == 6.0
    c = as_tool(Counter())
    assert c.name == "Counter" and c.schema["function"]["description"] == "Count words."
    assert c.schema["function"]["parameters"]["required"] == ["text"]
    assert c.call({"text": "a b c"}) == 3


def only_positional(a: int, b: int, /, c: int = 0) -> int:
    """Positional-only."""
    return a * 100 + b * 10 + c


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


def paint(color: Color, where: tuple[str, int], shade: Color = Color.RED) -> str:
    """Paint."""
    assert isinstance(color, Color) and isinstance(where, tuple) and isinstance(shade, Color)
    return f"{color.name} {where[0]} {where[1]} {shade.name}"


def test_positional_only_parameters_are_passed_by_position() -> None:
    t = as_tool(only_positional)
    assert t.schema["function"]["parameters"]["required"] == ["a", "b"]
    assert t.call({"a": 1, "b": 2, "c": 3}) == 123
    assert t.call({"b": 2, "a": 1}) == 120


def test_positional_only_with_default_is_refused_naming_the_parameter() -> None:
    def f(a: int = 1, /) -> int:
        return a

    with pytest.raises(InvalidTool, match="'a'"):
        as_tool(f)


def test_enum_and_tuple_schemas_and_values_come_back_typed() -> None:
    t = as_tool(paint)
    props = t.schema["function"]["parameters"]["properties"]
    assert props["color"] == {"enum": ["red", "green"]}
    assert props["shade"] == {"enum": ["red", "green"], "default": "red"}
    assert props["where"] == {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert t.call({"color": "green", "where": ["wall", 3]}) == "GREEN wall 3 RED"
    with pytest.raises(Exception, match="color"):
        t.call({"color": "blue", "where": ["wall", 3]})


def test_non_json_defaults_are_left_out_and_the_tools_stay_valid_json() -> None:
    def bounded(x: float, high: float = math.inf, low: float = math.nan, sep: object = object()) -> float:
        """Clamp."""
        return x

    schema = function_schema(bounded)
    json.dumps(schema, allow_nan=False)  # would raise on Infinity / NaN
    props = schema["function"]["parameters"]["properties"]
    assert props["high"] == {"type": "number"} and props["low"] == {"type": "number"}
    assert "default" not in props["sep"]
    assert schema["function"]["parameters"]["required"] == ["x"]


def test_invalid_and_duplicate_names_are_refused_clearly() -> None:
    with pytest.raises(InvalidTool, match=r"<lambda>.*name="):
        as_tool(lambda x: x)
    assert as_tool(Tool.from_function(lambda x: x, name="echo")).name == "echo"

    class A:
        def search(self, q: str) -> str:
            return q

    class B:
        def search(self, q: str) -> str:
            return q

    with pytest.raises(InvalidTool, match=r"two tools are named 'search'.*A\.search.*B\.search"):
        as_tools([A().search, B().search])
    assert issubclass(InvalidTool, ShimError)


def test_a_request_with_nan_or_infinity_is_refused_before_it_reaches_the_library() -> None:
    from pyshim._lib import encode
    from pyshim.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="JSON"):
        encode([{"type": "function", "function": {"name": "f", "parameters": {"default": math.inf}}}])


# -- issue 57, item 3: tools from functions never degrade silently ------------------------------


class Address(pydantic.BaseModel):
    city: str
    zip: int


@dataclasses.dataclass
class Window:
    start: datetime.date
    days: int = 1


def book(when: datetime.datetime, where: Address, span: Window, tags: Optional[list[str]] = None) -> str:  # noqa: UP045
    return f"{when.year} {where.city} {span.start.month} {tags}"


def test_dates_models_and_dataclasses_keep_their_types_and_come_back_typed() -> None:
    params = function_schema(book)["function"]["parameters"]["properties"]
    assert params["when"] == {"type": "string", "format": "date-time"}
    assert params["where"]["properties"]["zip"]["type"] == "integer" and "$defs" not in json.dumps(params)
    assert params["span"]["properties"]["start"] == {"type": "string", "format": "date"}
    assert {"type": "null"} in params["tags"]["anyOf"]  # Optional[...] = None: nullable
    tool = as_tool(book)
    args = {"when": "2026-12-05T10:00:00", "where": {"city": "Lyon", "zip": 69001}, "span": {"start": "2027-01-02"},
            "tags": None}  # fmt: skip
    assert tool.call(args) == "2026 Lyon 1 None"


def test_what_cannot_be_typed_is_said_naming_the_parameter() -> None:
    def loose(a, *rest, b: complex = 1j, **extra):  # type: ignore[no-untyped-def]
        return a

    with pytest.warns(UserWarning) as seen:
        function_schema(loose)
    said = " ".join(str(w.message) for w in seen)
    assert "'a' has no type hint" in said and "*rest" in said and "**extra" in said and "'b'" in said


def test_a_dict_tool_with_a_bad_schema_or_name_is_refused_naming_its_place() -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
           "properties": {"city": {"type": "strin"}}}}}  # fmt: skip
    ok = {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}
    with pytest.raises(InvalidTool, match=r"tools\[1\].*'f'.*parameters\.properties\.city\.type"):
        as_tools([ok, bad])
    spaced = {"type": "function", "function": {"name": "get weather", "parameters": {"type": "object"}}}
    with pytest.raises(InvalidTool, match="not a valid tool name"):
        as_tools([spaced])


def test_generate_checks_dict_tools_up_front_and_so_does_the_library(smol: pyshim.Model) -> None:
    """Model.generate sends dict tools as given, but checked first (a typo in a schema named by
    tool and path, not by llama.cpp's grammar builder); the C ABI refuses a name with a space."""
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
           "properties": {"city": {"type": "strin"}}}}}  # fmt: skip
    with pytest.raises(InvalidTool, match=r"tools\[0\]: tool 'f': parameters\.properties\.city\.type"):
        smol.generate("hi", [bad], max_tokens=1)
    spaced = [{"type": "function", "function": {"name": "get weather", "parameters": {"type": "object"}}}]
    with pytest.raises(InvalidTool, match="not a valid tool name"):
        smol.generate("hi", spaced, max_tokens=1)
    ptr = lib().el_generate(smol.handle, b'[{"role": "user", "content": "hi"}]', json.dumps(spaced).encode(), ffi.NULL)
    answer = json.loads(ffi.string(ptr).decode())
    lib().el_free(ptr)
    assert answer["code"] == 2 and 'tools[0].function.name "get weather"' in answer["error"]
