"""OpenAI's embeddings envelope around el_embed: ``POST /v1/embeddings`` body in, response out.

Pure functions, no I/O. The invariant: the input reaches the library as sent (a string, strings,
token ids or lists of them) and the library's refusals reach the client verbatim; this module
checks the envelope, and writes OpenAI's ``list`` of ``embedding`` objects, as float lists or,
for ``encoding_format: "base64"`` (what the ``openai`` client asks for by default), as base64 of
little-endian float32, the bytes the client decodes with numpy.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .openai_api import ApiError

__all__ = ["EmbeddingsRequest", "parse_request", "response"]

ENCODINGS = ("float", "base64")


@dataclass
class EmbeddingsRequest:
    model: str | None  # None: the served model
    input: Any
    encoding_format: str
    dimensions: int | None


def parse_request(body: Any) -> EmbeddingsRequest:
    """The request's fields, checked; 400 with OpenAI's ``param`` for a bad envelope."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "'model' must be a string", param="model")
    if "input" not in body or body["input"] is None:
        raise ApiError(400, "'input' is required", param="input")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise ApiError(400, f"'encoding_format' must be one of {', '.join(ENCODINGS)}", param="encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise ApiError(400, "'dimensions' must be a positive integer", param="dimensions")
    return EmbeddingsRequest(model, body["input"], encoding, dimensions)


def response(req: EmbeddingsRequest, result: Mapping[str, Any], name: str) -> dict[str, Any]:
    """OpenAI's response for el_embed's result. ``dimensions`` other than the model's own is
    refused: shortening a vector is only meaningful for models trained for it (OpenAI's v3)."""
    n_embd = int(result["n_embd"])
    if req.dimensions is not None and req.dimensions != n_embd:
        message = f"this model's embeddings have {n_embd} dimensions; 'dimensions' {req.dimensions} is not supported"
        raise ApiError(400, message, param="dimensions", code="invalid_value")
    data = [
        {"object": "embedding", "index": item["index"], "embedding": _encoded(item["embedding"], req.encoding_format)}
        for item in result["data"]
    ]
    tokens = int(result["n_tokens"])
    return {
        "object": "list",
        "data": data,
        "model": name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
