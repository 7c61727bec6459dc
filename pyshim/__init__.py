"""pyshim: local GGUF models behind an OpenAI-shaped, JSON-in/JSON-out C ABI.

>>> import pyshim
>>> with pyshim.Model("qwen2.5-coder-0.5b-instruct", n_ctx=4096) as m:
...     r = m.generate([{"role": "user", "content": "Hi"}], temperature=0)
...     print(r["content"])
"""

from __future__ import annotations

from . import models
from ._lib import build_info, version
from .agent import Agent, AgentResult
from .errors import (
    AgentError,
    Cancelled,
    ClosedModel,
    Code,
    ContextFull,
    DeviceLost,
    DeviceUnreachable,
    InternalError,
    InvalidConfig,
    InvalidConfigValue,
    InvalidRequest,
    InvalidTool,
    LibraryNotFound,
    ModelFetchError,
    ModelFileNotFound,
    ModelLoadError,
    ModelWarning,
    OutOfMemory,
    ShimError,
    TimedOut,
    UnknownModel,
    UnknownOption,
)
from .model import Model, Stream, default_model, generate
from .tools import Tool, function_schema

__all__ = [
    "Agent",
    "AgentError",
    "AgentResult",
    "Cancelled",
    "ClosedModel",
    "Code",
    "ContextFull",
    "DeviceLost",
    "DeviceUnreachable",
    "InternalError",
    "InvalidConfig",
    "InvalidConfigValue",
    "InvalidRequest",
    "InvalidTool",
    "LibraryNotFound",
    "Model",
    "ModelFetchError",
    "ModelFileNotFound",
    "ModelLoadError",
    "ModelWarning",
    "OutOfMemory",
    "ShimError",
    "Stream",
    "TimedOut",
    "Tool",
    "UnknownModel",
    "UnknownOption",
    "build_info",
    "default_model",
    "function_schema",
    "generate",
    "models",
    "version",
]
