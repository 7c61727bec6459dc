"""The shapes that cross the package's boundaries: what the library returns and streams, what the
agent returns. Plain data (TypedDicts and dataclasses) that imports nothing of the package, so that
every module can name them at run time without an import circle (``typing.get_type_hints`` reads
every public signature).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict, cast

__all__ = [
    "AgentResult",
    "Delta",
    "EmbedInput",
    "Embedding",
    "Embeddings",
    "Message",
    "Result",
    "ToolFailure",
    "ToolSpec",
]

Message = Mapping[str, Any]


class Delta(TypedDict, total=False):
    """One streamed piece of a call (el_stream_cb): text to append, a tool call's pieces, the
    prompt's progress, and the logprobs of the tokens it carries."""

    content: str
    reasoning_content: str
    tool_calls: list[dict[str, Any]]
    prompt_progress: dict[str, int]
    prompt: dict[str, int]  # once, with the first delta after the slot was prepared: n_prompt, n_reused
    logprobs: dict[str, Any]


class Result(TypedDict):
    """el_generate's result (``native/el_shim.h`` documents every field); a plain dict at run time.
    Every field is in every result (``cancelled_result`` makes one for a call stopped before it
    began) but those marked ``NotRequired``: ``logprobs`` when asked for, ``warnings`` when there
    are some, ``parsed`` when ``response_format`` was a type."""

    message: dict[str, Any]
    content: str | None
    reasoning_content: str | None
    tool_calls: list[dict[str, Any]]
    invalid_tool_calls: list[dict[str, Any]]
    finish_reason: Literal["stop", "length", "tool_calls", "cancelled"]
    truncated: bool
    usage: dict[str, int]
    n_prompt: int
    n_reused: int
    n_decoded: int
    ms_prepare: float
    ms_template: float
    ms_tokenize: float
    ms_sampler: float
    n_tokenize_reused: int
    n_render_reused: int
    n_messages_reused: int
    ms_reset: float
    ms_prefill: float
    ms_decode: float
    slot: int | None
    restored_from_host: bool
    shared_prefix: bool
    restored_from_disk: bool
    n_batched_max: int
    n_argmax: int
    n_drafted: int
    n_accepted: int
    abi_version: str
    logprobs: NotRequired[dict[str, Any]]
    warnings: NotRequired[list[str]]  # only when something went otherwise than asked (pyshim.ModelWarning too)
    parsed: NotRequired[Any]  # response_format given as a pydantic model or dataclass: the answer as one


class GenerateOptions(TypedDict, total=False):
    """The keyword options of ``generate``, ``stream``, ``agenerate`` and ``astream``, typed, so that a
    checker catches ``max_tokenz=3`` (and the library refuses it at run time with a did-you-mean).
    ``native/el_shim.h`` documents each; OpenAI's spellings and fields that mean nothing locally are
    taken as the door takes them (``pyshim.habits``)."""

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int
    stop: str | list[str]
    repeat_penalty: float
    repeat_last_n: int
    frequency_penalty: float
    presence_penalty: float
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any]
    parallel_tool_calls: bool
    response_format: dict[str, Any] | type
    logprobs: bool
    top_logprobs: int
    logit_bias: dict[str, float] | dict[int, float]
    ignore_eos: bool
    tool_call_recovery: bool
    timeout_ms: float
    cache_prompt: bool
    session: str
    scope: str
    request_id: str
    speculative: str | dict[str, Any]
    grammar_tools: list[dict[str, Any]]
    # OpenAI's spellings (pyshim.habits): max_completion_tokens is max_tokens, prompt_cache_key a
    # session, n must be 1; the others are accepted and dropped, as the door drops them
    max_completion_tokens: int
    prompt_cache_key: str
    n: int
    user: str
    metadata: dict[str, Any]
    store: bool
    service_tier: str
    modalities: list[str]
    prediction: dict[str, Any]
    audio: dict[str, Any]
    reasoning_effort: str
    safety_identifier: str
    verbosity: str
    web_search_options: dict[str, Any]
    # test hooks (a library built with EL_TEST_HOOKS)
    _test: dict[str, Any]


