"""OpenAI's chat-completions envelope around el_generate: request body in, response and chunks out.

Pure functions, no I/O. The invariant: what the library already speaks (messages, tools,
tool_choice, response_format, stop, logprobs, logit_bias, ...) passes through unchanged and is
validated by the library, whose messages reach the client verbatim; this module only renames
fields, checks the envelope, and builds OpenAI's exact ``chat.completion`` /
``chat.completion.chunk`` / error shapes.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequest
from .habits import OPENAI_IGNORED, OPENAI_RENAMES, openai_renamed
from .stream_calls import StreamCalls

__all__ = [
    "ApiError",
    "ChatRequest",
    "Completion",
    "check_known",
    "check_limits",
    "error_body",
    "key_scope",
    "openai_logprobs",
    "parse_request",
]

# Request fields handed to el_generate as options under the same name. top_k, min_p,
# repeat_penalty, repeat_last_n and ignore_eos are llama.cpp's extensions (llama-server takes
# them too). OpenAI's own names for two of the library's options are mapped by pyshim.habits.
PASSTHROUGH = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
    "repeat_last_n",
    "seed",
    "stop",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "top_k",
    "min_p",
    "ignore_eos",
    "speculative",
    "grammar_tools",
)

# Chat-completion fields the door reads (PASSTHROUGH and the envelope), and OpenAI's fields it
# accepts and ignores because they mean nothing for one local model (docs: README, "The OpenAI
# door"). Any other field is refused with 400, as OpenAI refuses an unrecognised argument, naming
# the nearest known one: a misspelt "temprature" must not pass as the default.
READ = frozenset({"model", "messages", "tools", "n", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                  "session", "prompt_cache_key", *PASSTHROUGH})  # fmt: skip
IGNORED = OPENAI_IGNORED | {"functions", "function_call", "cache_prompt", "id_slot"}  # legacy and llama-server's


def unknown_key(body: Mapping[str, Any], known: frozenset[str]) -> tuple[str, str] | None:
    """The first field of ``body`` not in ``known``, and a did-you-mean hint ("" if none is near);
    every door API refuses such a field in its own error shape."""
    for key in body:
        if key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1)
            return key, f"; did you mean '{near[0]}'?" if near else ""
    return None


def check_known(body: Mapping[str, Any], read: frozenset[str], ignored: frozenset[str]) -> None:
    """400 for a field neither read nor knowingly ignored, with the nearest known name."""
    if found := unknown_key(body, read | ignored):
        key, hint = found
        raise ApiError(400, f"Unrecognized request argument supplied: {key}{hint}", param=key,
                       code="unknown_parameter")  # fmt: skip


# el_generate's finish reasons that OpenAI does not have. "cancelled" reaches no client in
# practice: a call is cancelled only when its client has gone.
FINISH_REASONS = {"cancelled": "stop"}

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
}
# OpenAI's own limits, refused as it refuses them (the library would take more).
MAX_STOP = 4
MAX_CHOICES = 8  # n: one generation each, so a bound on one request's work (OpenAI's is 128)
TEMPERATURE = (0.0, 2.0)


class ApiError(Exception):
    """An error to answer with OpenAI's error shape and an HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, ERROR_TYPES.get(self.status, "server_error"), self.param, self.code)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


@dataclass(kw_only=True)
class DoorCall:
    """One request of any API the door speaks, as the library's call: what each API's parse gives
    the route (the API's own extras are its subclass's fields)."""

    model: str | None  # None: the served model (the door's policy, pyshim/server.py Door.check_model)
    messages: list[Any]
    tools: list[Any] | None
    options: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    n: int = 1  # choices, each its own generation (``choice_options``); a stream has one

    def choice_options(self, i: int) -> dict[str, Any]:
        """Choice ``i``'s options: a given seed moves by ``i``, so that n seeded choices are n
        samples, each reproducible, rather than one sample n times."""
        seed = self.options.get("seed")
        return {**self.options, "seed": seed + i} if i and isinstance(seed, int) else self.options


@dataclass(kw_only=True)
class ChatRequest(DoorCall):
    """One chat-completions request, translated to el_generate's arguments."""

    include_usage: bool = False


def _expect(body: Mapping[str, Any], name: str, kind: type, what: str) -> Any:
    """body[name] if absent, null or of ``kind``; True and False count as booleans only."""
    value = body.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool)):
        raise ApiError(400, f"'{name}' must be {what}", param=name, code="invalid_type")
    return value


def key_scope(key: str | None) -> str:
    """The scope of an API key in session names: a digest, so that two keys never share a
    session (and the key itself appears in no name)."""
    return hashlib.sha256((key or "").encode()).hexdigest()[:16]


