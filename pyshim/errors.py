"""The exceptions pyshim raises: one family under ``ShimError``, chosen by the library's code.

Every error the C library reports carries an ``el_code`` (native/el_shim.h); ``from_library``
turns it into one of these by that code, never by the message, and the exception keeps it as
``code``. Errors pyshim raises on purpose (unknown model names, failed downloads, tools it cannot
describe, an agent run that could not finish) are in the family too. Each also derives from the
builtin a caller would naturally catch (``ValueError``, ``TypeError``, ``FileNotFoundError``,
``TimeoutError``, ``MemoryError``, ``ConnectionError``, ``LookupError``, ``OSError``).
"""

from __future__ import annotations

import enum
import errno
from typing import Any

from .shapes import AgentResult


class Code(enum.IntEnum):
    """``el_code`` of native/el_shim.h, value for value (tests/test_error_codes.py reads the header)."""

    INTERNAL = 1
    INVALID = 2
    UNKNOWN_KEY = 3
    NOT_FOUND = 4
    LOAD = 5
    CONTEXT_FULL = 6
    CLOSED = 7
    DEVICE = 8
    TIMEOUT = 9
    CANCELLED = 10
    NO_MEMORY = 11


class ShimError(Exception):
    """An error reported by libel_shim (or by pyshim around it); ``code`` is the library's
    ``el_code`` (a ``Code``), or None for an error pyshim raised itself."""

    code: Code | None = None


class InternalError(ShimError, RuntimeError):
    """A failure inside the library or llama.cpp that the input did not cause."""


class LibraryNotFound(ShimError, OSError):
    """libel_shim.so could not be found or loaded."""


class ModelLoadError(ShimError):
    """el_open refused the configuration or the model file."""


class ModelFileNotFound(ModelLoadError, FileNotFoundError):
    """The model file does not exist (``errno`` ENOENT, ``filename`` the path)."""


class InvalidConfig(ModelLoadError, TypeError):
    """A keyword ``Model`` (el_open) does not take, as Python reports an unexpected keyword."""


class InvalidConfigValue(ModelLoadError, ValueError):
    """A setting ``Model`` (el_open) takes, given a value it cannot use (a wrong type, a number out
    of range, a chat template that does not parse)."""


class DeviceUnreachable(ModelLoadError, ConnectionError):
    """A remote device (an ``rpc`` server) could not be reached or was lost while the model loaded."""


class UnknownModel(ShimError, LookupError):
    """A model name that is neither a catalogue entry nor a file."""


class ModelFetchError(ShimError, OSError):
    """A catalogue model could not be downloaded, assembled or verified."""


class InvalidRequest(ShimError, ValueError):
    """The messages, tools or options were malformed."""


class ContextFull(InvalidRequest):
    """The prompt no longer fits the model's context (raise ``n_ctx`` or shorten the conversation)."""


class InvalidTool(InvalidRequest):
    """A Python function (or dict) that cannot be offered to the model as a tool, with the reason."""


class UnknownOption(InvalidRequest, TypeError):
    """An option (or a key inside one) the library does not have, as Python reports an unexpected
    keyword; the message suggests the nearest."""


class ClosedModel(ShimError, ValueError):
    """The model was closed (or the handle is invalid), as I/O on a closed file is a ValueError."""


class DeviceLost(ShimError, ConnectionError):
    """The backend failed or a remote device was lost or cannot be reached: the handle is dead
    (close the Model and open a new one)."""


class TimedOut(ShimError, TimeoutError):
    """The call's ``timeout_ms`` passed before it could finish (embeddings; a generation reports
    ``finish_reason="timeout"`` instead)."""


class Cancelled(ShimError):
    """``cancel()`` stopped it (embeddings; a generation reports ``finish_reason="cancelled"``)."""


class OutOfMemory(ShimError, MemoryError):
    """An allocation in the library failed."""


class ModelWarning(UserWarning):
    """A call went otherwise than asked without failing (the result's ``warnings``): tools given to a
    model whose chat template does not show them to it."""


class AgentError(ShimError):
    """An agent run stopped by an error; ``result`` holds the transcript so far and the tools that ran."""

    def __init__(self, message: str, result: AgentResult, *args: Any) -> None:
        super().__init__(message, *args)
        self.result = result


# The class of each code: for a call on an open handle, and for el_open (where the same codes
# mean a model that cannot be opened, so each is a ModelLoadError too).
_CALL: dict[Code, type[ShimError]] = {
    Code.INTERNAL: InternalError,
    Code.INVALID: InvalidRequest,
    Code.UNKNOWN_KEY: UnknownOption,
    Code.CONTEXT_FULL: ContextFull,
    Code.CLOSED: ClosedModel,
    Code.DEVICE: DeviceLost,
    Code.TIMEOUT: TimedOut,
    Code.CANCELLED: Cancelled,
    Code.NO_MEMORY: OutOfMemory,
}
_OPEN: dict[Code, type[ShimError]] = {
    Code.UNKNOWN_KEY: InvalidConfig,
    Code.INVALID: InvalidConfigValue,
    Code.DEVICE: DeviceUnreachable,
}


def from_library(error: dict[str, Any], *, opening: str | None = None) -> ShimError:
    """The exception for one error object of the library (``{"error": message, "code": n}``);
    ``opening`` is the model path when it came from el_open. A code this pyshim does not know
    (a newer library) is an ``InternalError``, as el_shim.h says to treat it."""
    message = str(error.get("error", "unknown error"))
    raw = error.get("code")
    try:
        code = Code(raw) if isinstance(raw, int) else Code.INTERNAL
    except ValueError:
        code = Code.INTERNAL
    exc: ShimError
    if opening is not None and code == Code.NOT_FOUND:
        exc = ModelFileNotFound(errno.ENOENT, message, opening)
    elif opening is not None:
        exc = _OPEN.get(code, ModelLoadError)(message)
    else:
        exc = _CALL.get(code, InternalError)(message)
    exc.code = code
    return exc
