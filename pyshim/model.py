"""``Model``: one loaded GGUF model with its context, driven through JSON."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import models
from ._lib import encode, ffi, lib, take_json
from .errors import ClosedModel, ModelLoadError

if TYPE_CHECKING:
    from .aio import AsyncStream

Message = Mapping[str, Any]
Delta = dict[str, Any]
Result = dict[str, Any]

__all__ = ["Delta", "Model", "Result", "Stream", "default_model", "generate"]


class Model:
    """A model kept resident between calls, so each turn reuses the cached prompt prefix.

    ``model`` is a catalogue name (see ``pyshim.models``) or a path to a ``.gguf``
    file; ``config`` is passed to ``el_open`` (``n_ctx``, ``n_threads``,
    ``temperature``, ``swa_full``, ``log``, ...). Use it as a context manager, or
    call ``close()``.

    Calls on one Model are serialized by the library; separate Models run in parallel.
    """

    def __init__(self, model: str | os.PathLike[str] | None = None, **config: Any) -> None:
        self.path = models.path(model)
        self.config = {"model": str(self.path), **config}
        handle = lib().el_open(encode(self.config))
        if handle == ffi.NULL:
            raise ModelLoadError(json.loads(ffi.string(lib().el_last_error()).decode())["error"])
        self._handle: Any = handle

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Free the model. Cancels a call in progress in another thread. Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib().el_close(handle)

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise ClosedModel("the model is closed")
        return self._handle

    # -- calls -------------------------------------------------------------

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        on_delta: Callable[[Delta], object] | None = None,
        **options: Any,
    ) -> Result:
        """One assistant turn: OpenAI-style messages and tools in, a result dict out.

        Options are those of ``el_generate`` (``max_tokens``, ``temperature``,
        ``tool_choice``, ``response_format``, ``stop``, ``logprobs``, ...).
        ``on_delta`` receives streaming deltas as they are decoded; returning
        ``False`` from it stops the generation (finish_reason ``"cancelled"``).
        """
        args = (
            self.handle,
            encode(list(messages)),
            encode(list(tools)) if tools else ffi.NULL,
            encode(options) if options else ffi.NULL,
        )
        if on_delta is None:
            return take_json(lib().el_generate(*args))

        failure: list[BaseException] = []

        def trampoline(delta_json: Any, _user: Any) -> int:
            try:
                keep_going = on_delta(json.loads(ffi.string(delta_json).decode("utf-8", errors="replace")))
                return 1 if keep_going is False else 0
            except BaseException as e:  # re-raised below, never lost inside C
                failure.append(e)
                return 1

        callback = ffi.callback("el_stream_cb", trampoline)
        result = take_json(lib().el_generate_stream(*args, callback, ffi.NULL))
        if failure:
            raise failure[0]
        return result

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> Stream:
        """Iterate over deltas as they are decoded; the final result is ``.result`` afterwards."""
        return Stream(self, messages, tools, options)

    def cancel(self) -> None:
        """Stop the call in progress (from another thread)."""
        lib().el_cancel(self.handle)

    def reset(self) -> None:
        """Drop every cached token and checkpoint."""
        lib().el_reset(self.handle)

    def forget(self, session: str) -> None:
        """Drop what is cached for one session (see the ``session`` option)."""
        lib().el_forget(self.handle, session.encode())

    def stats(self) -> dict[str, Any]:
        return take_json(lib().el_stats(self.handle))

    # -- asyncio (pyshim.aio) ------------------------------------------------

    async def agenerate(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> Result:
        """``generate`` as a coroutine; cancelling the awaiting task cancels the generation."""
        from .aio import agenerate

        return await agenerate(self, messages, tools, **options)

    def astream(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> AsyncStream:
        """``async for delta in model.astream(...)``; the final result is ``.result`` afterwards."""
        from .aio import astream

        return astream(self, messages, tools, **options)


class Stream:
    """Deltas of one generation, produced on a worker thread and handed over through a queue.

    Leaving the iteration early (``break``, or closing the generator) stops the generation.
    """

    _END = object()

    def __init__(self, model: Model, messages: Sequence[Message], tools: Any, options: dict[str, Any]) -> None:
        self.result: Result | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=64)
        self._stop = threading.Event()
        self._error: BaseException | None = None

        def on_delta(delta: Delta) -> bool:
            while not self._stop.is_set():
                try:
                    self._queue.put(delta, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def work() -> None:
            try:
                self.result = model.generate(messages, tools, on_delta=on_delta, **options)
            except BaseException as e:
                self._error = e
            finally:
                self._queue.put(self._END)

        self._thread = threading.Thread(target=work, name="pyshim-stream", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[Delta]:
        try:
            while True:
                item = self._queue.get()
                if item is self._END:
                    break
                yield item
        finally:
            self._stop.set()
            while self._thread.is_alive():  # drain so the worker can finish
                with contextlib.suppress(queue.Empty):
                    self._queue.get(timeout=0.1)
            self._thread.join()
        if self._error is not None:
            raise self._error


_default: Model | None = None
_default_lock = threading.Lock()


def default_model() -> Model:
    """The process-wide model behind ``pyshim.generate``: ``$PYSHIM_MODEL`` or the catalogue default."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Model(os.environ.get("PYSHIM_MODEL") or models.DEFAULT)
        return _default


def generate(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None, **options: Any) -> Result:
    """``Model.generate`` on the process-wide default model, opened on first use."""
    return default_model().generate(messages, tools, **options)
