"""Anthropic's Messages API around el_generate: request body in, message, stream events and errors out.

Pure functions, no I/O (``pyshim/server.py`` routes, authenticates and streams). A Messages request
becomes the library's one request: OpenAI-style messages, tools and an options dict, as
``pyshim.openai_api`` makes them; what the library validates (sampling values, tool schemas,
stop strings) it still validates, and its messages reach the client verbatim.

The mapping:
- ``system`` (a string or text blocks) is the first message; ``text`` blocks are text parts,
  ``tool_use`` blocks are ``tool_calls`` (``input`` as JSON text), each ``tool_result`` is a
  ``tool`` message (string or text-block content; ``is_error`` prefixes ``"error: "``, as
  ``pyshim.Agent`` words a failed tool). ``thinking`` blocks sent back are dropped; images,
  documents and server tools are refused (400): the models here read text only.
- ``tools`` become function tools (``input_schema`` is the ``parameters``); ``tool_choice``
  auto / any / tool / none become "auto" / "required" / the named function / "none", and
  ``disable_parallel_tool_use`` is ``parallel_tool_calls: false``.
- ``max_tokens`` (required), ``temperature``, ``top_p``, ``top_k`` pass under their names,
  ``stop_sequences`` as ``stop``; ``metadata``, ``thinking``, ``cache_control`` and other fields
  are ignored (the library caches prompt prefixes by itself).
- The session (the slot a conversation keeps warm) is the ``X-Session-Id`` header, as at the
  OpenAI door. ``metadata.user_id`` names an end user, not a conversation: one user may run
  several at once, and a session's calls take turns on its one slot. The session is named
  within the API key the client sent (a digest of it), so two keys never share one.
- ``stop_sequence``: the library ends at a stop string without saying which; with
  ``stop_sequences`` the call asks for logprobs, whose tokens hold the text decoded past the
  content, and the earliest stop string in it is the one that ended the turn.
- A final assistant message is continued (a prefill); the library returns it whole, so its
  given beginning is taken off the content, as Anthropic answers only what follows.
- A stream's ``message_start`` carries the input tokens, from the first delta's ``prompt``
  counts (the door sends headers only once that delta came); its ``message_delta`` carries the
  usage in full, which the SDK takes over.
- ``usage.input_tokens`` is the prompt less what the cache held (``cache_read_input_tokens``),
  as Anthropic counts it; count_tokens answers the whole prompt's count (``n_prompt``) of a
  one-token generation: release builds have no way to tokenize without one, and the prompt it
  evaluates stays cached for the message that usually follows.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .openai_api import ApiError, DoorCall, sse, unknown_key
from .stream_calls import StreamCalls

__all__ = ["Message", "MessageStream", "MessagesRequest", "error_body", "error_response", "parse_request"]

# HTTP status -> Anthropic's error type. 503 (the model loading, the queue full) is answered as
# Anthropic's own 529 overloaded_error, which its SDK retries.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
STATUS = {503: 529}

# Deeper than this a schema or a tool input is refused (the library refuses JSON past 512 levels;
# refused here, it is a 400 before anything is encoded).
MAX_DEPTH = 512


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def error_response(err: ApiError) -> tuple[dict[str, Any], int]:
    """The body and status of an error, in Anthropic's shape."""
    status = STATUS.get(err.status, err.status)
    return error_body(status, err.message), status


def _bad(message: str) -> ApiError:
    return ApiError(400, message)


def api_key(headers: Mapping[str, str]) -> str | None:
    """The key the client sent: ``x-api-key`` (the SDK's), else ``Authorization: Bearer``."""
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@dataclass(kw_only=True)
class MessagesRequest(DoorCall):
    """One Messages request, translated to el_generate's arguments."""

    prefill: str = ""  # the final assistant message's text, which the result repeats
    stops: list[str] = field(default_factory=list)


