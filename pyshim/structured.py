"""``response_format`` given as a Python type: a pydantic model or a dataclass becomes the
json_schema the library enforces, and its answer comes back parsed, as the openai client's
``.parse()`` does (issue 57, item 2).

Invariant: ``parsed`` is set only from a whole answer (finish_reason "stop"); an answer cut at
``max_tokens`` or by the context keeps its text and gets ``parsed`` None, so a truncated JSON is
never handed on as if it were the object.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from .errors import InvalidRequest
from .shapes import Result
from .tools import function_schema

Parse = Callable[[str], Any]


def _schema_and_parse(kind: type) -> tuple[dict[str, Any], Parse]:
    if hasattr(kind, "model_json_schema") and hasattr(kind, "model_validate_json"):  # pydantic v2
        return kind.model_json_schema(), kind.model_validate_json
    if dataclasses.is_dataclass(kind):
        schema = function_schema(kind)["function"]["parameters"]
        return schema, lambda text: kind(**json.loads(text))
    raise InvalidRequest(
        f"response_format={kind.__name__}: a pydantic model, a dataclass or a response_format dict is expected"
    )


def prepare(options: Mapping[str, Any]) -> tuple[dict[str, Any], Parse | None]:
    """The options with a type in ``response_format`` turned into its json_schema, and how to
    parse the answer (None when ``response_format`` is not a type)."""
    kind = options.get("response_format")
    if not isinstance(kind, type):
        return dict(options), None
    schema, parse = _schema_and_parse(kind)
    fmt = {"type": "json_schema", "json_schema": {"name": kind.__name__, "schema": schema, "strict": True}}
    return {**options, "response_format": fmt}, parse


def attach(result: Result, parse: Parse | None) -> Result:
    """``result["parsed"]``: the answer as the type, when it is whole; None when it was cut."""
    if parse is not None:
        whole = result.get("finish_reason") == "stop" and not result.get("truncated")
        content = result.get("content")
        result["parsed"] = parse(content) if whole and content else None
    return result
