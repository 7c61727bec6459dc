"""Report text the benchmarks share: the sentence that says where a report's figures come from,
and a table's header rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def produced_by(data: Mapping[str, Any]) -> str:
    """ "Produced by one invocation of `COMMAND` on MACHINE[; WHEN]" for a run's recorded data."""
    when = f"; {data['when']}" if data.get("when") else ""
    return f"Produced by one invocation of `{data['command']}` on {data['machine']}{when}"


def opening(title: str, data: Mapping[str, Any]) -> list[str]:
    """A report's title, and the start of its first sentence: where every figure below comes from."""
    return [f"# {title}", "", f"{produced_by(data)}: every figure below comes from that run."]


def table_head(header: str, left: int = 2) -> list[str]:
    """A markdown table's header ("name | name | ...") and its rule: the first ``left`` columns
    left-aligned (names), the rest right-aligned (figures)."""
    columns = header.split(" | ")
    rule = "|" + "---|" * left + "---:|" * (len(columns) - left)
    return ["| " + " | ".join(columns) + " |", rule]