def _expect(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """body[name] if absent, null or of ``kind``; booleans count only as booleans."""
    value = body.get(name)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if value is not None and (not isinstance(value, kinds) or isinstance(value, bool) is not (bool in kinds)):
        raise _bad(f"{name}: must be {what}")
    return value


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests arrays and objects past ``limit`` levels (iteratively)."""
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        if depth > limit:
            return True
        todo.extend((x, depth + 1) for x in v if isinstance(x, (dict, list)))
    return False


def _text_of(content: Any, where: str) -> str:
    """The text of a system prompt or a tool result: a string, or text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}: must be a string or an array of text blocks")
    parts = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise _bad(f"{where}: only text blocks are supported here, not {kind!r}")
        parts.append(block["text"])
    return "\n".join(parts)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(f"{where}.content: must be a string or an array of content blocks")
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _bad(f"{where}.content.{i}: must be a content block object with a type")
    return content


def _parts(text: list[dict[str, str]]) -> str | list[dict[str, str]]:
    """One text part as a plain string (what every chat template reads), several as parts."""
    return text[0]["text"] if len(text) == 1 else text


def _text_block(block: Mapping[str, Any], where: str) -> str:
    """A text block's text, which must be a string."""
    if not isinstance(block.get("text"), str):
        raise _bad(f"{where}.text: must be a string")
    return str(block["text"])


def _user(content: Any, where: str) -> list[dict[str, Any]]:
    """A user turn: its text as a user message, each tool_result as a tool message, in order."""
    out: list[dict[str, Any]] = []
    text: list[dict[str, str]] = []
    for i, block in enumerate(_blocks(content, where)):
        kind = block["type"]
        if kind == "text":
            text.append({"type": "text", "text": _text_block(block, f"{where}.content.{i}")})
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str):
                raise _bad(f"{where}.content.{i}.tool_use_id: must be a string")
            result = _text_of(block.get("content", ""), f"{where}.content.{i}.content")
            if block.get("is_error") is True:
                result = f"error: {result}"
            if text:
                out.append({"role": "user", "content": _parts(text)})
                text = []
            out.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            raise _bad(f"{where}.content.{i}: {kind!r} blocks are not supported (text and tool_result are)")
    if text or not out:
        out.append({"role": "user", "content": _parts(text)})
    return out


