"""pyshim: local GGUF models behind an OpenAI-shaped, JSON-in/JSON-out C ABI.

>>> import pyshim
>>> with pyshim.Model("qwen2.5-coder-0.5b-instruct", n_ctx=4096) as m:
...     r = m.generate([{"role": "user", "content": "Hi"}], temperature=0)
...     print(r["content"])
"""

from __future__ import annotations

from . import models
from ._lib import version
from .errors import ClosedModel, InvalidRequest, LibraryNotFound, ModelLoadError, ShimError
from .model import Model, Stream, default_model, generate

__all__ = [
    "Model",
    "Stream",
    "generate",
    "default_model",
    "models",
    "version",
    "ShimError",
    "InvalidRequest",
    "ModelLoadError",
    "ClosedModel",
    "LibraryNotFound",
]
