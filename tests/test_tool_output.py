"""What the model sees of a tool's return value (``pyshim.tools.tool_output``): JSON the way a
user would write it, never a ``repr`` inside a JSON string."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import pathlib
import uuid
from typing import Any, NamedTuple

import numpy as np
import pytest

from pyshim.tools import tool_output


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Meeting:
    title: str
    at: datetime.datetime
    people: set[str]


class Point(NamedTuple):
    x: int
    y: int


WHEN = datetime.datetime(2025, 3, 4, 9, 0, 0)


@pytest.mark.parametrize(
    ("value", "seen"),
    [
        ("plain text", "plain text"),
        (WHEN, "2025-03-04T09:00:00"),
        (datetime.date(2025, 3, 4), "2025-03-04"),
        (Colour.RED, "red"),
        (42, "42"),
        (None, "null"),
        ({"a": 1.5, 2: [True]}, '{"a": 1.5, "2": [true]}'),
        ({3, 1, 2}, "[1, 2, 3]"),
        (Point(1, 2), '{"x": 1, "y": 2}'),
        (decimal.Decimal("12.50"), "12.5"),
        (datetime.timedelta(minutes=2), "120.0"),
        (pathlib.PurePosixPath("/tmp/x"), "/tmp/x"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (b"bytes", "bytes"),
        (np.float32(0.5), "0.5"),
        (np.int64(7), "7"),
        (np.arange(3), "[0, 1, 2]"),
        ((x for x in "ab"), '["a", "b"]'),
    ],
    ids=repr,
)
def test_values_read_as_a_user_would_write_them(value: Any, seen: str) -> None:
    assert tool_output(value) == seen


def test_a_dataclass_is_an_object_with_its_nested_values_converted() -> None:
    out = json.loads(tool_output(Meeting("standup", WHEN, {"bo", "al"})))
    assert out == {"title": "standup", "at": "2025-03-04T09:00:00", "people": ["al", "bo"]}


def test_a_pydantic_model_is_its_json_dump() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Booking(pydantic.BaseModel):
        room: str
        at: datetime.datetime

    assert json.loads(tool_output(Booking(room="A", at=WHEN))) == {"room": "A", "at": "2025-03-04T09:00:00"}


def test_anything_else_is_its_text() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    assert tool_output(Opaque()) == "opaque!"
    assert tool_output([Opaque()]) == '["opaque!"]'
