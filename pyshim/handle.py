"""One open ``el_handle``: the only caller of the library's per-handle functions.

``_lib`` loads the library and reads what it returns; this class calls it. Every return is
checked here, once: a string result that is an error object and an ``int`` that is -1 both
become the exception of the library's code (``errors.from_library``), so no caller compares
return codes or reads ``el_last_error`` itself.

Invariant: once ``close()`` has begun, no call of this object reaches the library with the
pointer (each reads it once, and a closed Handle raises ``ClosedModel``); a call that read it
just before is answered by the library itself, which looks every handle up in its registry
(el_shim.h: a closed handle is an error, never undefined behaviour).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, cast

from ._lib import check, encode, ffi, last_error, lib, take_json
from .errors import ClosedModel, ModelWarning
from .shapes import Embeddings, Result

__all__ = ["Handle"]


class Handle:
    """An el_handle opened from ``config`` (el_open's JSON settings, ``model`` the file's path)."""

    def __init__(self, config: dict[str, Any]) -> None:
        ptr = lib().el_open(encode(config))
        if ptr == ffi.NULL:
            raise last_error(opening=os.fspath(config.get("model", "")))
        self._ptr: Any = ptr

    @property
    def ptr(self) -> Any:
        """The ``el_handle *`` itself, for code that calls ``el_*`` directly (tests, other bindings)."""
        ptr = self._ptr
        if ptr is None:
            raise ClosedModel("the model is closed")
        return ptr

    def close(self) -> None:
        """el_close: cancel what runs, wait for it, free everything. Idempotent."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            lib().el_close(ptr)  # -1 only for a handle already closed: nothing left to do

    def generate(self, messages: bytes, tools: bytes | None, options: bytes, callback: Any = None) -> Result:
        """el_generate, or el_generate_stream when ``callback`` (an ``el_stream_cb``) is given."""
        tools_arg = ffi.NULL if tools is None else tools
        if callback is None:
            out = lib().el_generate(self.ptr, messages, tools_arg, options)
        else:
            out = lib().el_generate_stream(self.ptr, messages, tools_arg, options, callback, ffi.NULL)
        result = cast(Result, take_json(out))
        for warning in result.get("warnings", ()):
            warnings.warn(warning, ModelWarning, stacklevel=4)  # once per message, as Python's filter shows it
        return result

    def embed(self, input: bytes, options: bytes) -> Embeddings:
        return cast(Embeddings, take_json(lib().el_embed(self.ptr, input, options)))

    def stats(self) -> dict[str, Any]:
        return take_json(lib().el_stats(self.ptr))

    def cancel(self) -> None:
        check(lib().el_cancel(self.ptr))

    def cancel_request(self, request_id: str) -> None:
        check(lib().el_cancel_request(self.ptr, request_id.encode()))

    def reset(self) -> None:
        check(lib().el_reset(self.ptr))

    def forget(self, session: str | None, scope: str | None = None) -> None:
        """el_forget (a session of the default scope), or el_forget_scope when ``scope`` is given."""
        c_session = ffi.NULL if session is None else session.encode()
        if scope is None:
            check(lib().el_forget(self.ptr, c_session))
        else:
            check(lib().el_forget_scope(self.ptr, scope.encode(), c_session))
