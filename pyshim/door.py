"""The door's state and policy: what ``serve`` was asked for (``Settings``), the model it serves
(loaded in the background, or given: the backend seam), and the checks every request passes
(its API key, the model it names), apart from the routes that use them (``pyshim/server.py``).

Invariants: a key is compared in constant time, and each key is a tenant of its own (its digest
names its scope: two keys never share a cached prefix, a session or a stored response); a request
names the served model, one of its aliases, or none, and any other name is a 404 that lists them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from . import aio
from ._lib import build_info, version
from .aio import ModelLike
from .metrics import Metrics
from .model import Model
from .openai_api import ApiError, key_scope
from .response_store import ResponseStore

__all__ = ["Door", "Settings", "accepted_keys", "fingerprint", "per_client_limit"]

log = logging.getLogger("pyshim.server")


@dataclass
class Settings:
    """What ``serve`` was asked for: the model, el_open's config, and the door's limits."""

    model: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    api_keys: list[str] = field(default_factory=list)  # more keys (--api-key repeated, --api-key-file)
    max_request_bytes: int = 4 * 1024 * 1024
    max_queue: int = 16
    # door_limits.py: a request must arrive whole within request_timeout s; idle keep-alive
    # connections close after idle_timeout s; at most max_connections are open and
    # max_per_client requests in flight per key (or address, without one)
    request_timeout: float = 30.0
    idle_timeout: int = 15
    max_connections: int = 512
    max_per_client: int | None = None  # None: the door's capacity shared among its keys (per_client_limit)
    aliases: list[str] = field(default_factory=list)  # more names requests may give the model (--alias)
    cors_origins: list[str] = field(default_factory=list)
    log_level: str = "info"
    answer_repeats: bool = True  # see _generate


def per_client_limit(settings: Settings) -> int:
    """Requests one client may have in flight (0: no bound): as set, else, with several keys,
    the door's capacity (slots and queue) divided among them, rounded up, so that each tenant
    keeps a share however busy another is. One key, or none: no bound of its own (the queue's
    503 still holds)."""
    if settings.max_per_client is not None:
        return settings.max_per_client
    n_keys = len(accepted_keys(settings))
    capacity = max(1, int(settings.config.get("n_seq", 1))) + settings.max_queue
    return -(-capacity // n_keys) if n_keys > 1 else 0


def accepted_keys(settings: Settings) -> list[str]:
    """The keys the door takes; none: it is open (and each client's bearer token, whatever it
    is, still names its scope)."""
    first = [settings.api_key] if settings.api_key else []
    return first + [k for k in settings.api_keys if k]


def fingerprint(model: ModelLike) -> str:
    """OpenAI's ``system_fingerprint``: what a seeded answer depends on besides the request (the
    library and llama.cpp it was built from, the model file, its settings), as a short digest."""
    what = json.dumps([version(), build_info(), model.config], sort_keys=True, default=str)  # config names the file
    return "fp_" + hashlib.sha256(what.encode()).hexdigest()[:12]


class Door:
    """The server's state: the model (None while it loads) and the checks every request passes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model: ModelLike | None = None  # a pyshim.Model, or any model the backend seam takes
        self.loaded: Model | None = None  # the one load() opened, which the app closes
        self.load_error: BaseException | None = None
        self.on_load_failure: Callable[[], None] = lambda: None
        self.created = int(time.time())
        self.fingerprint: str | None = None
        self.responses = ResponseStore()
        self.metrics = Metrics(self.gauges)

    def gauges(self) -> tuple[int, int, int]:
        """Generations running and waiting, and the slots (for /metrics)."""
        slots = max(1, int(self.settings.config.get("n_seq", 1)))
        if self.model is None:
            return 0, 0, slots
        g = aio.gate(self.model)
        return g.running, g.waiting, g.capacity

    async def load(self) -> None:
        try:
            model = await asyncio.to_thread(Model, self.settings.model, **self.settings.config)
        except Exception as e:
            log.error("could not load %s: %s", self.settings.model, e)
            self.load_error = e
            self.on_load_failure()
            return
        self.loaded = model
        self.attach(model)
        log.info("serving %s as %r", model.path, self.settings.name)

    def attach(self, model: ModelLike) -> None:
        """Serve ``model`` (open) from now on, with this door's queue bound."""
        aio.gate(model).max_waiting = self.settings.max_queue
        self.model = model
        self.fingerprint = fingerprint(model)

    def ready(self) -> ModelLike:
        if self.model is None:
            raise ApiError(503, "the model is still loading", code="model_loading")
        return self.model

    def keys(self) -> list[str]:
        return accepted_keys(self.settings)

    def key_ok(self, token: str | None) -> bool:
        keys = self.keys()
        given = (token or "").encode()
        # every key compared, so the time taken says nothing of which one nearly matched
        return not keys or sum(hmac.compare_digest(given, k.encode()) for k in keys) > 0

    def check_key(self, request: Request) -> str:
        """The scope of the request's key (see key_scope); 401 unless it is one of the server's
        keys. Each key is a tenant: its calls share cached prefixes with each other (the
        library's "scope" option), never with another key's."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        if not self.key_ok(token):
            raise ApiError(401, "incorrect or missing API key (Authorization: Bearer ...)", code="invalid_api_key")
        return key_scope(token)

    def names(self) -> list[str]:
        """What a request's ``model`` may say: the served name, then the --alias names."""
        return [self.settings.name, *[a for a in self.settings.aliases if a != self.settings.name]]

    def check_model(self, name: str | None) -> None:
        """One model is served, under its name, its catalogue name or path, and each --alias; a
        request naming none gets it (as llama-server and Ollama answer one); any other name is a
        404 that lists them (a client configured for another model learns what to send instead of
        being answered by a model it did not ask for)."""
        if name is not None and name not in (*self.names(), self.settings.model):
            served = ", ".join(repr(n) for n in self.names())
            raise ApiError(
                404, f"the model '{name}' does not exist; this server serves {served}", param="model",
                code="model_not_found",
            )  # fmt: skip
