"""Python functions as OpenAI tools: the schema comes from type hints and the docstring."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

__all__ = ["Tool", "as_tool", "function_schema"]


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its OpenAI schema and, for Python tools, the function."""

    name: str
    schema: dict[str, Any]
    fn: Callable[..., Any] | None = None


def _json_type(hint: Any) -> tuple[dict[str, Any], bool]:
    """JSON schema for a type hint, and whether None is allowed."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        schema, _ = _json_type(rest[0]) if len(rest) == 1 else ({"anyOf": [_json_type(a)[0] for a in rest]}, False)
        return schema, len(rest) < len(args)
    if origin is Literal:
        return {"enum": list(args)}, False
    if origin in (list, tuple, set, frozenset, typing.Sequence, typing.List):  # noqa: UP006
        return ({"type": "array", "items": _json_type(args[0])[0]} if args else {"type": "array"}), False
    if origin in (dict, typing.Dict, Mapping):  # noqa: UP006
        return {"type": "object"}, False
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}
    if hint in simple:
        return {"type": simple[hint]}, False
    if hint is type(None):
        return {"type": "null"}, True
    return {}, False  # Any or unknown: accept any JSON value


_PARAM_LINE = re.compile(r"^\s*(?::param\s+)?\**(\w+)\**\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """The summary, and per-parameter descriptions from a Google (Args:) or reST (:param x:) docstring."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    params: dict[str, str] = {}
    section = "summary"
    last: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:", "params:"):
            section, last = "args", None
            continue
        if stripped.lower().rstrip(":") in ("returns", "return", "raises", "yields", "examples", "example"):
            section = "other"
            continue
        m = _PARAM_LINE.match(line)
        if (section == "args" or stripped.startswith(":param")) and m:
            last = m.group(1)
            params[last] = m.group(2).strip()
        elif section == "args" and last and stripped and line.startswith((" ", "\t")):
            params[last] += " " + stripped
        elif section == "summary" and (stripped or summary):
            summary.append(stripped)
    text = " ".join(s for s in summary if s).strip()
    return text, params


def function_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """The OpenAI tool schema of a function: defaults make a parameter optional."""
    hints = typing.get_type_hints(fn)
    description, docs = _docstring_parts(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema, nullable = _json_type(hints.get(pname, Any))
        schema = dict(schema)
        if pname in docs:
            schema["description"] = docs[pname]
        if param.default is not param.empty:
            if param.default is None or isinstance(param.default, (str, int, float, bool)):
                schema["default"] = param.default
        elif not nullable:
            required.append(pname)
        properties[pname] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {
        "type": "function",
        "function": {"name": name or fn.__name__, "description": description, "parameters": parameters},
    }


def as_tool(tool: Callable[..., Any] | Mapping[str, Any] | Tool) -> Tool:
    """A Tool from a Python function, an OpenAI tool dict, or a Tool."""
    if isinstance(tool, Tool):
        return tool
    if isinstance(tool, Mapping):
        fn = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(fn, Mapping) or not fn.get("name"):
            raise ValueError(f"not an OpenAI tool: {tool!r}")
        return Tool(str(fn["name"]), {"type": "function", **dict(tool)}, None)
    if callable(tool):
        schema = function_schema(tool)
        return Tool(schema["function"]["name"], schema, tool)
    raise TypeError(f"a tool is a function, an OpenAI tool dict or a Tool, not {type(tool).__name__}")
