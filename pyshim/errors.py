"""The exceptions pyshim raises. Every error the C library reports becomes one of these."""

from __future__ import annotations


class ShimError(Exception):
    """An error reported by libel_shim (or by pyshim around it)."""


class LibraryNotFound(ShimError, OSError):
    """libel_shim.so could not be found or loaded."""


class ModelLoadError(ShimError):
    """el_open refused the configuration or the model file."""


class InvalidRequest(ShimError, ValueError):
    """The messages, tools or options were malformed."""


class ClosedModel(ShimError):
    """The model was closed (or the handle is invalid)."""


def error_for(message: str) -> ShimError:
    if "invalid or closed handle" in message:
        return ClosedModel(message)
    return InvalidRequest(message)
