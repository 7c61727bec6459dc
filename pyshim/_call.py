"""One C generate call on a worker thread, with its deltas handed to the caller one at a time.

Why a worker: a call runs in C for seconds or minutes, and Python delivers SIGINT to the
main thread only between bytecodes, so Ctrl-C would wait for the whole generation. Streams
(whose reader must run while the call does) and main-thread calls where ``_sigint`` cannot
watch for Ctrl-C (a SIGINT handler of the program's own, or not POSIX) run here. The
caller instead waits in short timeouts, and on ``KeyboardInterrupt`` (or when a stream is
closed or dropped) asks the library to stop this call (``el_cancel_request`` with the call's
own ``request_id``, so other calls running on the handle go on), waits for the call to
return, and only then lets the exception go on: the handle is never left mid-call.

Deltas are a rendezvous, not a buffer: the worker's stream callback waits until the
caller has finished with a delta (or stopped the call), so stopping after a delta stops
exactly there, and the concatenated deltas always equal the final result.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from ._lib import ffi, read_json
from .handle import Handle
from .shapes import Delta, Result

__all__ = ["DONE", "Args", "Call"]

#: el_generate's JSON arguments: messages, tools (None: none), options.
Args = tuple[bytes, bytes | None, bytes]

#: ``Call.next_delta`` returns this once the call has returned.
DONE: Any = object()
POLL_S = 0.05

# The worker threads: kept once started and given the next call, since starting a thread and
# waiting for its end cost a call ~0.4 ms. Daemons, as before: a process can always exit.
_jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_idle = 0
_idle_lock = threading.Lock()


def _forget_workers() -> None:
    """In a child of fork() only the forking thread exists: the parent's idle workers are not
    there to take a job, and the lock may have been held by one of them."""
    global _jobs, _idle, _idle_lock
    _jobs, _idle, _idle_lock = queue.SimpleQueue(), 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _run_on_worker(job: Callable[[], None]) -> None:
    global _idle
    with _idle_lock:
        if _idle > 0:
            _idle -= 1
            _jobs.put(job)  # an idle worker is waiting on the queue
            return
    threading.Thread(target=_worker, args=(job,), name="pyshim-call", daemon=True).start()


def _worker(job: Callable[[], None]) -> None:
    global _idle
    while True:
        job()  # never raises: Call._work hands every exception to the caller
        with _idle_lock:
            _idle += 1
        job = _jobs.get()


class Call:
    """Runs ``el_generate`` (or ``el_generate_stream`` when ``streaming``) on a daemon thread."""

    def __init__(self, handle: Handle, args: Args, streaming: bool, request_id: str) -> None:
        self._handle = handle
        self._request_id = request_id
        self._cond = threading.Condition()
        self._slot: Any = None  # the delta the worker is waiting on
        self._handed = False  # whether the caller has it
        self._stop = False
        self._done = False
        self.result: Result | None = None
        self.error: BaseException | None = None
        self._worker: threading.Thread | None = None  # set by the worker that runs it
        _run_on_worker(lambda: self._work(args, streaming))

    # -- worker thread ---------------------------------------------------------------

    def _work(self, args: Args, streaming: bool) -> None:
        self._worker = threading.current_thread()
        try:
            callback = ffi.callback("el_stream_cb", self._on_delta) if streaming else None
            self.result = self._handle.generate(*args, callback)
        except BaseException as e:  # handed to the caller, never lost in the thread
            self.error = e
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _on_delta(self, delta_json: Any, _user: Any) -> int:
        delta = read_json(delta_json)
        with self._cond:
            if self._stop:
                return 1
            self._slot, self._handed = delta, False
            self._cond.notify_all()
            while self._slot is not None and not self._stop:
                self._cond.wait()
            return 1 if self._stop else 0

    # -- caller side ----------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._done

    def next_delta(self) -> Any:
        """The next delta, or ``DONE``; releases the previous one. Interruptible by Ctrl-C (which stops the call)."""
        try:
            with self._cond:
                if self._handed:
                    self._slot, self._handed = None, False
                    self._cond.notify_all()
                while True:
                    if self._slot is not None and not self._handed:
                        self._handed = True
                        return self._slot
                    if self._done:
                        return DONE
                    self._cond.wait(POLL_S)
        except KeyboardInterrupt:
            self.stop()
            raise

    def wait(self) -> Result:
        """The final result (raising the call's error); Ctrl-C stops the call first, then propagates."""
        try:
            self._wait_done()
        except KeyboardInterrupt:
            self.stop()
            raise
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def stop(self) -> None:
        """Stop the call and wait until it has returned (the handle is free afterwards). Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if threading.current_thread() is self._worker:
            return
        if not self._done:
            # Once is enough: the handle remembers the id for a call that has not begun yet.
            with contextlib.suppress(Exception):  # a closed handle has nothing left to stop
                self._handle.cancel_request(self._request_id)
        while not self._done:
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: the call is already stopping
                self._wait_done()

    def _wait_done(self) -> None:
        with self._cond:
            while not self._done:
                self._cond.wait(POLL_S)


def run_in_worker(handle: Handle, args: Args, request_id: str, on_delta: Callable[[Delta], object] | None) -> Result:
    """A generate call whose deltas (if any) go to ``on_delta`` on the calling thread."""
    call = Call(handle, args, on_delta is not None, request_id)
    try:
        if on_delta is not None:
            while (delta := call.next_delta()) is not DONE:
                if on_delta(delta) is False:
                    call.stop()
        return call.wait()
    except BaseException:
        call.stop()
        raise
