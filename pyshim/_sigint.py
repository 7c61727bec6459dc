"""Ctrl-C for a call that runs in C on the main thread: the signal reaches the library at once.

Python runs a signal's handler on the main thread, between bytecodes, so a SIGINT that arrives
while the main thread is inside ``el_generate`` would wait for the whole generation. The other
way, a worker thread running the call while the main thread waits (``_call.py``), costs a call
two thread hand-offs and a streamed call two more per delta. Here the main thread runs the call
itself, and for its
duration the interpreter's wakeup fd (``signal.set_wakeup_fd``: the C-level handler writes each
signal's number to it, from whatever thread the signal lands on) is a pipe read by one watcher
thread. On SIGINT the watcher asks the library to stop this call (``el_cancel_request`` with
its own ``request_id``); the call returns within about one token, and the interpreter then
runs the SIGINT handler as usual, raising ``KeyboardInterrupt`` in the caller.

Invariant: what the previous wakeup fd would have received still reaches it (the watcher
passes every byte on), and it is put back when the call returns. Used only where it cannot
change what a signal does: on the main thread, on POSIX, while SIGINT has Python's default
handler; elsewhere calls take the worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from .handle import Handle

__all__ = ["usable", "watching"]

_lock = threading.Lock()
_pipe: tuple[int, int] | None = None  # (read end, write end), opened once per process
_call: tuple[Handle, str] | None = None  # the (handle, request_id) the watcher stops on SIGINT
_forward = -1  # the wakeup fd set before this call's, which gets every byte too


def usable() -> bool:
    """Whether a call on this thread may run here with Ctrl-C watched (else: on a worker)."""
    return (
        os.name == "posix"
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


@contextlib.contextmanager
def watching(handle: Handle, request_id: str) -> Iterator[bool]:
    """While inside, a SIGINT stops the call ``request_id`` on ``handle``; yields False (and
    watches nothing) where the interpreter refuses a wakeup fd (an embedding's subinterpreter)."""
    global _call, _forward
    write_end = _watcher()
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:
        yield False
        return
    _forward, _call = previous, (handle, request_id)
    try:
        yield True
    finally:
        _call = None
        signal.set_wakeup_fd(previous)
        _forward = -1


def _watcher() -> int:
    """The pipe's write end, with its reading thread started (once per process)."""
    global _pipe
    with _lock:
        if _pipe is None:
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)  # the C handler must never block
            _pipe = (read_end, write_end)
            threading.Thread(target=_watch, args=(read_end,), name="pyshim-sigint", daemon=True).start()
        return _pipe[1]


def _forget_watcher() -> None:
    """In a child of fork() the parent's watcher thread is not there (and the lock may have
    been held by a thread that is gone): the child's first watched call starts its own, as
    ``_call.py`` does for its workers."""
    global _pipe, _lock
    _pipe, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_watcher)


def _watch(read_end: int) -> None:
    while data := os.read(read_end, 512):
        call, forward = _call, _forward
        if call is not None and int(signal.SIGINT) in data:
            with contextlib.suppress(Exception):  # closed meanwhile: nothing left to stop
                call[0].cancel_request(call[1])
        if forward >= 0:
            with contextlib.suppress(OSError):  # as the interpreter does: a full pipe drops bytes
                os.write(forward, data)