def owner_key(scope: str | None, session: str) -> str:
    """Whose cached state a call's is, as the library keys it (native/owner.h ``Owner::key``): the
    session within its trust scope (``None``: in no scope). The one spelling of it in Python: the
    asyncio gate serializes calls of one owner by it, as the library's slots do."""
    return (f"s{len(scope)}:{scope}" if scope is not None else "-") + session


def as_options(options: Mapping[str, Any]) -> GenerateOptions:
    """Options built at run time (a door's request, an agent's turn), as the typed keywords; the
    library checks every key and value."""
    return cast(GenerateOptions, options)


def cancelled_result(abi_version: str = "") -> Result:
    """The result of a call stopped before it began: nothing evaluated, nothing written."""
    return {
        "message": {"role": "assistant", "content": None}, "content": None, "reasoning_content": None,
        "tool_calls": [], "invalid_tool_calls": [], "finish_reason": "cancelled", "truncated": False,
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "n_prompt": 0, "n_reused": 0, "n_decoded": 0, "ms_prepare": 0.0, "ms_template": 0.0, "ms_tokenize": 0.0,
        "ms_sampler": 0.0, "n_tokenize_reused": 0, "n_render_reused": 0, "n_messages_reused": 0, "ms_reset": 0.0,
        "ms_prefill": 0.0, "ms_decode": 0.0, "slot": None, "restored_from_host": False, "shared_prefix": False,
        "restored_from_disk": False, "n_batched_max": 0, "n_argmax": 0, "n_drafted": 0, "n_accepted": 0,
        "abi_version": abi_version,
    }  # fmt: skip


class Embedding(TypedDict):
    """One input's vector in el_embed's result."""

    index: int
    embedding: list[float]
    n_tokens: int
    truncated: NotRequired[bool]


class Embeddings(TypedDict):
    """el_embed's result (``native/el_shim.h``); a plain dict at run time."""

    data: list[Embedding]
    n_embd: int
    pooling: Literal["mean", "cls", "last"]
    normalized: bool
    n_tokens: int
    ms_total: float
    abi_version: str


# What el_embed takes: a text, texts, a token-id list, or token-id lists.
EmbedInput = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]
# A tool as generate takes it: an OpenAI tool dict, or a Python function (its schema from its
# type hints and docstring).
ToolSpec = Callable[..., Any] | Mapping[str, Any]


@dataclass(frozen=True)
class ToolFailure:
    """A call that gave the model no result: the tool raised, its arguments were refused (not
    valid JSON, not the tool's schema, an unknown tool), or the agent did not run it (``refused``:
    its figures came from neither the request nor a result, so the model made them up)."""

    id: str
    name: str
    arguments: str
    error: str
    refused: bool = False


@dataclass
class AgentResult:
    """The final answer, the whole transcript (OpenAI-shaped) and each turn's raw result.

    ``stopped`` says why the loop ended, and only ``"answer"`` means ``content`` is an answer:

    - ``"answer"``: the last turn answered in text (not a call written as text, not the request
      repeated back, not empty) and at least one call of each tool the run leaned on succeeded;
    - ``"tools_failed"``: every call the run made failed; ``content`` says which and why (a
      sentence of the library's, not the model's: a model with no result invents one);
    - ``"call_as_text"``: after being asked for the answer, the model still wrote a tool call as
      its text (``content`` is that text);
    - ``"no_answer"``: the last turn was empty or repeated the request (``error`` says which);
    - ``"max_steps"``, ``"context_full"`` (the conversation no longer fits the model's context;
      ``error`` says by how much, and ``messages`` still holds everything up to that point), or
      ``"error"`` (on ``AgentError.result``).

    ``failures`` lists every call that gave no result, whatever ``stopped`` says.
    """

    content: str | None
    messages: list[dict[str, Any]]
    turns: list[Result] = field(default_factory=list)
    stopped: str = "answer"
    error: str | None = None
    failures: list[ToolFailure] = field(default_factory=list)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [c for m in self.messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]

    @property
    def tools_ran(self) -> list[dict[str, Any]]:
        """The tool results of this transcript, in order: one ``{"role": "tool", ...}`` message per call run."""
        return [m for m in self.messages if m.get("role") == "tool"]
