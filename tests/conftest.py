"""Shared fixtures: real catalogue models, opened once per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import pyshim
from pyshim import models

ROOT = Path(__file__).resolve().parent.parent
QWEN = "qwen2.5-coder-0.5b-instruct"
GEMMA = "gemma-3-270m"
SMOL = "smollm2-135m-instruct"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
        },
    },
}


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def model_path(spec: str) -> Path:
    """A catalogue model by name, or "tiny:<kind>" for a generated one (tests/tiny_models.py)."""
    if spec.startswith("tiny:"):
        from tiny_models import tiny_model

        return tiny_model(spec.removeprefix("tiny:"))
    return models.path(spec)


@pytest.fixture(scope="session")
def qwen() -> Iterator[pyshim.Model]:
    with pyshim.Model(QWEN, n_ctx=4096, temperature=0) as m:
        yield m


@pytest.fixture(scope="session")
def smol() -> Iterator[pyshim.Model]:
    with pyshim.Model(SMOL, n_ctx=2048, temperature=0) as m:
        yield m


@pytest.fixture(scope="session")
def gemma() -> Iterator[pyshim.Model]:
    with pyshim.Model(GEMMA, n_ctx=4096, temperature=0) as m:
        yield m


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    return models.path(QWEN)
