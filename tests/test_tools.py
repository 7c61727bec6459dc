"""Python functions become OpenAI tool schemas from their type hints and docstrings."""

from __future__ import annotations

from typing import Literal, Optional

import pytest

from pyshim.tools import as_tool, function_schema


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
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert props["mode"]["enum"] == ["fast", "exact"] and props["mode"]["default"] == "fast"
    assert fn["parameters"]["required"] == ["query"]


def test_optional_without_default_is_not_required_and_rest_docstring() -> None:
    fn = function_schema(legacy)["function"]
    props = fn["parameters"]["properties"]
    assert set(props) == {"path", "weight", "flags"}
    assert props["path"] == {"type": "string", "description": "a path, or None"}
    assert props["weight"] == {"type": "number", "description": "how heavy"}
    assert props["flags"] == {"type": "object"}
    assert fn["parameters"]["required"] == ["weight", "flags"]


def test_raw_openai_dicts_are_accepted_and_bad_ones_refused() -> None:
    raw = {"type": "function", "function": {"name": "x", "parameters": {"type": "object", "properties": {}}}}
    t = as_tool(raw)
    assert t.name == "x" and t.fn is None and t.schema["function"]["name"] == "x"
    with pytest.raises(ValueError):
        as_tool({"type": "retrieval"})
    with pytest.raises(TypeError):
        as_tool(42)  # type: ignore[arg-type]
