"""``python -m pyshim serve``: the OpenAI- and Anthropic-compatible HTTP door over one model (Starlette + uvicorn).

Routes: ``POST /v1/chat/completions``, ``POST /v1/responses`` and ``GET``/``DELETE /v1/responses/{id}``
(``pyshim/responses_api.py``), ``POST /v1/embeddings`` (``pyshim/embeddings_api.py``), ``GET /v1/models``,
``GET /v1/models/{id}``, ``GET /health`` (OpenAI's shapes, errors ``{"error": {"message", "type", "param",
"code"}}``), ``POST /v1/messages``, ``POST /v1/messages/count_tokens`` (Anthropic's shapes and errors,
``pyshim/anthropic_api.py``), and ``GET /metrics`` (Prometheus text, ``pyshim/metrics.py``).

The invariants this module keeps:
- the event loop never blocks: each library call runs in a worker thread (``pyshim.aio``);
- calls run on the handle up to ``--n-seq`` at once (their decode steps batched by the library),
  the rest wait in a bounded FIFO (``--max-queue`` waiting; 503 beyond), and a client that goes
  away stops only its own call: one still waiting leaves the queue, a running one is cancelled
  with ``el_cancel_request`` on its own id, so the others go on and its place is free;
- no request can take the server down: anything unexpected becomes a 500 for that request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import aio, anthropic_api, embeddings_api, repeats, responses_api
from .aio import ModelLike
from .door import Door, Settings, accepted_keys, per_client_limit
from .door_limits import PerClientLimit, bounded_protocol
from .door_relay import ClientGone, Events, EventStream, api_error, first_delta, relay, unless_disconnected
from .metrics import CONTENT_TYPE, MetricsMiddleware
from .openai_api import ApiError, ChatRequest, ChatStream, Completion, DoorCall, error_body, key_scope, parse_request
from .shapes import Delta, as_options

__all__ = ["Door", "Settings", "create_app", "serve"]

log = logging.getLogger("pyshim.server")
T = TypeVar("T")


# A body over the limit is still read (and dropped) up to this many bytes, so that the client
# gets its 413: closing a socket with unread data resets it before the client reads the answer.
_DRAIN_BYTES = 64 * 1024 * 1024


async def _read_json(request: Request, limit: int) -> Any:
    """The body as JSON; one over ``limit`` bytes is refused (413) without being kept in memory."""
    body, size = bytearray(), 0
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else 0
    if declared <= _DRAIN_BYTES:
        async for chunk in request.stream():
            size += len(chunk)
            if size <= limit:
                body += chunk
            elif size > _DRAIN_BYTES:
                break
    if max(size, declared) > limit:
        raise ApiError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
    try:
        return json.loads(body)
    except ValueError as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    except RecursionError:  # nested deeper than the parser follows; the library refuses past 512
        raise ApiError(400, "the request body nests arrays and objects too deeply") from None


def _model_ms(result: Any) -> float:
    """Time the library spent on the call (template, cache, prefill, decode): what is left of a
    client's wall time is the door's own cost (bench/door.py reads it from a response header)."""
    if "_model_ms" in result:  # several generations (the repeat guard's second, or n choices)
        return float(result["_model_ms"])
    return float(sum(result.get(k) or 0 for k in ("ms_prepare", "ms_reset", "ms_prefill", "ms_decode")))


async def _generate(
    door: Door, request: Request, started: float, model: ModelLike, call: DoorCall, guard: bool, nth: int = 0
) -> Any:
    """One non-streamed generation, counted in /metrics, and the repeat guard (pyshim/repeats.py)
    where ``guard``: a turn whose calls all repeat calls already answered, with tool_choice auto, is
    asked once more, with the question and the results restated and tools off, as pyshim.Agent
    does. Small models otherwise repeat the same call until the client's loop gives up (``serve
    --keep-repeated-calls`` turns it off; the header ``X-Pyshim-Repeat-Nudges`` says it acted). A
    streamed call is not guarded: its call has gone out before it is known to be a repeat."""
    messages, tools, options = call.messages, call.tools, call.choice_options(nth)

    def left(result: Any) -> None:  # a call its client left is counted too ("cancelled", with its tokens)
        door.metrics.generation(result, started)

    work = aio.agenerate(model, messages, tools, on_cancelled=left, **as_options(options))
    result = await unless_disconnected(request, work)
    door.metrics.generation(result, started)
    auto = options.get("tool_choice", "auto") == "auto"
    if not guard or not door.settings.answer_repeats or not auto or not repeats.repeats_only(messages, result):
        return result
    spent = _model_ms(result)
    turn = [*messages, repeats.nudge(messages)]
    work = aio.agenerate(model, turn, tools, on_cancelled=left, **as_options({**options, "tool_choice": "none"}))
    result = await unless_disconnected(request, work)
    door.metrics.generation(result, started)
    return {**result, "_repeat_nudges": 1, "_model_ms": spent + _model_ms(result)}


def _timed(response: Response, started: float, result: Any) -> Response:
    """Tell the client where its wait went: the standard ``Server-Timing`` header with the
    library's time (``model``) and the rest of this handler's (``door``: reading and parsing
    the body, the hop to the model's thread and back, building the response)."""
    model_ms = _model_ms(result)
    if result.get("_repeat_nudges"):
        response.headers["X-Pyshim-Repeat-Nudges"] = str(result["_repeat_nudges"])
    door_ms = (time.perf_counter() - started) * 1e3 - model_ms
    response.headers["X-Pyshim-Model-Ms"] = f"{model_ms:.3f}"
    response.headers["Server-Timing"] = f"model;dur={model_ms:.3f}, door;dur={door_ms:.3f}"
    return response


class _Api(Protocol):
    """One API the door speaks, over the one route body (``_serve``): whose key a request carries,
    its body as the library's call, its whole answer, its stream's events and its error's shape.
    A new one per request (the translators keep the response's id and what the stream opened)."""

    def scope(self, request: Request) -> str: ...
    def parse(self, request: Request, body: Any, scope: str) -> DoorCall: ...

    @property
    def guarded(self) -> bool: ...  # the repeat guard applies (_generate)

    def answer(self, result: Any, more: list[Any]) -> Any: ...
    def events(self, first: Delta | None) -> Events: ...
    def error(self, err: ApiError) -> Response: ...


async def _serve(request: Request, api: _Api) -> Response:
    """Every generating route: the key, the body read within its bound, the API's call, then the
    whole answer, or the stream once its first delta is in (so that a refusal keeps its own
    status), through the one relay."""
    started = time.perf_counter()
    door: Door = request.app.state.door
    try:
        scope = api.scope(request)
        model = door.ready()
        call = api.parse(request, await _read_json(request, door.settings.max_request_bytes), scope)
        call.options["scope"] = scope
        door.check_model(call.model)
        if not call.stream:  # n choices: n generations, one after another
            results = [await _generate(door, request, started, model, call, api.guarded, i) for i in range(call.n)]
            spent = results[0] if call.n == 1 else {
                **results[0], "_model_ms": sum(map(_model_ms, results)),
                "_repeat_nudges": sum(r.get("_repeat_nudges", 0) for r in results),
            }  # fmt: skip
            return _timed(JSONResponse(api.answer(results[0], results[1:])), started, spent)
        stream, deltas, first = await first_delta(request, model, call)
        return EventStream(relay(door.metrics, started, api.events(first), stream, deltas, first))
    except ClientGone:
        return Response(status_code=499)  # nobody reads it; uvicorn drops it
    except Exception as e:  # answered here: Starlette's catch-all handler would also drop the connection
        return api.error(api_error(e))


def _openai_error(err: ApiError) -> Response:
    """An error in OpenAI's shape (chat, Responses, embeddings, and whatever no route answered)."""
    return JSONResponse(err.body(), status_code=err.status)


@dataclass
class _OpenAIRoute:
    """What OpenAI's two generating routes share: the bearer key, the repeat guard, the error shape."""

    door: Door
    guarded = True

    def scope(self, request: Request) -> str:
        return self.door.check_key(request)

    error = staticmethod(_openai_error)


@dataclass
class _Chat(_OpenAIRoute):
    """``POST /v1/chat/completions`` (pyshim/openai_api.py translates)."""

    comp: Completion = field(init=False)
    call: ChatRequest = field(init=False)

    def __post_init__(self) -> None:
        self.comp = Completion(self.door.settings.name, self.door.fingerprint)

    def parse(self, request: Request, body: Any, scope: str) -> DoorCall:
        self.call = parse_request(body, request.headers.get("x-session-id"))
        return self.call

    def answer(self, result: Any, more: list[Any]) -> Any:
        return self.comp.response(result, more)

    def events(self, first: Delta | None) -> Events:
        return ChatStream(self.comp, self.call.include_usage)


@dataclass
class _Messages:
    """``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API, with its key
    headers and error shape (pyshim/anthropic_api.py translates); counting is not guarded."""

    door: Door
    counting: bool
    key: str | None = None
    msg: anthropic_api.Message = field(init=False)

    @property
    def guarded(self) -> bool:
        return not self.counting  # counting answers nothing to guard

    def scope(self, request: Request) -> str:
        self.key = anthropic_api.api_key(request.headers)
        if not self.door.key_ok(self.key) or (self.key is None and self.door.keys()):
            raise ApiError(401, "invalid x-api-key")
        return key_scope(self.key)

    def parse(self, request: Request, body: Any, scope: str) -> DoorCall:
        call = anthropic_api.parse_request(body, request.headers.get("x-session-id"), self.key, count=self.counting)
        self.msg = anthropic_api.Message(self.door.settings.name, call)
        return call

    def answer(self, result: Any, more: list[Any]) -> Any:
        return anthropic_api.count_response(result) if self.counting else self.msg.response(result)

    def events(self, first: Delta | None) -> Events:
        # message_start carries the input's tokens, which the first delta reports
        return anthropic_api.MessageStream(self.msg, first.get("prompt") if first is not None else None)

    def error(self, err: ApiError) -> Response:
        answer, status = anthropic_api.error_response(err)
        return JSONResponse(answer, status_code=status)


@dataclass
class _Responses(_OpenAIRoute):
    """``POST /v1/responses``: OpenAI's Responses API (pyshim/responses_api.py translates); an
    answered response is kept for ``previous_response_id`` unless ``store`` is false."""

    out: responses_api.Responder = field(init=False)
    call: responses_api.ResponsesRequest = field(init=False)

    def parse(self, request: Request, body: Any, scope: str) -> DoorCall:
        self.out = responses_api.Responder(self.door.settings.name)
        session = request.headers.get("x-session-id")
        self.call = responses_api.parse_request(body, self.out.id, scope, self.door.responses, session)
        return self.call

    def keep(self, result: Any, answer: dict[str, Any]) -> None:
        if self.call.store:
            self.door.responses.put(self.out.id, self.out.stored(self.call, result, answer))

    def answer(self, result: Any, more: list[Any]) -> Any:
        answer = self.out.response(self.call, result)
        self.keep(result, answer)
        return answer

    def events(self, first: Delta | None) -> Events:
        return responses_api.ResponseStream(self.out, self.call, self.keep)


async def chat_completions(request: Request) -> Response:
    return await _serve(request, _Chat(request.app.state.door))


async def anthropic_messages(request: Request) -> Response:
    counting = request.url.path.endswith("/count_tokens")
    return await _serve(request, _Messages(request.app.state.door, counting))


async def responses(request: Request) -> Response:
    return await _serve(request, _Responses(request.app.state.door))


async def stored_response(request: Request) -> Response:
    """``GET`` / ``DELETE /v1/responses/{id}``: a stored response, within the caller's key."""
    door: Door = request.app.state.door
    scope = door.check_key(request)
    response_id = request.path_params["response_id"]
    if request.method == "DELETE":
        if door.responses.delete(response_id, scope):
            return JSONResponse({"id": response_id, "object": "response", "deleted": True})
    elif (item := door.responses.get(response_id, scope)) is not None:
        return JSONResponse(item.response)
    raise ApiError(404, f"No response found with id '{response_id}'.", param="response_id", code="not_found")


async def embeddings(request: Request) -> Response:
    """``POST /v1/embeddings``: OpenAI's embeddings (pyshim/embeddings_api.py) from el_embed, one
    call at a time on the model's embedding thread, beside the generations."""
    started = time.perf_counter()
    door: Door = request.app.state.door
    try:
        door.check_key(request)
        model = door.ready()
        req = embeddings_api.parse_request(await _read_json(request, door.settings.max_request_bytes))
        door.check_model(req.model)
        result = await unless_disconnected(request, aio.aembed(model, req.input))
        door.metrics.embeddings(result)
        answer = embeddings_api.response(req, result, door.settings.name)
        return _timed(JSONResponse(answer), started, {"_model_ms": result["ms_total"]})
    except ClientGone:
        return Response(status_code=499)
    except Exception as e:
        return _openai_error(api_error(e))


async def metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus text (pyshim/metrics.py); behind the API key when one is set."""
    door: Door = request.app.state.door
    door.check_key(request)
    return Response(door.metrics.render(), media_type=CONTENT_TYPE)


async def list_models(request: Request) -> Response:
    door: Door = request.app.state.door
    door.check_key(request)
    return JSONResponse({"object": "list", "data": [_model_card(door, name) for name in door.names()]})


async def get_model(request: Request) -> Response:
    door: Door = request.app.state.door
    door.check_key(request)
    name = request.path_params["model"]
    door.check_model(name)
    return JSONResponse(_model_card(door, name if name in door.names() else door.settings.name))


def _model_card(door: Door, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": door.created, "owned_by": "pyshim"}


async def health(request: Request) -> Response:
    """Unauthenticated: whether the model is loaded, and whether a call runs or waits."""
    door: Door = request.app.state.door
    model = door.ready()
    g = aio.gate(model)
    return JSONResponse({"status": "ok", "model": door.settings.name, "running": g.running, "queued": g.waiting})


async def _on_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        type_ = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(error_body(str(exc.detail), type_, None, code), status_code=exc.status_code)
    return _openai_error(api_error(exc))


def create_app(settings: Settings, model: ModelLike | None = None) -> Starlette:
    """The ASGI app. Without ``model``, it loads ``settings.model`` in the background once the
    app starts (503 until then) and closes it when the app stops. With an open ``model``, the app
    serves it at once and leaves closing it to the caller: that is the in-process door, behind
    ``httpx.ASGITransport`` with no socket (which runs no lifespan; see the README).

    ``model`` is the backend seam: anything ``pyshim.aio`` drives (``aio.ModelLike``: ``generate``
    with deltas, ``embeddings``, ``cancel``, ``config``), so that the translators, the relay and
    the route body can be tested with scripted results beside the real model's tests."""
    door = Door(settings)
    if model is not None:
        door.attach(model)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if model is not None:
            yield
            return
        loading = asyncio.ensure_future(door.load())
        yield
        await loading
        if door.loaded is not None:
            await asyncio.to_thread(door.loaded.close)

    middleware = [
        Middleware(PerClientLimit, limit=per_client_limit(settings)),
        Middleware(MetricsMiddleware, metrics=door.metrics),
    ]
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "X-Session-Id", "X-Api-Key", "Anthropic-Version"],
            )
        )
    # Each API route under /v1 and, as llama-server and Ollama serve them, without the prefix.
    api = [
        ("/chat/completions", chat_completions, ["POST"]),
        ("/responses", responses, ["POST"]),
        ("/responses/{response_id}", stored_response, ["GET", "DELETE"]),
        ("/messages", anthropic_messages, ["POST"]),
        ("/messages/count_tokens", anthropic_messages, ["POST"]),
        ("/embeddings", embeddings, ["POST"]),
        ("/models", list_models, ["GET"]),
        ("/models/{model:path}", get_model, ["GET"]),
    ]
    app = Starlette(
        routes=[
            *[Route(prefix + path, fn, methods=methods) for path, fn, methods in api for prefix in ("/v1", "")],
            Route("/metrics", metrics, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
        middleware=middleware,
        # Exception: the last resort (Starlette answers, then re-raises to uvicorn, which closes
        # the connection); the endpoints answer their own errors before it comes to that.
        exception_handlers={HTTPException: _on_error, ApiError: _on_error, Exception: _on_error},
        lifespan=lifespan,
    )
    app.state.door = door
    return app


def serve(settings: Settings) -> int:
    """Run the server until interrupted. Returns the process exit code (1 if the model failed to load)."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    app = create_app(settings)
    http = bounded_protocol(request_timeout=settings.request_timeout, max_connections=settings.max_connections)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            lifespan="on",
            http=http,
            timeout_keep_alive=settings.idle_timeout,
        )
    )
    door: Door = app.state.door

    def stop() -> None:
        server.should_exit = True

    door.on_load_failure = stop
    if not accepted_keys(settings) and settings.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("listening on %s without an API key: anyone who can reach it can use the model", settings.host)
    server.run()
    return 1 if door.load_error is not None else 0
