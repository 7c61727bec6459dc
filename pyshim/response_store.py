"""The Responses API's stored responses: what ``previous_response_id`` and ``GET``/``DELETE
/v1/responses/{id}`` find.

Invariant: a response exists only for the scope (the API key's digest) that created it: another
key's lookup of its id finds nothing, as a missing one; at most ``max_entries`` are kept, the least
recently used dropped first, all in memory (a restarted door has none).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_STORED", "ResponseStore", "Stored"]

MAX_STORED = 1024


@dataclass(frozen=True)
class Stored:
    """A response kept for ``previous_response_id`` and ``GET /v1/responses/{id}``."""

    scope: str
    conversation: tuple[dict[str, Any], ...]  # every message but the instructions, output included
    session: str | None
    response: dict[str, Any]


class ResponseStore:
    """The most recent responses, by id; a response exists only for the scope that created it."""

    def __init__(self, max_entries: int = MAX_STORED) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[str, Stored] = OrderedDict()

    def get(self, response_id: str, scope: str) -> Stored | None:
        item = self._items.get(response_id)
        if item is None or item.scope != scope:
            return None
        self._items.move_to_end(response_id)
        return item

    def put(self, response_id: str, item: Stored) -> None:
        self._items[response_id] = item
        self._items.move_to_end(response_id)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    def delete(self, response_id: str, scope: str) -> bool:
        if self.get(response_id, scope) is None:
            return False
        del self._items[response_id]
        return True