def check_limits(body: Mapping[str, Any]) -> None:
    """What OpenAI refuses that the library would run: more than 4 stop strings, a temperature
    outside [0, 2]."""
    stop = body.get("stop")
    if isinstance(stop, list) and len(stop) > MAX_STOP:
        raise ApiError(400, f"'stop' takes at most {MAX_STOP} strings", param="stop", code="invalid_value")
    t = body.get("temperature")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and not TEMPERATURE[0] <= t <= TEMPERATURE[1]:
        message = f"'temperature' must be between 0 and 2, not {t}"
        raise ApiError(400, message, param="temperature", code="invalid_value")


def parse_request(body: Any, session_header: str | None = None) -> ChatRequest:
    """Check the envelope and map the fields (OpenAI's names by pyshim.habits' one table). The
    session is, first found: the body's ``session`` (``extra_body``), the ``X-Session-Id`` header,
    the body's ``prompt_cache_key`` (``session`` beside a different ``prompt_cache_key``: 400)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = _expect(body, "model", str, "a string")
    messages = _expect(body, "messages", list, "an array of messages")
    if not messages:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages", code="missing_required_parameter")
    tools = _expect(body, "tools", list, "an array of tools") or None
    n = _expect(body, "n", int, "an integer") or 1
    stream = bool(_expect(body, "stream", bool, "a boolean"))
    if not 1 <= n <= MAX_CHOICES or (stream and n != 1):
        limit = "1 when streamed" if stream else f"from 1 to {MAX_CHOICES}"
        raise ApiError(400, f"'n' must be {limit}, not {n}", param="n", code="unsupported_value")
    stream_options = _expect(body, "stream_options", dict, "an object") or {}

    check_known(body, READ, IGNORED)
    check_limits(body)
    given = {k: body[k] for k in ("max_tokens", "session", *OPENAI_RENAMES, *PASSTHROUGH) if body.get(k) is not None}
    if session_header is not None and "session" not in given:  # the header names it before prompt_cache_key
        given.pop("prompt_cache_key", None)
        given["session"] = session_header
    try:
        options = openai_renamed(given)
    except InvalidRequest as e:
        raise ApiError(400, str(e), code="invalid_value") from None
    if not isinstance(options.get("session", ""), str):
        raise ApiError(400, "'session' must be a string", param="session", code="invalid_type")
    return ChatRequest(
        model=model, messages=messages, tools=tools, options=options, stream=stream, n=n,
        include_usage=bool(stream_options.get("include_usage")),
    )  # fmt: skip


def openai_logprobs(logprobs: Any) -> Any:
    """The library's logprobs without its extra token "id", in OpenAI's exact shape."""
    if not logprobs:
        return None

    def entry(e: Mapping[str, Any]) -> dict[str, Any]:
        out = {"token": e.get("token"), "logprob": e.get("logprob"), "bytes": e.get("bytes")}
        if "top_logprobs" in e:
            out["top_logprobs"] = [entry(t) for t in e["top_logprobs"]]
        return out

    return {"content": [entry(e) for e in logprobs.get("content") or []], "refusal": None}


def _usage(result: Mapping[str, Any]) -> Any:
    """OpenAI's usage; the prompt tokens the cache already held are its ``cached_tokens``."""
    usage = result.get("usage")
    if usage is None:
        return None
    return {**usage, "prompt_tokens_details": {"cached_tokens": result.get("n_reused", 0)}}


