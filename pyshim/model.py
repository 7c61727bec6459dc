"""``Model``: one loaded GGUF model with its context, driven through JSON; ``Stream``: one call's deltas."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Self, Unpack

import numpy as np
import numpy.typing as npt

from . import _sigint, aio, habits, models, structured
from ._call import DONE, Args, Call, run_in_worker
from ._lib import encode, encode_messages, ffi, read_json
from .errors import ClosedModel, ModelFileNotFound
from .handle import Handle
from .shapes import Delta, Embedding, Embeddings, EmbedInput, GenerateOptions, Message, Result, ToolSpec

__all__ = ["Delta", "EmbedInput", "Embedding", "Embeddings", "Model", "Result", "Stream", "default_model", "generate"]


class _Closes:
    """``with`` support and a best-effort close when collected, for objects with a ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class Model(_Closes):
    """A model kept resident between calls, so each turn reuses the cached prompt prefix.

    ``model`` is a catalogue name (see ``pyshim.models``) or a path to a ``.gguf``
    file; ``config`` is passed to ``el_open`` (``n_ctx``, ``n_threads``,
    ``temperature``, ``swa_full``, ``log``, ...). Use it as a context manager, or
    call ``close()``. llama-cpp-python's ``model_path=`` and ``verbose=`` are taken as
    ``model`` and ``log`` (``pyshim.habits``).

    Calls share one trust scope by default (``scope=""``): a new conversation, a session of
    its own or not, starts from the longest prefix another conversation on this Model already
    evaluated (a common system prompt and tools), copied into its own slot. Calls may name
    their own ``scope=`` (the door gives each API key one); ``Model(..., scope=None)`` shares
    nothing between sessions (as every handle did before ABI 1.11).

    What the slots hold when the Model closes, and what host memory cannot keep, goes to a disk
    tier (``cache_dir``, default ``~/.cache/pyshim/prefixes``, or ``$PYSHIM_PREFIX_CACHE``;
    bounded by ``disk_cache_mib``, 1024): the next Model of the same file and settings, in this
    process or another, starts from the longest prefix it holds. ``cache_dir=None`` turns it off.

    Calls on one Model run one at a time, or up to ``n_seq`` at once (each in its own slot,
    their decode steps batched together by the library); separate Models run in parallel.
    Ctrl-C during a call made from the main thread stops it within about one token and
    raises ``KeyboardInterrupt``; the model stays usable.
    """

    def __init__(
        self, model: str | os.PathLike[str] | None = None, *, filename: str | None = None, **config: Any
    ) -> None:
        model, config = habits.open_config(model, config)
        config.setdefault("scope", "")
        config.setdefault("cache_dir", models.prefix_dir())
        for key in ("scope", "cache_dir"):
            if config[key] is None:
                del config[key]
        self.path = models.path(model, filename=filename)
        if not self.path.exists():
            raise ModelFileNotFound(errno.ENOENT, f"no model file at {self.path}", str(self.path))
        self.config = {"model": str(self.path), **config}
        self._handle: Handle | None = Handle(self.config)
        self._calls: weakref.WeakSet[Call] = weakref.WeakSet()  # streams in flight, stopped by close()

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None = None, **config: Any) -> Model:
        """A model from a Hugging Face repo, as llama-cpp-python's ``Llama.from_pretrained``:
        ``filename`` names its .gguf file or a glob (``"*q8_0.gguf"``); huggingface_hub downloads it
        into its own cache (``pip install 'pyshim[hf]'``)."""
        return cls(repo_id if repo_id.startswith("hf://") else f"hf://{repo_id}", filename=filename, **config)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Free the model. Cancels a call in progress in another thread. Idempotent."""
        for call in list(getattr(self, "_calls", ())):
            call.stop()  # a stream waiting for its reader would otherwise keep el_close waiting
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            handle.close()

    @property
    def handle(self) -> Any:
        """The ``el_handle *`` (a cffi pointer), for calling ``el_*`` functions directly."""
        return self._open().ptr

    def _open(self) -> Handle:
        handle = self._handle
        if handle is None:
            raise ClosedModel("the model is closed")
        return handle

    # -- calls -------------------------------------------------------------

    def generate(
        self,
        messages: str | Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        *,
        on_delta: Callable[[Delta], object] | None = None,
        **options: Unpack[GenerateOptions],
    ) -> Result:
        """One assistant turn: OpenAI-style messages (or one user message as a string) and tools
        in, a result dict out.

        Options are those of ``el_generate`` (``max_tokens``, ``temperature``,
        ``tool_choice``, ``response_format``, ``stop``, ``logprobs``, ...), and what OpenAI's
        client takes that means something here (``max_completion_tokens``, ``n=1``; ``user`` and
        ``metadata`` are dropped, as the door drops them). ``tools`` may hold Python functions
        (their schema from type hints and docstring) beside OpenAI tool dicts.
        ``on_delta`` receives streaming deltas as they are decoded; returning
        ``False`` from it stops the generation (finish_reason ``"cancelled"``).
        """
        prepared, parse = structured.prepare(options)
        args, request_id = self._args(messages, tools, prepared)
        if threading.current_thread() is not threading.main_thread():
            return structured.attach(_generate_here(self._open(), args, on_delta), parse)
        # where Ctrl-C arrives: it must reach the call within a token
        if _sigint.usable():
            with _sigint.watching(self._open(), request_id) as watched:
                if watched:
                    return structured.attach(_generate_here(self._open(), args, on_delta), parse)
        return structured.attach(run_in_worker(self._open(), args, request_id, on_delta), parse)

    def _args(self, messages: str | Sequence[Message], tools: Any, options: Mapping[str, Any]) -> tuple[Args, str]:
        """The C arguments, and the call's ``request_id`` (the caller's, or a fresh one) by
        which this call alone can be stopped."""
        options = habits.generate_options(options)
        request_id = str(options.get("request_id") or uuid.uuid4().hex)
        options = {**options, "request_id": request_id}
        schemas = habits.tool_schemas(tools)
        tools_json = encode(schemas) if schemas else None
        return (encode_messages(habits.conversation(messages)), tools_json, encode(options)), request_id

    def stream(
        self,
        messages: str | Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        **options: Unpack[GenerateOptions],
    ) -> Stream:
        """Iterate over deltas as they are decoded; the final result is ``.result`` afterwards.

        The generation starts at once and waits for the reader at each delta. Close the
        stream (``close()``, a ``with`` block, leaving the loop, or dropping it) to stop it.
        """
        stream = Stream(self, messages, tools, options)
        self._calls.add(stream._call)
        return stream

    def chat_completion(
        self,
        messages: str | Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        **options: Unpack[GenerateOptions],
    ) -> Any:
        """``generate`` answered in OpenAI's ``chat.completion`` shape, as the door answers it:
        the ``openai`` package's own ``ChatCompletion`` when it is installed, else the same dict."""
        from .openai_api import Completion

        body = Completion(self.name).response(self.generate(messages, tools, **options))
        try:
            from openai.types.chat import ChatCompletion
        except ImportError:
            return body
        return ChatCompletion.model_validate(body)

    @property
    def name(self) -> str:
        """The model's name in OpenAI-shaped answers: the file's name without ``.gguf``."""
        return self.path.name.removesuffix(".gguf")

    def embed(
        self, input: EmbedInput, *, normalize: bool = True, truncate: bool = False, timeout_ms: int = 0
    ) -> npt.NDArray[np.float32]:
        """Embeddings pooled from the model's hidden states (el_embed): a vector of ``n_embd``
        float32 for one text (or one token-id list), a ``(len(input), n_embd)`` array for a list.

        Unit length unless ``normalize=False``; an input longer than the model's ``embd_ctx``
        (an el_open setting, 512 by default) is refused unless ``truncate=True`` keeps its start.
        The first call creates the embedding context; generations on the model go on meanwhile.
        """
        result = self.embeddings(input, normalize=normalize, truncate=truncate, timeout_ms=timeout_ms)
        rows = np.array([item["embedding"] for item in result["data"]], dtype=np.float32)
        single = isinstance(input, str) or (bool(input) and isinstance(input[0], int))
        return rows[0] if single else rows

    def embeddings(self, input: EmbedInput, **options: Any) -> Embeddings:
        """el_embed's whole result: ``data`` (``index``, ``embedding``, ``n_tokens``), ``n_embd``,
        ``pooling``, ``n_tokens``, ``ms_total``. Options: ``normalize``, ``truncate``, ``timeout_ms``."""
        return self._open().embed(encode(input), encode(options))

    def cancel(self, request_id: str | None = None) -> None:
        """Stop every call in progress on this model (from another thread), or only the calls
        whose options named ``request_id`` (and one that begins with it later)."""
        if request_id is None:
            self._open().cancel()
        else:
            self._open().cancel_request(request_id)

    def reset(self) -> None:
        """Drop every cached token and checkpoint, in memory and in the disk tier's files of this
        model and settings. ``ClosedModel`` if the handle is closed, ``DeviceLost`` if it is dead."""
        self._open().reset()

    def forget(self, session: str | None = None, *, scope: str | None = None) -> None:
        """Drop what is cached for one session (see the ``session`` option; ``""``: calls that
        name none) of the default scope, or of ``scope``; a whole ``scope`` when ``session`` is
        None. ``forget()`` alone drops nothing (``reset()`` drops everything)."""
        if scope is not None or session is not None:
            self._open().forget(session, scope)

    def stats(self) -> dict[str, Any]:
        return self._open().stats()

    # -- asyncio (pyshim.aio) ------------------------------------------------

    async def agenerate(
        self,
        messages: str | Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        **options: Unpack[GenerateOptions],
    ) -> Result:
        """``generate`` as a coroutine; cancelling the awaiting task cancels the generation."""
        return await aio.agenerate(self, messages, tools, **options)

    def astream(
        self,
        messages: str | Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        **options: Unpack[GenerateOptions],
    ) -> aio.AsyncStream:
        """``async for delta in model.astream(...)``; the final result is ``.result`` afterwards."""
        return aio.astream(self, messages, tools, **options)