def _assistant(content: Any, where: str) -> dict[str, Any]:
    """An assistant turn: its text and its tool_use blocks as tool_calls."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(_blocks(content, where)):
        kind = block["type"]
        if kind == "text":
            text.append(_text_block(block, f"{where}.content.{i}"))
        elif kind == "tool_use":
            name, call_id, args = block.get("name"), block.get("id"), block.get("input", {})
            if not isinstance(name, str) or not isinstance(call_id, str) or not isinstance(args, dict):
                raise _bad(f"{where}.content.{i}: a tool_use block needs a string id and name and an input object")
            if _too_deep(args):
                raise _bad(f"{where}.content.{i}.input: nests arrays and objects too deeply")
            arguments = json.dumps(args, ensure_ascii=False)
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        elif kind not in ("thinking", "redacted_thinking"):  # the model's own reasoning is not sent back
            raise _bad(f"{where}.content.{i}: {kind!r} blocks are not supported (text and tool_use are)")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(tools: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad(f"tools.{i}: must be an object")
        if tool.get("type") not in (None, "custom"):
            raise _bad(f"tools.{i}: server tools ({tool.get('type')!r}) are not supported; define a custom tool")
        name, schema, description = tool.get("name"), tool.get("input_schema"), tool.get("description")
        if not isinstance(name, str) or not isinstance(schema, dict):
            raise _bad(f"tools.{i}: a tool needs a string name and an input_schema object")
        if description is not None and not isinstance(description, str):
            raise _bad(f"tools.{i}.description: must be a string")
        if _too_deep(schema):
            raise _bad(f"tools.{i}.input_schema: nests arrays and objects too deeply")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if description is not None:
            function["description"] = description
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Mapping[str, Any], options: dict[str, Any]) -> None:
    kind = choice.get("type")
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise _bad("tool_choice.name: must be a string")
        options["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif kind in ("auto", "any", "none"):
        options["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    else:
        raise _bad("tool_choice.type: must be 'auto', 'any', 'tool' or 'none'")
    if choice.get("disable_parallel_tool_use") is True:
        options["parallel_tool_calls"] = False


# The fields the door reads, and those of Anthropic's it accepts and ignores (they mean nothing
# for one local model: documented in the README's door section); any other is refused with 400.
READ = frozenset({"model", "max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences", "stream",
                  "temperature", "top_p", "top_k"})  # fmt: skip
IGNORED = frozenset({"metadata", "service_tier", "thinking", "container", "mcp_servers", "context_management"})


def parse_request(
    body: Any, session: str | None = None, key: str | None = None, *, count: bool = False
) -> MessagesRequest:
    """Check the envelope and map the fields. ``count``: a count_tokens body (no max_tokens;
    the call generates one token). ``session`` (the X-Session-Id header) is named within ``key``."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    if found := unknown_key(body, READ | IGNORED):
        key, hint = found  # Anthropic's own wording for a field it does not take
        raise _bad(f"{key}: Extra inputs are not permitted{hint}")
    model = _expect(body, "model", str, "a string")
    max_tokens = _expect(body, "max_tokens", int, "an integer")
    if count:
        max_tokens = 1
    elif max_tokens is None:
        raise _bad("max_tokens: field required")
    elif max_tokens < 1:
        raise _bad("max_tokens: must be at least 1")
    turns = _expect(body, "messages", list, "an array of messages")
    if not turns:
        raise _bad("messages: at least one message is required")

    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None and system != "" and system != []:
        messages.append({"role": "system", "content": _text_of(system, "system")})
    prefill = ""
    for i, turn in enumerate(turns):
        where = f"messages.{i}"
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
            raise _bad(f"{where}: must be an object with role 'user' or 'assistant'")
        if "content" not in turn:
            raise _bad(f"{where}.content: field required")
        if turn["role"] == "user":
            messages.extend(_user(turn["content"], where))
            continue
        message = _assistant(turn["content"], where)
        if i == len(turns) - 1 and "tool_calls" not in message:
            prefill = message["content"]  # continued: the result repeats it
        messages.append(message)

    tools = _tools(_expect(body, "tools", list, "an array of tools") or [])
    options: dict[str, Any] = {"max_tokens": max_tokens}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            options[name] = body[name]
    stops = _expect(body, "stop_sequences", list, "an array of strings") or []
    if not all(isinstance(s, str) for s in stops):
        raise _bad("stop_sequences: must be an array of strings")
    stops = [s for s in stops if s]
    if stops and not count:
        options["stop"] = stops
        options["logprobs"] = True  # which stop string ended the turn (see the module's doc)
    choice = _expect(body, "tool_choice", dict, "an object")
    if choice is not None:
        _tool_choice(choice, options)
    if session:
        options["session"] = session  # within the key's scope, which the route gives every call
    stream = bool(_expect(body, "stream", bool, "a boolean")) and not count
    return MessagesRequest(
        model=model, messages=messages, tools=tools or None, options=options, stream=stream, prefill=prefill,
        stops=stops if not count else [],
    )  # fmt: skip


# -- responses ------------------------------------------------------------------------------------


def _input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the object Anthropic's ``input`` is; {} for a call cut off
    before its JSON was complete (stop_reason max_tokens says so)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def usage(result: Mapping[str, Any]) -> dict[str, int]:
    n_prompt, reused = int(result.get("n_prompt") or 0), int(result.get("n_reused") or 0)
    output = int((result.get("usage") or {}).get("completion_tokens", result.get("n_decoded") or 0))
    return {
        "input_tokens": n_prompt - reused,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": reused,
        "output_tokens": output,
    }


def count_response(result: Mapping[str, Any]) -> dict[str, int]:
    return {"input_tokens": int(result.get("n_prompt") or 0)}


