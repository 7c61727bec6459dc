"""Python callables as OpenAI tools: the schema from type hints and the docstring, and the call back.

The schema promises the model exactly how the function will be called: a parameter
without a default is required (``Optional[int]`` makes it nullable, not optional),
positional-only parameters are passed by position, ``Enum`` values come back as the
``Enum``, ``tuple`` arrays as tuples. Anything that cannot keep that promise is
refused at ``as_tool`` with an ``InvalidTool`` naming the tool and the parameter.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import functools
import inspect
import json
import math
import pathlib
import re
import sys
import types
import typing
import uuid
import warnings
from collections import abc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union, cast, get_args, get_origin

import jsonschema

from .errors import InvalidTool

__all__ = ["Tool", "ToolArgumentError", "as_tool", "function_schema", "jsonable", "tool_error", "tool_output"]

#: What OpenAI-style APIs and chat templates accept as a function name.
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")

Convert = Callable[[Any], Any]


class ToolArgumentError(Exception):
    """Arguments from the model that do not fit the function (reported back to the model)."""


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its OpenAI schema and, for Python tools, the callable."""

    name: str
    schema: dict[str, Any]
    fn: Callable[..., Any] | None = None
    #: Parameters passed by position (positional-only ones), in order.
    positional: tuple[str, ...] = ()
    #: Per-parameter conversion of the JSON value (to an Enum, a tuple, ...).
    converters: Mapping[str, Convert] = field(default_factory=dict)

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        """A tool from a function, method, ``functools.partial`` or callable object; ``name`` overrides its name."""
        return _tool_from_callable(fn, name)

    def call(self, arguments: Mapping[str, Any]) -> Any:
        """Call the function with the model's arguments (may return an awaitable for ``async def`` tools)."""
        if self.fn is None:
            raise ToolArgumentError(f"{self.name} has no Python function to run")
        kwargs = dict(arguments)
        for pname, convert in self.converters.items():
            if kwargs.get(pname) is not None:
                try:
                    kwargs[pname] = convert(kwargs[pname])
                except (TypeError, ValueError) as e:
                    raise ToolArgumentError(f"{pname}: {e}") from e
        missing = [p for p in self.positional if p not in kwargs]
        if missing:
            raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
        args = [kwargs.pop(p) for p in self.positional]
        return self.fn(*args, **kwargs)


# -- type hints to JSON schema ------------------------------------------------


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if set(schema) == {"type"} and isinstance(schema["type"], str):
        return {"type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]} if schema else {}


def _enum_schema(hint: type[enum.Enum]) -> tuple[dict[str, Any], Convert | None]:
    values = [m.value for m in hint]
    if not all(isinstance(v, (str, int, float, bool)) for v in values):
        raise TypeError(f"Enum {hint.__name__} has values that are not JSON strings or numbers")
    return {"enum": values}, hint


def _tuple_schema(args: tuple[Any, ...]) -> tuple[dict[str, Any], Convert | None]:
    if not args or (len(args) == 2 and args[1] is Ellipsis):
        items = {"items": _json_type(args[0])[0]} if args else {}
        return {"type": "array", **items}, tuple
    parts = [_json_type(a) for a in args]
    converters = [c for _, c in parts]

    def convert(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)) or len(value) != len(parts):
            raise ValueError(f"expected an array of {len(parts)} items")
        return tuple(c(v) if c is not None and v is not None else v for c, v in zip(converters, value, strict=True))

    n = len(parts)
    return {"type": "array", "prefixItems": [s for s, _ in parts], "minItems": n, "maxItems": n}, convert


