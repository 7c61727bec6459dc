"""OpenAI's Responses API around el_generate: request body in, response object, stream events out.

Pure functions and one bounded in-memory store, no I/O (``pyshim/server.py`` routes, authenticates
and streams). A Responses request becomes the library's one request, OpenAI-style messages, tools
and options, as ``pyshim.openai_api`` makes them; what the library validates it still validates.

The mapping:
- ``instructions`` is the first (system) message; as at OpenAI, a follow-up does not inherit the
  previous response's instructions. ``input`` is a string (one user message) or items: messages
  (roles user, assistant, system, developer -> system; text parts ``input_text`` / ``output_text``),
  ``function_call`` items (joined into the assistant message before them as ``tool_calls``),
  ``function_call_output`` items (``tool`` messages); ``reasoning`` items are dropped (the model's
  own reasoning is not sent back). Images, files, audio and other item types are refused (400).
- ``tools``: function tools only; ``tool_choice`` "auto" / "none" / "required" / a named function /
  ``allowed_tools`` (the tools narrowed to those, its mode as the choice). ``text.format``
  json_schema / json_object is the ``response_format`` (allowed beside tools: a call, or an
  answer in the schema). ``max_output_tokens`` is ``max_tokens``; ``top_logprobs`` or ``include``
  of ``message.output_text.logprobs`` ask for logprobs. ``reasoning``, ``metadata`` (echoed),
  ``user``, ``safety_identifier``, ``service_tier``, ``prompt_cache_retention`` and
  ``max_tool_calls`` (no built-in tools here) are accepted and do nothing else; ``background``,
  ``conversation``, ``prompt`` and ``truncation: "auto"`` are refused: they would need a server-side
  feature this door does not have, and silently ignoring them would change the answer.
- ``previous_response_id``: the door keeps the responses it answered (``store``, default true) in
  memory, the ``MAX_STORED`` most recent, each within the API key that created it. A follow-up's
  conversation is the stored one (its input and output) plus its own input, and it runs on the
  same library session as the response it follows, so the slot that holds that conversation's
  cache serves it (``n_reused`` covers everything before the new input). A chain's session is
  named by its first response (or by ``prompt_cache_key`` / ``X-Session-Id``) within a digest of
  the API key. Stored responses are lost when the server stops.
- Output items: a ``reasoning`` item (raw ``reasoning_text``), a ``message`` with one
  ``output_text`` part, a ``function_call`` per tool call (``call_id`` is the library's call id).
  ``finish_reason`` "length" is status ``incomplete`` with reason ``max_output_tokens``.
- Streams: ``response.created``, ``response.in_progress``, then per item ``output_item.added`` (and
  ``content_part.added``) as it opens with its deltas (``output_text.delta`` with the tokens'
  logprobs, ``reasoning_text.delta``, ``function_call_arguments.delta``), and at the end each
  item's ``.done`` events in order and ``response.completed`` (or ``response.incomplete``); every
  event carries its ``sequence_number``. An error after the stream began is an ``error`` event.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .openai_api import ApiError, DoorCall, check_known, check_limits, openai_logprobs, sse
from .response_store import ResponseStore, Stored
from .stream_calls import StreamCalls

__all__ = ["Responder", "ResponseStream", "ResponsesRequest", "new_id", "parse_request"]

PASSTHROUGH = ("temperature", "top_p", "parallel_tool_calls", "top_k", "min_p", "seed", "ignore_eos", "speculative")
IGNORED = ("reasoning", "user", "safety_identifier", "service_tier", "prompt_cache_retention", "max_tool_calls",
           "stream_options")  # fmt: skip
REFUSED = {
    "background": "background responses are not supported; run the request in the foreground",
    "conversation": "the Conversations API is not supported; continue with previous_response_id",
    "prompt": "stored prompt templates are not supported; send instructions and input",
}
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
# Every field the door reads (any other, but IGNORED, is refused with 400 as OpenAI refuses it).
READ = frozenset({"model", "input", "instructions", "tools", "tool_choice", "text", "store", "stream", "include",
                  "previous_response_id", "max_output_tokens", "metadata", "top_logprobs", "truncation",
                  "prompt_cache_key", *PASSTHROUGH, *REFUSED})  # fmt: skip


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass(kw_only=True)
class ResponsesRequest(DoorCall):
    """One Responses request, translated to el_generate's arguments."""

    conversation: list[dict[str, Any]]  # what a follow-up continues: messages without the instructions
    store: bool = True
    scope: str = ""
    session: str | None = None
    echo: dict[str, Any] = field(default_factory=dict)  # request fields the response object repeats


