"""The exceptions pyshim raises: one family under ``ShimError``.

Every error the C library reports becomes one of these, and so does every error
pyshim raises on purpose (unknown model names, failed downloads, tools it cannot
describe, an agent run that could not finish). Each also derives from the builtin
a caller would naturally catch (``ValueError``, ``LookupError``, ``OSError``).
"""

from __future__ import annotations

from typing import Any

from .shapes import AgentResult


class ShimError(Exception):
    """An error reported by libel_shim (or by pyshim around it)."""


class LibraryNotFound(ShimError, OSError):
    """libel_shim.so could not be found or loaded."""


class ModelLoadError(ShimError):
    """el_open refused the configuration or the model file."""


class ModelFileNotFound(ModelLoadError, FileNotFoundError):
    """The model file does not exist (``errno`` ENOENT, ``filename`` the path)."""


class InvalidConfig(ModelLoadError, TypeError):
    """A keyword ``Model`` (el_open) does not take, as Python reports an unexpected keyword."""


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


class ClosedModel(ShimError):
    """The model was closed (or the handle is invalid)."""


class AgentError(ShimError):
    """An agent run stopped by an error; ``result`` holds the transcript so far and the tools that ran."""

    def __init__(self, message: str, result: AgentResult, *args: Any) -> None:
        super().__init__(message, *args)
        self.result = result


def open_error(message: str) -> ModelLoadError:
    """el_open's refusal as the exception a caller expects: an unknown keyword is a TypeError."""
    if message.startswith("unknown config key"):
        return InvalidConfig(message)
    return ModelLoadError(message)


def error_for(message: str) -> ShimError:
    if "invalid or closed handle" in message:
        return ClosedModel(message)
    if message.startswith("prompt is ") and "the context holds" in message:
        return ContextFull(message)
    return InvalidRequest(message)