def _json_type(hint: Any) -> tuple[dict[str, Any], Convert | None]:
    """JSON schema for a type hint, and how to turn the JSON value back into that type (None: as is)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            schema, convert = _json_type(rest[0])
        else:
            schema, convert = {"anyOf": [_json_type(a)[0] for a in rest]}, None
        return (_nullable(schema) if len(rest) < len(args) else schema), convert
    if origin is Literal:
        return {"enum": list(args)}, None
    if origin is tuple or hint is tuple:
        return _tuple_schema(args)
    if origin in (list, set, frozenset, abc.Sequence, abc.Iterable, abc.Collection):
        item = {"items": _json_type(args[0])[0]} if args else {}
        return {"type": "array", **item}, (origin if origin in (set, frozenset) else None)
    if origin in (dict, abc.Mapping):
        return {"type": "object"}, None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema(hint)
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}
    if hint in simple:
        return {"type": simple[hint]}, None
    if hint is type(None):
        return {"type": "null"}, None
    if hint in _STRING_FORMATS:
        fmt, convert = _STRING_FORMATS[hint]
        return {"type": "string", "format": fmt}, convert
    if isinstance(hint, type) and hasattr(hint, "model_json_schema") and hasattr(hint, "model_validate"):
        return _inline_refs(hint.model_json_schema()), hint.model_validate  # a pydantic model
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_schema(hint)
    return {}, None  # Any, or a type JSON cannot name: accept any JSON value (_parameters warns)


# Types whose JSON is a string in a format a grammar enforces (native/grammar_limits.h), and how
# the string is read back.
_STRING_FORMATS: dict[Any, tuple[str, Convert]] = {
    datetime.datetime: ("date-time", datetime.datetime.fromisoformat),
    datetime.date: ("date", datetime.date.fromisoformat),
    datetime.time: ("time", datetime.time.fromisoformat),
    uuid.UUID: ("uuid", uuid.UUID),
}


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic schema with its ``$defs`` written in place of each ``$ref`` (a tool parameter's
    refs would otherwise point at the tool's root); a recursive model keeps the rest as any value."""
    defs = schema.get("$defs", {})

    def inline(node: Any, seen: frozenset[str]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                return {} if name in seen else inline(defs.get(name, {}), seen | {name})
            return {k: inline(v, seen) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [inline(v, seen) for v in node]
        return node

    out = inline(schema, frozenset())
    return out if isinstance(out, dict) else {}


def _dataclass_schema(kind: type) -> tuple[dict[str, Any], Convert | None]:
    """A dataclass parameter: the object its fields describe, built back into the dataclass."""
    properties, required, _, converters = _parameters(kind, kind.__name__)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected an object for {kind.__name__}")
        return kind(**{k: converters[k](v) if k in converters and v is not None else v for k, v in value.items()})

    return schema, convert


def _without_none(hint: Any) -> Any:
    if get_origin(hint) not in (Union, types.UnionType):
        return hint
    rest = tuple(a for a in get_args(hint) if a is not type(None))
    return Union[rest] if rest else hint  # noqa: UP007


# -- the callable behind a tool -------------------------------------------------


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function whose annotations and docstring describe ``fn`` (a partial's function, an object's __call__)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not (inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn)) and callable(fn):
        call = getattr(type(fn), "__call__", None)  # noqa: B004
        if call is not None and not isinstance(fn, type):
            return cast(Callable[..., Any], call)
    return fn


def _default_name(fn: Callable[..., Any]) -> str:
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    name = getattr(target, "__name__", None)
    return name if isinstance(name, str) else type(target).__name__


def _doc(fn: Callable[..., Any]) -> str:
    """The docstring that describes ``fn``: its own, its partial's function's, or a callable object's
    ``__call__`` (else its class's)."""
    target = _unwrap(fn)
    own = getattr(target, "__doc__", None)
    if own:
        return inspect.cleandoc(own)
    if target is not fn and not isinstance(fn, functools.partial):
        return inspect.getdoc(type(fn)) or ""
    return ""


def _param_hints(fn: Callable[..., Any], names: list[str]) -> dict[str, Any]:
    """Each parameter's annotation, evaluated alone: one that cannot be resolved (a TYPE_CHECKING import,
    a forward reference) becomes ``Any`` instead of failing the whole tool. The return annotation is never
    evaluated: the schema does not use it."""
    target = _unwrap(fn)
    raw = inspect.get_annotations(target) if callable(target) else {}
    globalns = getattr(inspect.unwrap(target), "__globals__", None)
    if globalns is None:  # a class (a dataclass as a parameter's type): its module's names
        globalns = vars(sys.modules.get(getattr(target, "__module__", ""), types.ModuleType("_")))
    hints: dict[str, Any] = {}
    for pname in names:
        if pname not in raw:
            continue
        holder = types.SimpleNamespace(__annotations__={pname: raw[pname]})
        try:
            hints[pname] = typing.get_type_hints(holder, globalns=globalns)[pname]
        except Exception:  # NameError, TypeError, SyntaxError, ...: whatever it is, it is not JSON
            hints[pname] = Any
    return hints


def _json_default(value: Any) -> tuple[bool, Any]:
    """Whether a default can be shown to the model, and its JSON form (never NaN, Infinity or an object)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, float) and not math.isfinite(value):
        return False, None
    try:
        return True, json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return False, None


def _parameters(
    fn: Callable[..., Any], tool: str
) -> tuple[dict[str, Any], list[str], tuple[str, ...], dict[str, Convert]]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise InvalidTool(f"tool {tool!r}: cannot read its signature ({e})") from e
    bound = set(fn.keywords) if isinstance(fn, functools.partial) else set()
    params = [p for p in signature.parameters.values() if p.name not in bound]
    hints = _param_hints(fn, [p.name for p in params])
    _, docs = _docstring_parts(_doc(fn))
    properties: dict[str, Any] = {}
    required: list[str] = []
    positional: list[str] = []
    converters: dict[str, Convert] = {}
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            warnings.warn(f"tool {tool!r}: {star}{param.name} is not offered to the model", stacklevel=4)
            continue
        hint = hints.get(param.name, Any)
        if param.default is not param.empty and param.default is not None:
            hint = _without_none(hint)  # optional: the model leaves it out rather than sending null
        try:
            schema, convert = _json_type(hint)
        except TypeError as e:
            raise InvalidTool(f"tool {tool!r}, parameter {param.name!r}: {e}") from e
        if not schema and hint is not Any:
            warnings.warn(
                f"tool {tool!r}, parameter {param.name!r}: {hint!r} has no JSON schema; the model may send any value",
                stacklevel=4,
            )
        elif param.name not in hints:
            warnings.warn(
                f"tool {tool!r}, parameter {param.name!r} has no type hint; the model may send any value",
                stacklevel=4,
            )
        schema = dict(schema)
        if param.name in docs:
            schema["description"] = docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        else:
            shown, value = _json_default(param.default)
            if shown:
                schema["default"] = value
        if param.kind is param.POSITIONAL_ONLY:
            if param.default is not param.empty:
                raise InvalidTool(
                    f"tool {tool!r}, parameter {param.name!r}: a positional-only parameter with a default "
                    "cannot be left out by name; make it a normal parameter"
                )
            positional.append(param.name)
        if convert is not None:
            converters[param.name] = convert
        properties[param.name] = schema
    return properties, required, tuple(positional), converters


def function_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """The OpenAI tool schema of a callable: a default makes a parameter optional, ``None`` in its type nullable."""
    return _tool_from_callable(fn, name).schema


def _tool_from_callable(fn: Callable[..., Any], name: str | None) -> Tool:
    tool_name = name or _default_name(fn)
    if not NAME.match(tool_name):
        raise InvalidTool(
            f"{tool_name!r} is not a valid tool name (letters, digits, _ and -, at most 64): "
            "give it one with Tool.from_function(fn, name=...)"
        )
    properties, required, positional, converters = _parameters(fn, tool_name)
    description, _ = _docstring_parts(_doc(fn))
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    schema = {
        "type": "function",
        "function": {"name": tool_name, "description": description, "parameters": parameters},
    }
    return Tool(tool_name, schema, fn, positional, converters)


# -- docstrings ---------------------------------------------------------------------

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
            name: str = m.group(1)
            params[name] = m.group(2).strip()
            last = name
        elif section == "args" and last and stripped and line.startswith((" ", "\t")):
            params[last] += " " + stripped
        elif section == "summary" and (stripped or summary):
            summary.append(stripped)
    text = " ".join(s for s in summary if s).strip()
    return text, params


# -- anything to a Tool ---------------------------------------------------------------


def as_tool(tool: Callable[..., Any] | Mapping[str, Any] | Tool) -> Tool:
    """A Tool from a Python callable, an OpenAI tool dict, or a Tool; ``InvalidTool`` says why not."""
    if isinstance(tool, Tool):
        return tool
    if isinstance(tool, Mapping):
        fn = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(fn, Mapping) or not fn.get("name"):
            raise InvalidTool(f"not an OpenAI tool: {tool!r}")
        schema = {"type": "function", **dict(tool)}
        name = str(fn["name"])
        if not NAME.match(name):
            raise InvalidTool(f"{name!r} is not a valid tool name (letters, digits, _ and -, at most 64)")
        try:
            json.dumps(schema, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InvalidTool(f"tool {name!r}: its schema is not valid JSON ({e})") from e
        _check_schema(name, fn.get("parameters"))
        return Tool(name, schema, None)
    if callable(tool):
        return _tool_from_callable(tool, None)
    raise InvalidTool(f"a tool is a function, an OpenAI tool dict or a Tool, not {type(tool).__name__}")


def _check_schema(name: str, parameters: Any) -> None:
    """A tool's parameters must be a JSON schema (checked against the metaschema by jsonschema),
    so that a typo fails here, naming the tool and the place, not in llama.cpp's grammar builder."""
    if parameters is None:
        return
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as e:
        where = "parameters" + e.json_path.removeprefix("$")
        raise InvalidTool(f"tool {name!r}: {where} is not a valid JSON schema: {e.message}") from None


def as_tools(tools: Iterable[Callable[..., Any] | Mapping[str, Any] | Tool]) -> dict[str, Tool]:
    """Tools by name; two tools with one name are refused, naming both; an invalid one is named
    by its place in the list (``tools[i]``)."""
    by_name: dict[str, Tool] = {}
    checked: list[Tool] = []
    for i, raw in enumerate(tools):
        try:
            checked.append(as_tool(raw))
        except InvalidTool as e:
            raise InvalidTool(f"tools[{i}]: {e}") from e.__cause__
    for tool in checked:
        if tool.name in by_name:
            first, second = (_describe(t) for t in (by_name[tool.name], tool))
            raise InvalidTool(
                f"two tools are named {tool.name!r} ({first} and {second}): "
                "rename one with Tool.from_function(fn, name=...)"
            )
        by_name[tool.name] = tool
    return by_name


def _describe(tool: Tool) -> str:
    if tool.fn is None:
        return "a tool dict"
    target = _unwrap(tool.fn)
    return getattr(target, "__qualname__", None) or repr(tool.fn)


# -- what the model sees of a tool's return value ----------------------------------------------


def jsonable(value: Any) -> Any:
    """A tool's return value as plain JSON values, the way a user expects to see it rather than
    as its ``repr``: a dataclass, a pydantic model (``model_dump(mode="json")``), a named tuple or
    a mapping becomes an object; a list, tuple, set (sorted when it can be) or other iterable
    an array; an enum its value; a datetime, date or time its ISO 8601 text, a timedelta its
    seconds; a Decimal a number; a path or UUID its text; bytes their UTF-8 text, else base64;
    a numpy scalar or array (anything with ``tolist``) its Python value. Anything else: ``str``."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(model_dump := getattr(value, "model_dump", None)):
        return jsonable(model_dump(mode="json"))
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (pathlib.PurePath, uuid.UUID)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode()
    return _jsonable_container(value)


def _jsonable_container(value: Any) -> Any:
    if isinstance(value, tuple) and callable(asdict := getattr(value, "_asdict", None)):  # a named tuple
        return jsonable(asdict())
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if type(value).__module__ == "numpy" and callable(tolist := getattr(value, "tolist", None)):
        return jsonable(tolist())
    if isinstance(value, Iterable):
        return [jsonable(v) for v in value]
    return str(value)


def tool_output(value: Any) -> str:
    """What the model sees of a tool's return value: text as it is, anything else as JSON of
    ``jsonable(value)`` (so a datetime reads ``2025-03-04T09:00:00``, a dataclass an object)."""
    plain = jsonable(value)
    return plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)


def tool_error(name: str, e: Exception) -> str:
    """What the model sees when a tool call fails."""
    if isinstance(e, (TypeError, ToolArgumentError)):
        return f"error: bad arguments for {name}: {e}"
    return f"error: {type(e).__name__}: {e}"