def _call_chunks(delta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A delta's tool calls as OpenAI streams them: one entry per call index, the opening one with
    the call's id, type and name (pyshim.stream_calls reads the library's pieces)."""
    out: list[dict[str, Any]] = []
    for piece in StreamCalls.pieces(delta):
        if piece.id is not None:
            fn = {"name": piece.name or "", "arguments": piece.arguments}
            out.append({"index": piece.index, "id": piece.id, "type": "function", "function": fn})
        else:
            out.append({"index": piece.index, "function": {"arguments": piece.arguments}})
    return out


class Completion:
    """The envelope of one completion: its id, creation time and model, shared by all its chunks."""

    def __init__(self, model: str, fingerprint: str | None = None) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model, self.fingerprint = model, fingerprint
        self.logprobs_sent = 0  # entries the stream's chunks carried so far

    def _envelope(self, obj: str, choices: list[Any], usage: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
            "system_fingerprint": self.fingerprint,
        }

    def response(self, result: Mapping[str, Any], more: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """A ``chat.completion`` from el_generate's result, and ``more`` results as choices 1, 2, ...
        (the prompt counted once, every choice's completion tokens)."""
        choices = [self._choice(i, r) for i, r in enumerate([result, *more])]
        usage = _usage(result)
        if usage is not None and more:
            done = usage["completion_tokens"] + sum((r.get("usage") or {}).get("completion_tokens", 0) for r in more)
            usage.update(completion_tokens=done, total_tokens=usage["prompt_tokens"] + done)
        return self._envelope("chat.completion", choices, usage)

    def _choice(self, index: int, result: Mapping[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": result.get("content"), "refusal": None}
        if result.get("tool_calls"):
            message["tool_calls"] = result["tool_calls"]
        if result.get("reasoning_content"):
            message["reasoning_content"] = result["reasoning_content"]  # llama-server's name for it
        return {
            "index": index,
            "message": message,
            "logprobs": openai_logprobs(result.get("logprobs")),
            "finish_reason": FINISH_REASONS.get(result["finish_reason"], result["finish_reason"]),
        }

    def chunk(
        self, delta: Mapping[str, Any], finish_reason: str | None = None, logprobs: Any = None, usage: bool = False
    ) -> dict[str, Any]:
        """A ``chat.completion.chunk`` with one choice. With ``stream_options.include_usage``
        every chunk carries ``"usage": null`` (``usage=True``) until the usage chunk."""
        choice = {"index": 0, "delta": dict(delta), "logprobs": logprobs, "finish_reason": finish_reason}
        out = self._envelope("chat.completion.chunk", [choice], None)
        if not usage:
            del out["usage"]
        return out

    def first_chunk(self, usage: bool) -> dict[str, Any]:
        # content null, as llama-server sends it: OpenAI's clients take null or "", and llama.cpp's
        # own server tests refuse a chunk whose content is present and empty.
        return self.chunk({"role": "assistant", "content": None, "refusal": None}, usage=usage)

    def delta_chunk(self, delta: Mapping[str, Any], usage: bool) -> dict[str, Any] | None:
        """The chunk of one library delta; None for deltas with no text (prompt progress)."""
        out: dict[str, Any] = {}
        if delta.get("content"):
            out["content"] = delta["content"]
        if delta.get("reasoning_content"):
            out["reasoning_content"] = delta["reasoning_content"]
        if delta.get("tool_calls"):
            out["tool_calls"] = _call_chunks(delta)
        if not out:
            return None
        logprobs = delta.get("logprobs")
        self.logprobs_sent += len((logprobs or {}).get("content") or [])
        return self.chunk(out, logprobs=openai_logprobs(logprobs), usage=usage)

    def final_chunk(self, result: Mapping[str, Any], usage: bool) -> dict[str, Any]:
        """The chunk closing the choice: its finish reason, and the logprobs no chunk carried
        yet (the tokens of held-back text: a stop string, the end); each chunk before carried
        its own tokens', and OpenAI's stream helpers concatenate them across chunks."""
        reason = FINISH_REASONS.get(result["finish_reason"], result["finish_reason"])
        rest = (result.get("logprobs") or {}).get("content") or []
        rest = rest[self.logprobs_sent :]
        return self.chunk({}, reason, openai_logprobs({"content": rest}) if rest else None, usage=usage)

    def usage_chunk(self, result: Mapping[str, Any]) -> dict[str, Any]:
        return self._envelope("chat.completion.chunk", [], _usage(result))


def sse(data: Any, event: str | None = None) -> str:
    """One server-sent event, as every API the door speaks frames it: an ``event:`` line where the
    API names its events (Anthropic, Responses), and a ``data:`` line of JSON."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


class ChatStream:
    """Chat completions' stream events for one call (the door's ``Events``): the role chunk, a chunk
    per delta that says something, the finish chunk and the usage chunk, then ``[DONE]``, after an
    error too."""

    def __init__(self, comp: Completion, usage: bool) -> None:
        self.comp, self.usage = comp, usage

    def start(self) -> str:
        return sse(self.comp.first_chunk(self.usage))

    def delta(self, delta: Mapping[str, Any]) -> str:
        chunk = self.comp.delta_chunk(delta, self.usage)
        return "" if chunk is None else sse(chunk)

    def finish(self, result: Mapping[str, Any]) -> str:
        tail = sse(self.comp.final_chunk(result, self.usage))
        return tail + (sse(self.comp.usage_chunk(result)) if self.usage else "") + "data: [DONE]\n\n"

    def error(self, err: ApiError) -> str:
        return sse(err.body()) + "data: [DONE]\n\n"