class Stream(_Closes):
    """Deltas of one generation, decoded on a worker thread and handed over one at a time.

    Leaving the iteration early (``break``), ``close()``, the end of a ``with`` block or
    dropping the stream stops the generation and frees the model; ``result`` then holds
    the final result (``finish_reason`` ``"cancelled"`` when stopped early). Iterating a
    finished stream again yields nothing.
    """

    def __init__(self, model: Model, messages: str | Sequence[Message], tools: Any, options: Mapping[str, Any]) -> None:
        self.result: Result | None = None
        options, self._parse = structured.prepare(options)
        # The worker holds only the Call, never this Stream, so dropping the Stream reaches __del__.
        args, request_id = model._args(messages, tools, options)
        self._call = Call(model._open(), args, streaming=True, request_id=request_id)

    def __iter__(self) -> Iterator[Delta]:
        try:
            while (delta := self._call.next_delta()) is not DONE:
                yield delta
        finally:
            self.close()
        if self._call.error is not None:
            raise self._call.error

    def close(self) -> None:
        """Stop the generation (if still running) and wait for it to return. Idempotent."""
        self._call.stop()
        self.result = self._call.result
        if self.result is not None:
            structured.attach(self.result, self._parse)


def _generate_here(handle: Handle, args: Args, on_delta: Callable[[Delta], object] | None) -> Result:
    """A call on this thread, with ``on_delta`` (if any) called from the C callback. An exception
    in it stops the call and is raised once the call returned; so is a ``KeyboardInterrupt``
    that lands in the callback before its ``try`` (cffi hands it to ``onerror``, which would
    otherwise print it and go on)."""
    if on_delta is None:
        return handle.generate(*args)
    failure: list[BaseException] = []

    def trampoline(delta_json: Any, _user: Any) -> int:
        try:
            keep_going = on_delta(read_json(delta_json))
            return 1 if keep_going is False else 0
        except BaseException as e:  # re-raised below, never lost inside C
            failure.append(e)
            return 1

    def onerror(_kind: Any, error: BaseException | None, _tb: Any) -> int:
        if error is not None:
            failure.append(error)
        return 1

    # types-cffi types onerror as returning None; cffi returns what it returns from the callback.
    callback = ffi.callback("el_stream_cb", trampoline, onerror=onerror)  # type: ignore[arg-type]
    result = handle.generate(*args, callback)
    if failure:
        raise failure[0]
    return result


_default: Model | None = None
_default_lock = threading.Lock()


def default_model() -> Model:
    """The process-wide model behind ``pyshim.generate``: ``$PYSHIM_MODEL`` or the catalogue default."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Model(os.environ.get("PYSHIM_MODEL") or models.DEFAULT)
        return _default


def generate(
    messages: str | Sequence[Message], tools: Sequence[ToolSpec] | None = None, **options: Unpack[GenerateOptions]
) -> Result:
    """``Model.generate`` on the process-wide default model, opened on first use."""
    return default_model().generate(messages, tools, **options)
