"""Tool calls in a stream of library deltas, as every door API tracks them: the one place that reads them.

The library streams a call as pieces that share its ``index``: the first carries the call's ``id``
and ``name`` (and may carry the first arguments), the next ones more ``arguments``; one delta may
hold several pieces of one call. Each API translator (chat completions, Anthropic Messages,
Responses) reads a delta's pieces merged per call, in order (``pieces``), and remembers where it
opened each call in its own output (``place``/``where``: an OpenAI tool-call index, an Anthropic
content block, a Responses output item), so that later arguments go to the right place.

Invariant: pure, no I/O; a piece's arguments are never dropped or reordered, and a piece for a call
never opened has no place (its translator sends nothing for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallPiece", "StreamCalls"]


@dataclass
class CallPiece:
    """What one delta says of one call: ``id`` and ``name`` where it opens it, and its arguments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class StreamCalls:
    """One stream's calls: each delta's pieces, and where the translator opened each call."""

    _where: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def pieces(delta: Mapping[str, Any]) -> list[CallPiece]:
        """The delta's tool-call pieces, one per call index (pieces of one call joined in order)."""
        merged: dict[int, CallPiece] = {}
        for c in delta.get("tool_calls") or []:
            index = int(c.get("index", 0))
            piece = merged.setdefault(index, CallPiece(index))
            fn = c.get("function") or {}
            if "id" in c:
                piece.id = c["id"]
            if fn.get("name"):
                piece.name = (piece.name or "") + fn["name"]
            piece.arguments += fn.get("arguments") or ""
        return list(merged.values())

    def place(self, index: int, where: int) -> None:
        """The call ``index`` opened at ``where`` in the translator's output."""
        self._where[index] = where

    def where(self, index: int) -> int | None:
        return self._where.get(index)
