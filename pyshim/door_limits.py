"""The door's limits on connections and clients: what keeps one client, idle or slow or busy,
from holding the server's sockets, file descriptors or queue (issue 54, item 9).

uvicorn's own settings cover idle keep-alive connections (``timeout_keep_alive``) and request
header size (h11's incomplete-event bound), but nothing times out a connection that never
finishes its first request (or sends nothing at all), and nothing caps open connections: 200
idle connections stayed open after 90 s, and one client without a key held the process's file
descriptors until ``/health`` got an empty reply. So:

- ``bounded_protocol``: uvicorn's h11 protocol with two bounds. A request (headers and body)
  must arrive whole within ``request_timeout`` seconds of the connection opening or of the
  previous response; past ``max_connections`` open connections a new one is closed at once.
- ``PerClientLimit``: at most ``limit`` requests in flight per client, where a client is its
  API key (bearer token or ``x-api-key``) or, without one, its address; the next gets 429 in the
  API's own error shape. ``/health`` is never limited.

Invariant: every connection either completes a request in bounded time, is answered, or is
closed; the limits hold per process whatever the clients do.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["PerClientLimit", "bounded_protocol"]


def bounded_protocol(*, request_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with the two bounds (pass it as ``uvicorn.Config(http=...)``)."""

    class Bounded(H11Protocol):
        _request_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= max_connections:
                self.transport = transport  # connection_lost closes what it was given
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._request_timer = self.loop.call_later(request_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._request_timer is not None:
                self._request_timer.cancel()
                self._request_timer = None

        def _too_slow(self) -> None:
            # A request that did not arrive whole: the app, if it started, sees a disconnect.
            self._request_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
                self._disarm()  # the whole request is in

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on this connection has as long

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return Bounded


def client_of(scope: dict[str, Any]) -> str:
    """Who a request is for the per-client bound: its key, else its address."""
    headers = dict(scope.get("headers") or [])
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    key = token.strip() if scheme.lower() == "bearer" else ""
    key = key or headers.get(b"x-api-key", b"").decode("latin-1").strip()
    if key:
        return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    client = scope.get("client") or ("?", 0)
    return f"addr:{client[0]}"


class PerClientLimit:
    """ASGI middleware: at most ``limit`` requests in flight per client (0: no bound). A
    request counts until its response's last body message is handed to the server (a stream's
    end), or until the app returns without one."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.running: Counter[str] = Counter()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.limit <= 0 or scope.get("path") == "/health":
            await self.app(scope, receive, send)
            return
        who = client_of(scope)
        if self.running[who] >= self.limit:
            await self._refuse(scope, send)
            return
        self.running[who] += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.running[who] -= 1
                if self.running[who] <= 0:
                    del self.running[who]

        async def send_then_release(message: dict[str, Any]) -> None:
            # Released before the response's last bytes leave: a client that has read the whole
            # response (a stream's [DONE]) and asks again at once must not find itself in flight.
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                release()
            await send(message)

        try:
            await self.app(scope, receive, send_then_release)
        finally:
            release()

    async def _refuse(self, scope: dict[str, Any], send: Any) -> None:
        message = f"more than {self.limit} requests in flight for this client; retry when one ends"
        if "/messages" in scope.get("path", ""):  # Anthropic's routes answer in its shape
            body: dict[str, Any] = {"type": "error", "error": {"type": "rate_limit_error", "message": message}}
        else:
            body = {
                "error": {"message": message, "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}
            }
        raw = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
            (b"retry-after", b"1"),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": raw})
