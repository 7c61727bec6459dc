"""asyncio over a ``Model``: ``agenerate``, ``AsyncStream`` and ``aembed`` (``Agent.arun`` drives the agent with them).

Each call waits its turn in the model's ``Gate`` on the event loop (no thread is held while it
waits), then runs the blocking library call in a worker thread, so the loop never blocks. As
many calls run at once as the model has slots (``n_seq``); the library batches their decode
steps.

The invariant this module keeps: cancelling a call stops *that* call and never another one.
Each call carries its own ``request_id``, and a running call is stopped with
``el_cancel_request`` on that id; a call cancelled while it still waits simply leaves the queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol, Unpack

from .errors import ClosedModel, ShimError
from .shapes import (
    Delta,
    Embeddings,
    EmbedInput,
    GenerateOptions,
    Message,
    Result,
    ToolSpec,
    cancelled_result,
    owner_key,
)


class ModelLike(Protocol):
    """What asyncio needs of a model (``pyshim.Model`` is one): its settings, its blocking calls
    (run on the gate's threads) and cancel. A protocol, so that this module imports no model and
    ``pyshim.model`` can import it."""

    config: dict[str, Any]

    def generate(
        self,
        messages: str | Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        *,
        on_delta: Callable[[Delta], object] | None = None,
        **options: Unpack[GenerateOptions],
    ) -> Result: ...

    def embeddings(self, input: EmbedInput, **options: Any) -> Embeddings: ...

    def cancel(self, request_id: str | None = None) -> None: ...


__all__ = ["AsyncStream", "Call", "Gate", "Overloaded", "aembed", "agenerate", "astream", "gate"]

# How often a cancelled call looks whether its worker has returned.
_POLL_S = 0.05
# The longest a stream's first delta waits for its reader (AsyncStream).
# How long a stopped stream waits for its next delta to end the call before cancelling it.
_STOP_GRACE_S = 0.5
_FIRST_DELTA_WAIT_S = 0.05


class Overloaded(ShimError):
    """The gate's queue is full: the call was refused without waiting."""


class Call:
    """One generation's place in a gate: queued, then on the handle, then done."""

    def __init__(self, session: str | None = None) -> None:
        self.cancelled = threading.Event()
        self.request_id = uuid.uuid4().hex  # el_cancel_request stops this call alone
        self.session = session or None  # its calls take turns on the session's one slot
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turn: asyncio.Future[None] | None = None


class Gate:
    """The FIFO of async calls on one model, and which of them are on the handle now.

    Up to ``capacity`` calls (the model's ``n_seq``) run at once, and at most one per session
    (a session's calls share its slot, so a second one could only wait inside the library,
    holding a place that another session's call could use). Of the waiting calls, the oldest
    one that may start goes first: a call waiting for its own session never delays another
    session's. ``max_waiting`` bounds the calls waiting behind the running ones (``None``:
    unbounded); ``enter`` raises ``Overloaded`` when it is reached.
    """

    def __init__(self, model: ModelLike, max_waiting: int | None = None) -> None:
        self._model = weakref.ref(model)
        self.max_waiting = max_waiting
        self.capacity = max(1, int(model.config.get("n_seq", 1)))
        self._lock = threading.Lock()  # guards _running and _waiting; taken by the worker threads too
        self._running: set[Call] = set()
        self._waiting: deque[Call] = deque()
        # One worker thread per slot. With one slot, every call runs on the same thread, and a
        # fixed calling thread keeps OpenMP's per-thread worker team (ggml computes with
        # OpenMP) warm: handed from one pool thread to another, the door's calls took ~45 %
        # longer in the engine than the same calls in-process (make bench-door, when this was written). With
        # several, the library evaluates on a thread of its own anyway.
        self.worker = concurrent.futures.ThreadPoolExecutor(self.capacity, thread_name_prefix="pyshim-model")
        # Embed calls run one at a time in the library (el_embed): one thread of their own, so
        # that they never hold a generation's worker, and a count of those in or waiting for it.
        self.embedder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pyshim-embed")
        self.embedding = 0

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def enter(self, call: Call) -> None:
        """Wait until ``call`` is the one on the handle. Cancelled while waiting, it leaves the queue."""
        with self._lock:
            if self._may_start(call) and not any(self._may_start(w) for w in self._waiting):
                self._running.add(call)
                return
            if self.max_waiting is not None and len(self._waiting) >= self.max_waiting:
                raise Overloaded(f"too many requests waiting for the model ({len(self._waiting)} queued)")
            call._loop = asyncio.get_running_loop()
            call._turn = call._loop.create_future()
            self._waiting.append(call)
        try:
            await call._turn
        except asyncio.CancelledError:
            with self._lock:
                if call in self._waiting:
                    self._waiting.remove(call)
                    raise
            self.leave(call)  # the turn was granted as we were cancelled: pass it on
            raise

    def _may_start(self, call: Call) -> bool:
        """Whether ``call`` could run now (under ``_lock``): a place is free, and no call of its
        session runs."""
        if len(self._running) >= self.capacity:
            return False
        return call.session is None or all(r.session != call.session for r in self._running)

    def leave(self, call: Call) -> None:
        """``call`` is off the handle: hand its place to the oldest waiting call that may start."""
        with self._lock:
            if call not in self._running:
                return
            self._running.discard(call)
            while (nxt := next((w for w in self._waiting if self._may_start(w)), None)) is not None:
                self._waiting.remove(nxt)
                self._running.add(nxt)
                assert nxt._loop is not None and nxt._turn is not None
                nxt._loop.call_soon_threadsafe(_grant, nxt._turn)

    def cancel(self, call: Call) -> None:
        """Stop ``call``: el_cancel_request if it is on the handle now; if it waits, it will not start."""
        call.cancelled.set()
        with self._lock:  # the worker leaves under this lock, so the model is still open here
            model = self._model()
            if call in self._running and model is not None:
                with contextlib.suppress(ClosedModel):  # closed meanwhile: nothing left to stop
                    model.cancel(call.request_id)


def _grant(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_result(None)


_gates: weakref.WeakKeyDictionary[ModelLike, Gate] = weakref.WeakKeyDictionary()
_gates_lock = threading.Lock()


def gate(model: ModelLike) -> Gate:
    """The gate of ``model`` (one per model, created on first use)."""
    with _gates_lock:
        g = _gates.get(model)
        if g is None:
            g = _gates[model] = Gate(model)
        return g


async def agenerate(
    model: ModelLike,
    messages: str | Sequence[Message],
    tools: Sequence[ToolSpec] | None = None,
    *,
    on_delta: Callable[[Delta], object] | None = None,
    on_cancelled: Callable[[Result], object] | None = None,
    **options: Unpack[GenerateOptions],
) -> Result:
    """``Model.generate`` as a coroutine. ``on_delta`` runs in the worker thread; ``on_cancelled``
    gets the result of a call this task's cancellation stopped (finish_reason "cancelled", with what
    it evaluated and wrote), once it has returned.

    Cancelling the awaiting task cancels the generation and waits for the worker to return.
    """
    # the call's owner as the library reads it: a call naming no scope is in the Model's default one
    session, scope = options.get("session"), options.get("scope", model.config.get("scope"))
    owner = owner_key(scope if isinstance(scope, str) else None, session) if isinstance(session, str) else None
    g, call = gate(model), Call(owner)
    if request_id := options.get("request_id"):
        call.request_id = str(request_id)
    await g.enter(call)

    def checked(delta: Delta) -> bool:
        # Stops the call at its next delta however the cancel and the call's start interleave.
        if call.cancelled.is_set():
            return False
        return on_delta is None or on_delta(delta) is not False

    def work() -> Result:
        try:
            if call.cancelled.is_set():  # cancelled as its turn came: never start it
                return cancelled_result()
            # Without a delta consumer, no per-token callback: el_cancel_request on the call's id
            # (which the library remembers if it comes before the call began) stops it.
            own: GenerateOptions = {**options, "request_id": call.request_id}
            return model.generate(messages, tools, on_delta=checked if on_delta else None, **own)
        finally:
            g.leave(call)

    worker = asyncio.get_running_loop().run_in_executor(g.worker, work)
    try:
        return await asyncio.shield(worker)
    except asyncio.CancelledError:
        g.cancel(call)
        while not worker.done():
            await asyncio.wait({worker}, timeout=_POLL_S)
        if on_cancelled is not None and not worker.cancelled() and worker.exception() is None:
            on_cancelled(worker.result())
        raise


async def aembed(model: ModelLike, input: EmbedInput, **options: Any) -> Embeddings:
    """``Model.embeddings`` as a coroutine, on the model's embedding thread; at most the gate's
    ``max_waiting`` calls wait behind the one running (``Overloaded`` beyond). Cancelling the
    awaiting task does not stop an embed call already running: it finishes (within its
    ``timeout_ms``, if given) and its result is dropped."""
    g = gate(model)
    if g.max_waiting is not None and g.embedding > g.max_waiting:
        raise Overloaded(f"too many embedding requests waiting for the model ({g.embedding - 1} queued)")
    g.embedding += 1
    try:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(g.embedder, lambda: model.embeddings(input, **options))
    finally:
        g.embedding -= 1


class AsyncStream:
    """Deltas of one generation as an async iterator; the final result is ``.result`` afterwards.

    Leaving the iteration early (``break`` then ``aclose()``, or ``async with``) stops the
    generation and waits for its worker.
    """

    _END = object()

    def __init__(
        self, model: ModelLike, messages: str | Sequence[Message], tools: Any, options: Mapping[str, Any]
    ) -> None:
        self.result: Result | None = None
        self._args = (model, messages, tools, options)
        self._stopping = False  # the reader stopped it: the next delta ends the call
        self._task: asyncio.Task[Result] | None = None
        self._iter: AsyncGenerator[Delta, None] | None = None

    def __aiter__(self) -> AsyncIterator[Delta]:
        if self._iter is None:
            self._iter = self._deltas()
        return self._iter

    async def __anext__(self) -> Delta:
        return await self.__aiter__().__anext__()

    async def _deltas(self) -> AsyncGenerator[Delta, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        model, messages, tools, options = self._args
        read = threading.Event()  # the reader came back for more after the first delta

        def on_delta(delta: Delta) -> bool:
            if self._stopping:
                return False  # stopped by the reader: the call ends "cancelled", with its result
            loop.call_soon_threadsafe(queue.put_nowait, delta)
            # The first delta waits (a bounded while) until the reader has handled it: on a
            # machine whose cores all compute the next token, the event loop would otherwise
            # wait for a time slice before it can send the first token on (+4 ms to first
            # token through the door in make bench-door, when this was written). Later deltas never wait, so
            # decoding never waits for the reader.
            if not read.is_set():
                read.wait(_FIRST_DELTA_WAIT_S)
                read.set()
            return True

        # The worker's last call_soon_threadsafe precedes the task's completion, so the
        # end marker queued by the done callback comes after every delta.
        self._task = asyncio.ensure_future(agenerate(model, messages, tools, on_delta=on_delta, **options))
        self._task.add_done_callback(lambda _: queue.put_nowait(self._END))
        try:
            while (item := await queue.get()) is not self._END:
                yield item
                read.set()
            self.result = self._task.result()
        finally:
            read.set()
            await self._stop()

    async def _stop(self) -> None:
        """Stop the generation: at its next delta, so that it ends "cancelled" with a result (its
        tokens, which the door counts in /metrics); if no delta comes within a grace (it waits
        for its turn, or evaluates a prompt), by cancelling its task."""
        task = self._task
        if task is None or task.done():
            return
        self._stopping = True
        done, _ = await asyncio.wait({task}, timeout=_STOP_GRACE_S)
        if not done:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif not task.cancelled() and task.exception() is None and self.result is None:
            self.result = task.result()

    async def aclose(self) -> None:
        """Stop the generation if it still runs, and wait until its worker has returned."""
        it, self._iter = self._iter, None
        if it is not None:
            await it.aclose()
        await self._stop()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def astream(
    model: ModelLike,
    messages: str | Sequence[Message],
    tools: Sequence[ToolSpec] | None = None,
    **options: Unpack[GenerateOptions],
) -> AsyncStream:
    """``Model.stream`` for asyncio: ``async for delta in astream(model, messages)``."""
    return AsyncStream(model, messages, tools, options)
