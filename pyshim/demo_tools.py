"""Harmless tools for the demo agent: arithmetic, unit conversion, reading a local file."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

__all__ = ["DEMO_TOOLS", "calculator", "convert_units", "read_file"]

_OPS: dict[type[ast.AST], Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return float(_OPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_eval(node.operand)))
    raise ValueError(f"unsupported expression: {ast.dump(node)[:60]}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: numbers with + - * / // % ** and parentheses, e.g. "(2 + 3) * 4".
    """
    value = _eval(ast.parse(expression, mode="eval"))
    return str(round(value, 10) if isinstance(value, float) else value)


# Units are whole words: under a grammar, greedy decoding picks among the allowed
# values token by token, and with "m" and "mi" both allowed a model that means "miles"
# writes "m" (the prefix) and closes the string. No value is a prefix of another here.
Unit = Literal["km", "miles", "meters", "feet", "kg", "pounds", "liters", "gallons", "celsius", "fahrenheit"]

_FACTORS = {
    ("km", "miles"): 0.621371,
    ("miles", "km"): 1.609344,
    ("meters", "feet"): 3.28084,
    ("feet", "meters"): 0.3048,
    ("kg", "pounds"): 2.20462,
    ("pounds", "kg"): 0.453592,
    ("liters", "gallons"): 0.264172,
    ("gallons", "liters"): 3.78541,
}


def convert_units(value: float, from_unit: Unit, to_unit: Unit) -> str:
    """Convert a quantity between units of length, mass, volume or temperature.

    Args:
        value: the quantity to convert.
        from_unit: the unit of value.
        to_unit: the unit wanted.
    """
    if (from_unit, to_unit) == ("celsius", "fahrenheit"):
        result = value * 9 / 5 + 32
    elif (from_unit, to_unit) == ("fahrenheit", "celsius"):
        result = (value - 32) * 5 / 9
    elif from_unit == to_unit:
        result = value
    elif (from_unit, to_unit) in _FACTORS:
        result = value * _FACTORS[(from_unit, to_unit)]
    else:
        raise ValueError(f"cannot convert {from_unit} to {to_unit}")
    return f"{round(result, 4)} {to_unit}"


def read_file(path: str, max_chars: int = 2000) -> str:
    """Read a text file under the current directory.

    Args:
        path: a path relative to the current directory.
        max_chars: return at most this many characters.
    """
    root = Path.cwd().resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise PermissionError("only files under the current directory can be read")
    return target.read_text(errors="replace")[: max(0, max_chars)]


DEMO_TOOLS: list[Callable[..., str]] = [calculator, convert_units, read_file]
