"""What users bring from other libraries, accepted in process: the one place that maps it.

A user who knows OpenAI's client writes ``max_completion_tokens``, ``n=1``, ``user`` or
``metadata``; one who knows llama-cpp-python opens ``Llama(model_path=..., verbose=False)`` and
passes Python functions as tools. ``Model`` and ``generate`` take those as the door does: a field
that means something here is mapped onto the library's own option, one that means nothing for a
local model is accepted and dropped (as the door drops it), and one that cannot be honoured is
refused with what to do instead. Everything else reaches the library, which names an unknown key
and the nearest known one.

Invariant: pure functions, no I/O; the library's own names always win over a habit's (both given
and different is an error, never a silent choice).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import InvalidRequest, InvalidTool
from .tools import Tool, as_tool, as_tools

__all__ = ["IGNORED_OPTIONS", "OPENAI_IGNORED", "generate_options", "open_config", "openai_renamed", "tool_schemas"]

# OpenAI's chat request fields that mean nothing for one local model: accepted and dropped, in process
# and by the door (pyshim/openai_api.py), which documents them (README, "The OpenAI door").
OPENAI_IGNORED = frozenset({"user", "metadata", "store", "service_tier", "modalities", "prediction", "audio",
                            "reasoning_effort", "safety_identifier", "verbosity", "web_search_options"})  # fmt: skip
# In process, the model is the Model's own.
IGNORED_OPTIONS = OPENAI_IGNORED | {"model"}
# OpenAI's names for the library's options: the one table the door and generate both map by.
OPENAI_RENAMES = {"max_completion_tokens": "max_tokens", "prompt_cache_key": "session"}


def _renamed(options: dict[str, Any], habit: str, ours: str) -> None:
    if habit not in options:
        return
    value = options.pop(habit)
    if ours in options and options[ours] != value:
        raise InvalidRequest(f"{habit!r} ({value!r}) and {ours!r} ({options[ours]!r}) disagree; pass only {ours!r}")
    options[ours] = value


def conversation(messages: str | Iterable[Any]) -> list[Any]:
    """The messages as a list; a string is one user message (as ``Agent.run`` and most chat
    libraries take it), not a sequence of characters."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return list(messages)


def generate_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``generate``'s keyword options with OpenAI's habits mapped onto the library's names."""
    out = openai_renamed({k: v for k, v in options.items() if k not in IGNORED_OPTIONS})
    n = out.pop("n", 1)
    if n != 1:
        raise InvalidRequest(f"n={n!r}: one choice per call; call generate {n} times (with different seeds)")
    if out.pop("stream", False):
        raise InvalidRequest("stream=True: use Model.stream(...) (or astream) for a streamed call")
    out.pop("stream_options", None)
    return out


def openai_renamed(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (changed in place) with OpenAI's names for the library's options renamed;
    both names given with different values is an error (InvalidRequest), never a silent choice."""
    for habit, ours in OPENAI_RENAMES.items():
        _renamed(options, habit, ours)
    return options


def tool_schemas(tools: Iterable[Callable[..., Any] | Mapping[str, Any] | Tool] | None) -> list[dict[str, Any]] | None:
    """OpenAI tool dicts for ``tools``, which may also hold Python functions and ``Tool`` objects
    (their schema from type hints and docstring, as ``Agent`` takes them); None for none."""
    if not tools:
        return None
    items = list(tools)
    dicts = [t for t in items if isinstance(t, Mapping)]
    if len(dicts) == len(items):
        for i, t in enumerate(dicts):  # each checked once (names, metaschema), naming tools[i]
            _checked_dict_tool(i, json.dumps(t, sort_keys=True, default=str))
        return [dict(t) for t in dicts]  # sent as given
    return [t.schema for t in as_tools(items).values()]


@functools.lru_cache(maxsize=1024)
def _checked_dict_tool(index: int, text: str) -> None:
    """An OpenAI tool dict checked as ``as_tools`` checks it (its JSON text is the cache key: an
    agent or a door sends the same tools on every turn)."""
    try:
        as_tool(json.loads(text))
    except InvalidTool as e:
        raise InvalidTool(f"tools[{index}]: {e}") from e.__cause__


# llama-cpp-python's Llama(...) arguments: mapped (name -> ours), or refused with the reason.
OPEN_RENAMES = {"model_path": "model", "verbose": "log", "n_threads_batch": "n_threads"}
OPEN_REFUSED = {
    "chat_format": "the model's own chat template is used; pass chat_template='...' (Jinja) to override it",
    "chat_handler": "the model's own chat template is used; pass chat_template='...' (Jinja) to override it",
    "n_parallel": "pass n_seq (conversations kept warm and calls run at once)",
    "logits_all": "logprobs are per call: generate(..., logprobs=True, top_logprobs=N)",
}


def open_config(model: Any, config: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``Model(...)``'s model and el_open config with llama-cpp-python's names mapped."""
    out = dict(config)
    out.pop("embedding", None)  # every Model embeds (Model.embed): nothing to turn on
    for name, why in OPEN_REFUSED.items():
        if name in out:
            raise InvalidRequest(f"{name}: not a pyshim setting; {why}")
    if "model_path" in out:
        path = out.pop("model_path")
        if model is not None and str(model) != str(path):
            raise InvalidRequest(f"model ({model!r}) and model_path ({path!r}) disagree; pass one")
        model = path
    for habit, ours in OPEN_RENAMES.items():
        if habit != "model_path":
            _renamed(out, habit, ours)
    return model, out
