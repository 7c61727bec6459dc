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
    ClosedModel,
    ContextFull,
    InvalidConfig,
    InvalidRequest,
    InvalidTool,
    LibraryNotFound,
    ModelFetchError,
    ModelFileNotFound,
    ModelLoadError,
    ShimError,
    UnknownModel,
)
from .model import Model, Stream, default_model, generate
from .tools import Tool, function_schema

__all__ = [
    "Agent",
    "AgentError",
    "AgentResult",
    "ClosedModel",
    "ContextFull",
    "InvalidConfig",
    "InvalidRequest",
    "InvalidTool",
    "LibraryNotFound",
    "Model",
    "ModelFetchError",
    "ModelFileNotFound",
    "ModelLoadError",
    "ShimError",
    "Stream",
    "Tool",
    "UnknownModel",
    "build_info",
    "default_model",
    "function_schema",
    "generate",
    "models",
    "version",
]

# Names that annotations use across modules which import each other, so each names them only
# under TYPE_CHECKING: bound here, once every module is loaded, so that typing.get_type_hints
# reads every public signature (tests/test_api_habits.py).
from . import _call
from . import aio as _aio
from . import errors as _errors
from . import model as _model

# By setattr: a type checker sees each name as bound already (imported under TYPE_CHECKING) and refuses the assignment.
for _module, _name, _value in (
    (_call, "Delta", _model.Delta),
    (_call, "Result", _model.Result),
    (_errors, "AgentResult", AgentResult),
    (_model, "AsyncStream", _aio.AsyncStream),
    (_aio, "Agent", Agent),
    (_aio, "AgentResult", AgentResult),
):
    setattr(_module, _name, _value)
del _module, _name, _value
