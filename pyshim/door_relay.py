"""The door's one relay: how every API's call meets the client, whatever its translation.

A route parses its API's request into a ``DoorCall`` and hands the library's deltas to its
translator (``openai_api.ChatStream``, ``anthropic_api.MessageStream``,
``responses_api.ResponseStream``: each ``start``, ``delta``, ``finish``, ``error``); this module
owns what they share: the status a failure gets (``api_error``), waiting for the first delta before
any header so that a refusal keeps its own status (``first_delta``), a client's disconnect
cancelling its call (``unless_disconnected``), and one SSE relay that counts every call in
/metrics, a call its client left included (``relay``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from typing import Any, Protocol, TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from . import aio
from .errors import ClosedModel, ContextFull, DeviceLost, InvalidRequest, TimedOut
from .openai_api import ApiError, DoorCall
from .shapes import Delta

log = logging.getLogger("pyshim.server")
T = TypeVar("T")


def api_error(exc: BaseException) -> ApiError:
    """The status and message a client sees for an exception."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, aio.Overloaded):
        return ApiError(503, f"the server is overloaded: {exc}; retry later", code="overloaded")
    if isinstance(exc, ContextFull):  # OpenAI's code for it, which clients test for
        return ApiError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, InvalidRequest):
        return ApiError(400, str(exc))  # the library's message, verbatim
    if isinstance(exc, (ClosedModel, DeviceLost)):  # the model cannot answer until it is reopened
        return ApiError(503, f"the model is unavailable: {exc}", code="model_unavailable")
    if isinstance(exc, TimedOut):
        return ApiError(504, str(exc), code="timeout")
    log.exception("request failed", exc_info=exc)
    return ApiError(500, f"internal error: {type(exc).__name__}: {exc}")


class ClientGone(Exception):
    """The client disconnected before its answer: nobody reads the response."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it (and so its generation) if the client disconnects first.

    ``work`` runs in this task, watched by one small task: after a long generation this
    interpreter's code is cold in the CPU caches, and every task, wait set and callback less
    is time the client does not wait (make bench-door measures the door's own cost)."""
    handler = asyncio.current_task()
    assert handler is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        handler.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise
        handler.uncancel()
        raise ClientGone from None
    finally:
        watcher.cancel()


class Last(str):
    """A stream's closing write: sent as the response's last body message, so that a client that
    reads it finds its request already out of flight (door_limits releases the per-client bound on
    the last body message; Starlette's own empty one would follow a read client by a step)."""


class EventStream(StreamingResponse):
    """Server-sent events whose body iterator is always closed, also when the client left
    mid-stream (Starlette cancels the send and leaves the iterator to the garbage collector); a
    ``Last`` write ends the response."""

    def __init__(self, events: AsyncGenerator[str, None]) -> None:
        super().__init__(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._events = events

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self._events:
            last = isinstance(chunk, Last)
            await send({"type": "http.response.body", "body": chunk.encode(self.charset), "more_body": not last})
            if last:
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._events.aclose()


async def first_delta(
    request: Request, model: aio.ModelLike, call: DoorCall
) -> tuple[aio.AsyncStream, AsyncIterator[Delta], Delta | None]:
    """Start a streamed call and wait for its first delta (or its end, None) before any header is
    sent, so that a request the library refuses, or one the queue cannot take, still gets its own
    status code. The stream is closed if that wait fails."""
    stream = aio.astream(model, call.messages, call.tools, **call.options)
    deltas = aiter(stream)
    try:
        first = await unless_disconnected(request, anext(deltas, None))
    except BaseException:
        await stream.aclose()
        raise
    return stream, deltas, first


class Events(Protocol):
    """An API's stream translation: its opening events, each delta's, its closing events, and an
    error after the 200 went out, each as the SSE text to send ("" for nothing)."""

    def start(self) -> str: ...
    def delta(self, delta: Any) -> str: ...
    def finish(self, result: Any) -> str: ...
    def error(self, err: ApiError) -> str: ...


class Counter(Protocol):
    """Where a finished call is counted (the door's /metrics)."""

    def generation(self, result: Mapping[str, Any], started: float, first_token_at: float | None = None) -> None: ...


async def relay(
    metrics: Counter,
    started: float,
    events: Events,
    stream: aio.AsyncStream,
    deltas: AsyncIterator[Any],
    delta: Any,
) -> AsyncGenerator[str, None]:
    """The SSE body of a streamed call in its API's events: the opening events in one write with the
    first delta that says something, one write per such delta after, the closing events; an error
    after the 200 went out travels as the API's error event. The closing events (or the error) go
    out only once the call has ended and been counted: a client that reads them and sends its next
    request at once finds the call gone (its place in the per-key bound free, /metrics counted)."""
    counted = False
    first_at: float | None = None
    tail = ""
    try:
        head = events.start()
        while delta is not None:
            if piece := events.delta(delta):
                first_at = first_at or time.perf_counter()
                yield head + piece
                head = ""
            delta = await anext(deltas, None)
        assert stream.result is not None
        metrics.generation(stream.result, started, first_at)
        counted = True
        tail = head + events.finish(stream.result)
    except Exception as e:
        tail = events.error(api_error(e))
    finally:
        # Starlette cancels a stream whose client left, and anyio keeps cancelling every await in
        # its scope: the stop and the count are shielded, so that the call ends and is counted.
        with anyio.CancelScope(shield=True):
            await stream.aclose()
        if not counted and stream.result is not None:  # ended by the client's disconnect: it counts too
            metrics.generation(stream.result, started, first_at)
    yield Last(tail)  # the response's last body message: the bound is free before the client reads it