def _text(content: Any, where: str) -> str | list[dict[str, str]]:
    """A message's content: a string, or text parts (one part as its plain string)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}.content: must be a string or an array of content parts", "input")
    parts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise _bad(f"{where}.content[{i}]: {kind!r} parts are not supported (the models here read text only)")
        text = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(text, str):
            raise _bad(f"{where}.content[{i}].text: must be a string", "input")
        parts.append({"type": "text", "text": text})
    return parts[0]["text"] if len(parts) == 1 else parts


def _string(item: Mapping[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise _bad(f"{where}.{name}: must be a string", "input")
    return value


def _call(item: Mapping[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    """A function_call item, joined to the assistant message it follows (or a new one)."""
    call_id, name = _string(item, "call_id", where), _string(item, "name", where)
    arguments = _string(item, "arguments", where)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _items(value: Any) -> list[dict[str, Any]]:
    """``input`` as messages."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise _bad("'input' must be a string or an array of input items", "input", "invalid_type")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"{where}: must be an object", "input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise _bad(f"{where}.role: must be 'user', 'assistant', 'system' or 'developer'", "input")
            content = _text(item.get("content"), where)
            out.append({"role": "system" if role == "developer" else role, "content": content})
        elif kind == "function_call":
            _call(item, where, out)
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, where)
            content = text if isinstance(text, str) else "\n".join(p["text"] for p in text)
            out.append({"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": content})
        elif kind != "reasoning":  # the model's own reasoning is not sent back
            raise _bad(f"{where}: {kind!r} items are not supported (message, function_call, function_call_output are)")
    return out