class Message:
    """The envelope of one message: its id and model, and what the request said about its end."""

    def __init__(self, model: str, req: MessagesRequest) -> None:
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model = model
        self.prefill = req.prefill
        self.stops = req.stops

    def text(self, result: Mapping[str, Any]) -> str:
        """The content the model wrote: a prefill's given beginning taken off."""
        content = result.get("content") or ""
        return content[len(self.prefill) :] if self.prefill and content.startswith(self.prefill) else content

    def stop(self, result: Mapping[str, Any]) -> tuple[str, str | None]:
        """stop_reason and stop_sequence."""
        reason = result.get("finish_reason")
        if reason == "tool_calls" and result.get("tool_calls"):
            return "tool_use", None
        if result.get("truncated"):
            return "model_context_window_exceeded", None
        if reason == "length":
            return "max_tokens", None
        if reason == "stop" and self.stops:
            # The decoded tokens hold the content (without the prefill) and what followed it.
            decoded = "".join(t.get("token", "") for t in (result.get("logprobs") or {}).get("content") or [])
            written = self.text(result)
            after = decoded[len(written) :] if decoded.startswith(written) else decoded
            found = [(after.find(s), -len(s), s) for s in self.stops if s in after]
            if found:
                return "stop_sequence", min(found)[2]
        return "end_turn", None

    def envelope(self, content: list[Any], reason: str | None, sequence: str | None, use: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": use,
        }

    def response(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """A ``message`` from el_generate's result."""
        content: list[dict[str, Any]] = []
        if text := self.text(result):
            content.append({"type": "text", "text": text})
        for call in result.get("tool_calls") or []:
            fn = call.get("function") or {}
            content.append(
                {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": _input(fn.get("arguments"))}
            )
        return self.envelope(content, *self.stop(result), usage(result))


def _sse(event: str, data: Any) -> str:
    return sse(data, event)


class MessageStream:
    """Anthropic's stream events for one message, from the library's deltas: ``start()``, then
    ``delta()`` for each, then ``finish()`` with the result (each returns the SSE text to send).

    Content blocks open one at a time: text, or a tool_use per call (the library sends a call's
    id and name first, then its arguments, which go out as ``input_json_delta``)."""

    def __init__(self, message: Message, prompt: Mapping[str, Any] | None = None) -> None:
        self.message = message
        self.prompt = prompt  # the first delta's {"n_prompt", "n_reused"}, for message_start's usage
        self._skip = message.prefill  # the prefill's text, which the first deltas repeat
        self._index = -1  # the open block, if _open
        self._open: str | None = None
        self._calls = StreamCalls()  # where each call's tool_use block is

    def start(self) -> str:
        """``message_start``, with the input's tokens as Anthropic counts them when the prompt's
        counts are known."""
        message = self.message.envelope([], None, None, usage({**(self.prompt or {}), "usage": {}}))
        return _sse("message_start", {"type": "message_start", "message": message})

    def _close(self) -> str:
        if self._open is None:
            return ""
        self._open = None
        return _sse("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def _begin(self, kind: str, block: dict[str, Any]) -> str:
        out = self._close()
        self._index += 1
        self._open = kind
        return out + _sse(
            "content_block_start", {"type": "content_block_start", "index": self._index, "content_block": block}
        )

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        return _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def delta(self, delta: Mapping[str, Any]) -> str:
        """The events of one library delta; a ``ping`` for prompt progress (no text yet)."""
        out: list[str] = []
        text = delta.get("content") or ""
        if self._skip and text:  # the prefill's text comes back first: drop what repeats it
            n = len(os.path.commonprefix([self._skip, text]))  # noqa: RUF071 (characters, as meant)
            self._skip = self._skip[n:] if n == len(text) else ""
            text = text[n:]
        if text:
            if self._open != "text":
                out.append(self._begin("text", {"type": "text", "text": ""}))
            out.append(self._delta(self._index, {"type": "text_delta", "text": text}))
        for piece in self._calls.pieces(delta):
            if piece.id is not None:
                block = {"type": "tool_use", "id": piece.id, "name": piece.name or "", "input": {}}
                out.append(self._begin("tool_use", block))
                self._calls.place(piece.index, self._index)
            index = self._calls.where(piece.index)
            if piece.arguments and index is not None:
                out.append(self._delta(index, {"type": "input_json_delta", "partial_json": piece.arguments}))
        if not out and "prompt_progress" in delta:
            out.append(_sse("ping", {"type": "ping"}))
        return "".join(out)

    def finish(self, result: Mapping[str, Any]) -> str:
        reason, sequence = self.message.stop(result)
        end = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage(result),
        }
        return self._close() + _sse("message_delta", end) + _sse("message_stop", {"type": "message_stop"})

    def error(self, err: ApiError) -> str:
        return _sse("error", error_response(err)[0])