def _tools(tools: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise _bad(f"tools[{i}]: {kind!r} tools are not supported; define a function tool", "tools")
        name, description, params = tool.get("name"), tool.get("description"), tool.get("parameters")
        if not isinstance(name, str) or (description is not None and not isinstance(description, str)):
            raise _bad(f"tools[{i}]: a function tool needs a string name (and a string description)", "tools")
        function: dict[str, Any] = {"name": name, "parameters": params or {"type": "object", "properties": {}}}
        if description is not None:
            function["description"] = description
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any, tools: list[dict[str, Any]], options: dict[str, Any]) -> list[dict[str, Any]]:
    """Sets options' tool_choice; returns the tools the call may use (allowed_tools narrows them)."""
    if choice in ("auto", "none", "required"):
        options["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        options["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = {t.get("name") for t in choice.get("tools") or [] if isinstance(t, dict)}
        options["tool_choice"] = "required" if choice.get("mode") == "required" else "auto"
        return [t for t in tools if t["function"]["name"] in allowed]
    elif choice is not None:
        raise _bad("'tool_choice' must be 'auto', 'none', 'required', a function or allowed_tools", "tool_choice")
    return tools


def _format(text: Any, options: dict[str, Any]) -> None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise _bad("text.format.schema: must be a JSON schema object", "text")
        spec = {"name": fmt.get("name", "response"), "schema": fmt["schema"], "strict": fmt.get("strict")}
        options["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif kind == "json_object":
        options["response_format"] = {"type": "json_object"}
    elif kind != "text":
        raise _bad("text.format.type: must be 'text', 'json_schema' or 'json_object'", "text")


def _options(body: Mapping[str, Any]) -> dict[str, Any]:
    for name, why in REFUSED.items():
        if body.get(name) not in (None, False):
            raise _bad(why, name, "unsupported_parameter")
    if body.get("truncation") not in (None, "disabled"):
        raise _bad("truncation 'auto' is not supported: a conversation that outgrows the context is refused",
                   "truncation", "unsupported_value")  # fmt: skip
    check_known(body, READ, frozenset(IGNORED))
    check_limits(body)
    options = {k: body[k] for k in PASSTHROUGH if body.get(k) is not None}
    if body.get("max_output_tokens") is not None:
        options["max_tokens"] = body["max_output_tokens"]
    include = body.get("include") or []
    if body.get("top_logprobs") is not None or "message.output_text.logprobs" in include:
        options["logprobs"] = True
        options["top_logprobs"] = body.get("top_logprobs") or 0
    return options


def _history(body: Mapping[str, Any], store: ResponseStore, scope: str) -> tuple[list[dict[str, Any]], str | None]:
    """The conversation and session a follow-up continues (none without previous_response_id)."""
    previous = body.get("previous_response_id")
    if previous is None:
        return [], None
    if not isinstance(previous, str):
        raise _bad("'previous_response_id' must be a string", "previous_response_id", "invalid_type")
    stored = store.get(previous, scope)
    if stored is None:
        message = f"Previous response with id '{previous}' not found."
        raise _bad(message, "previous_response_id", "previous_response_not_found")
    return [dict(m) for m in stored.conversation], stored.session


def parse_request(
    body: Any, response_id: str, scope: str, store: ResponseStore, session: str | None = None
) -> ResponsesRequest:
    """Check the envelope and map the fields. ``session`` is the X-Session-Id header."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("'model' must be a string", "model", "invalid_type")
    if body.get("input") is None:
        raise _bad("you must provide 'input'", "input", "missing_required_parameter")
    history, chain_session = _history(body, store, scope)
    conversation = history + _items(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("'instructions' must be a string", "instructions", "invalid_type")
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + conversation
    if not messages:
        raise _bad("'input' must not be empty", "input", "missing_required_parameter")

    options = _options(body)
    tools_in = body.get("tools") or []
    if not isinstance(tools_in, list):
        raise _bad("'tools' must be an array", "tools", "invalid_type")
    tools = _tool_choice(body.get("tool_choice"), _tools(tools_in), options)
    _format(body.get("text"), options)
    keep = body.get("store") is not False
    named = session or body.get("prompt_cache_key")
    if named is not None and not isinstance(named, str):
        raise _bad("'prompt_cache_key' must be a string", "prompt_cache_key", "invalid_type")
    # the session within the key's scope, which the route gives every call (the library keys both)
    chain = chain_session or named
    if chain is None and keep:
        chain = f"response:{response_id}"  # so that a follow-up finds this conversation's slot
    if chain is not None:
        options["session"] = chain
    echo = {
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": tools_in,
        "top_p": body.get("top_p"),
        "top_logprobs": body.get("top_logprobs"),
    }
    stream = body.get("stream") is True
    return ResponsesRequest(
        model=model, messages=messages, conversation=conversation, tools=tools or None, options=options,
        stream=stream, store=keep, scope=scope, session=chain, echo=echo,
    )  # fmt: skip


# -- responses ------------------------------------------------------------------------------------


def _usage(result: Mapping[str, Any]) -> dict[str, Any]:
    use = result.get("usage") or {}
    n_in, n_out = int(use.get("prompt_tokens") or 0), int(use.get("completion_tokens") or 0)
    return {
        "input_tokens": n_in,
        "input_tokens_details": {"cached_tokens": int(result.get("n_reused") or 0), "cache_write_tokens": 0},
        "output_tokens": n_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": n_in + n_out,
    }


def _text_logprobs(entries: Any) -> list[dict[str, Any]]:
    """The library's logprob entries in the Responses shape (no ``top_logprobs`` nesting below one)."""
    out = []
    for e in (openai_logprobs(entries) or {}).get("content") or []:
        top = [{"token": t["token"], "logprob": t["logprob"], "bytes": t["bytes"]} for t in e.get("top_logprobs", [])]
        out.append({"token": e["token"], "logprob": e["logprob"], "bytes": e["bytes"], "top_logprobs": top})
    return out


class Responder:
    """The envelope of one response: its id, times, model, and the items of its output."""

    def __init__(self, model: str, response_id: str | None = None) -> None:
        self.id = response_id or new_id()
        self.created_at = int(time.time())
        self.model = model
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self.reasoning_id = f"rs_{uuid.uuid4().hex}"

    def envelope(self, req: ResponsesRequest, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output,
            **req.echo,
            "reasoning": {"effort": None, "summary": None},
            "store": req.store,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
        }

    def items(self, result: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The output items of a result, in order: reasoning, message, calls."""
        status = "incomplete" if result.get("finish_reason") == "length" else "completed"
        out: list[dict[str, Any]] = []
        if result.get("reasoning_content"):
            text = {"type": "reasoning_text", "text": result["reasoning_content"]}
            out.append({"id": self.reasoning_id, "type": "reasoning", "summary": [], "content": [text],
                        "status": status})  # fmt: skip
        # A turn with no call has a message, empty text included (the model wrote only its end
        # token): OpenAI's Responses always end such a turn with one, and clients read output[-1].
        if result.get("content") or not result.get("tool_calls"):
            part = {"type": "output_text", "text": result.get("content") or "", "annotations": [],
                    "logprobs": _text_logprobs(result.get("logprobs"))}  # fmt: skip
            out.append({"id": self.message_id, "type": "message", "role": "assistant", "status": status,
                        "content": [part]})  # fmt: skip
        for call in result.get("tool_calls") or []:
            fn = call.get("function") or {}
            out.append({"id": f"fc_{call['id']}", "type": "function_call", "call_id": call["id"],
                        "name": fn.get("name"), "arguments": fn.get("arguments") or "",
                        "status": "completed"})  # fmt: skip
        return out

    def status(self, result: Mapping[str, Any]) -> str:
        return "incomplete" if result.get("finish_reason") == "length" else "completed"

    def response(self, req: ResponsesRequest, result: Mapping[str, Any]) -> dict[str, Any]:
        return self.envelope(req, self.status(result), self.items(result), _usage(result))

    def stored(self, req: ResponsesRequest, result: Mapping[str, Any], response: dict[str, Any]) -> Stored:
        """What a follow-up continues: the conversation, this response's answer appended."""
        answer: dict[str, Any] = {"role": "assistant", "content": result.get("content")}
        if result.get("tool_calls"):
            answer["tool_calls"] = result["tool_calls"]
        return Stored(req.scope, (*req.conversation, answer), req.session, response)


def new_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


class ResponseStream:
    """The stream events of one response, from the library's deltas: ``start()``, ``delta()`` per
    delta, ``finish()`` with the result; each returns the SSE text to send."""

    def __init__(
        self,
        responder: Responder,
        req: ResponsesRequest,
        on_answer: Callable[[Mapping[str, Any], dict[str, Any]], None] | None = None,
    ) -> None:
        self.r, self.req = responder, req
        self.on_answer = on_answer  # given the result and the response object it ended with
        self.seq = 0
        self.opened: list[dict[str, Any]] = []  # items as announced by output_item.added, in order
        self._kind: str | None = None  # the kind of the last opened item
        self._calls = StreamCalls()  # where each call's function_call item is

    def _event(self, kind: str, **data: Any) -> str:
        payload = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return sse(payload, kind)

    def start(self) -> str:
        head = self.r.envelope(self.req, "in_progress", [], None)
        return self._event("response.created", response=head) + self._event("response.in_progress", response=head)

    def _open(self, kind: str, item: dict[str, Any]) -> str:
        self._kind = kind
        self.opened.append(item)
        out = self._event("response.output_item.added", output_index=len(self.opened) - 1, item=item)
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += self._event("response.content_part.added", item_id=item["id"],
                               output_index=len(self.opened) - 1, content_index=0, part=part)  # fmt: skip
        return out

    def delta(self, delta: Mapping[str, Any]) -> str:
        out: list[str] = []
        if text := delta.get("reasoning_content"):
            if self._kind != "reasoning":
                item = {"id": self.r.reasoning_id, "type": "reasoning", "summary": [], "content": [],
                        "status": "in_progress"}  # fmt: skip
                out.append(self._open("reasoning", item))
            out.append(self._event("response.reasoning_text.delta", item_id=self.r.reasoning_id,
                                   output_index=len(self.opened) - 1, content_index=0, delta=text))  # fmt: skip
        if text := delta.get("content"):
            if self._kind != "message":
                item = {"id": self.r.message_id, "type": "message", "role": "assistant", "status": "in_progress",
                        "content": []}  # fmt: skip
                out.append(self._open("message", item))
            out.append(self._event("response.output_text.delta", item_id=self.r.message_id,
                                   output_index=len(self.opened) - 1, content_index=0, delta=text,
                                   logprobs=_text_logprobs(delta.get("logprobs"))))  # fmt: skip
        for piece in self._calls.pieces(delta):
            if piece.id is not None:
                item = {"id": f"fc_{piece.id}", "type": "function_call", "call_id": piece.id,
                        "name": piece.name or "", "arguments": "", "status": "in_progress"}  # fmt: skip
                out.append(self._open("function_call", item))
                self._calls.place(piece.index, len(self.opened) - 1)
            index = self._calls.where(piece.index)
            if piece.arguments and index is not None:
                out.append(self._event("response.function_call_arguments.delta", item_id=self.opened[index]["id"],
                                       output_index=index, delta=piece.arguments))  # fmt: skip
        return "".join(out)

    def _done(self, index: int, item: dict[str, Any]) -> str:
        out = ""
        if item["type"] == "message":
            part = item["content"][0]
            out += self._event("response.output_text.done", item_id=item["id"], output_index=index,
                               content_index=0, text=part["text"], logprobs=part["logprobs"])  # fmt: skip
            out += self._event("response.content_part.done", item_id=item["id"], output_index=index,
                               content_index=0, part=part)  # fmt: skip
        elif item["type"] == "reasoning":
            out += self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                               content_index=0, text=item["content"][0]["text"])  # fmt: skip
        elif item["type"] == "function_call":
            out += self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               name=item["name"], arguments=item["arguments"])  # fmt: skip
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def finish(self, result: Mapping[str, Any]) -> str:
        """The closing events (the response object they end with goes to ``on_answer``)."""
        tail, response = self.closing(result)
        if self.on_answer is not None:
            self.on_answer(result, response)
        return tail

    def closing(self, result: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The closing events, and the response object they end with."""
        final = {item["id"]: item for item in self.r.items(result)}
        output = [final.pop(item["id"]) for item in self.opened if item["id"] in final]
        out = ""
        for item in final.values():  # output no delta announced (none, by the library's invariant)
            self.opened.append(item)
            out += self._event("response.output_item.added", output_index=len(self.opened) - 1, item=item)
            output.append(item)
        out += "".join(self._done(i, item) for i, item in enumerate(output))
        response = self.r.envelope(self.req, self.r.status(result), output, _usage(result))
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return out + self._event(kind, response=response), response

    def error(self, err: ApiError) -> str:
        return self._event("error", code=err.code, message=err.message, param=err.param)
