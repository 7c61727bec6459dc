"""Loading libel_shim with cffi in ABI mode: the one place that knows C.

The declarations below are the el_* functions of native/el_shim.h and nothing
else; no llama.cpp type is ever declared. The library is searched, in order:

1. ``$PYSHIM_LIB`` (a path to the .so), when set;
2. ``pyshim/lib/libel_shim.so`` inside the installed package (wheels ship it there);
3. ``build/libel_shim.so`` in the source tree this package sits in (``make`` puts it there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import cffi
import orjson

from .errors import InvalidRequest, LibraryNotFound, ShimError, from_library

CDEF = """
typedef struct el_handle el_handle;
typedef int (*el_stream_cb)(const char *delta_json, void *user_data);
const char *el_version(void);
const char *el_build_info(void);
el_handle *el_open(const char *config_json);
const char *el_last_error(void);
char *el_generate(el_handle *handle, const char *messages_json, const char *tools_json, const char *options_json);
char *el_generate_stream(el_handle *handle, const char *messages_json, const char *tools_json,
                         const char *options_json, el_stream_cb callback, void *user_data);
char *el_embed(el_handle *handle, const char *input_json, const char *options_json);
int el_cancel(el_handle *handle);
int el_cancel_request(el_handle *handle, const char *request_id);
int el_reset(el_handle *handle);
int el_forget(el_handle *handle, const char *session);
int el_forget_scope(el_handle *handle, const char *scope, const char *session);
char *el_stats(el_handle *handle);
int el_close(el_handle *handle);
void el_free(char *str);
"""

ffi = cffi.FFI()
ffi.cdef(CDEF)

_PACKAGE_DIR = Path(__file__).resolve().parent
LIB_NAME = "libel_shim.so"


def candidates() -> list[tuple[Path, str]]:
    """Where the library may be, with the reason each place is tried."""
    found: list[tuple[Path, str]] = []
    env = os.environ.get("PYSHIM_LIB")
    if env:
        found.append((Path(env), "from $PYSHIM_LIB"))
    found.append((_PACKAGE_DIR / "lib" / LIB_NAME, "installed with the package"))
    found.append((_PACKAGE_DIR.parent / "build" / LIB_NAME, "from the build tree"))
    return found


def _load() -> tuple[Any, Path, str]:
    tried = []
    for path, why in candidates():
        if why == "from $PYSHIM_LIB" or path.exists():
            try:
                return ffi.dlopen(str(path)), path, why
            except OSError as e:
                raise LibraryNotFound(f"could not load {path} ({why}): {e}") from e
        tried.append(f"{path} ({why}): not there")
    raise LibraryNotFound(
        "libel_shim.so not found; build it with `make build` or set PYSHIM_LIB. Tried:\n  " + "\n  ".join(tried)
    )


_lib: Any = None
lib_path: Path | None = None
lib_origin: str = ""


def lib() -> Any:
    """The loaded library, opened once per process."""
    global _lib, lib_path, lib_origin
    if _lib is None:
        _lib, lib_path, lib_origin = _load()
    return _lib


def c_bytes(ptr: Any) -> bytes:
    """The bytes of a NUL-terminated ``char *`` from the library. (cffi's ``ffi.string`` is typed
    ``bytes | str``: it gives ``str`` only for ``wchar_t`` data, which no el_* function returns.)"""
    return cast(bytes, ffi.string(ptr))


def read_json(ptr: Any) -> Any:
    """The JSON value in a C string from the library (a result or a delta), by orjson where it can:
    the result of every call is parsed here. Text that is not valid UTF-8 (a model can split a
    character) or that orjson refuses goes to the standard parser, with the bad bytes replaced.
    (orjson would read an integer past 64 bits as a float; the library writes none.)"""
    raw = c_bytes(ptr)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8", errors="replace"))


def take_json(ptr: Any) -> dict[str, Any]:
    """Decode a string the library returned, free it, and raise if it is an error."""
    try:
        data = read_json(ptr)
    finally:
        lib().el_free(ptr)
    if not isinstance(data, dict):
        raise ShimError(f"the library returned {type(data).__name__}, not a JSON object")
    if "error" in data:
        raise from_library(cast(dict[str, Any], data))
    return cast(dict[str, Any], data)


def last_error(*, opening: str | None = None) -> ShimError:
    """Why the last el_open or int-returning el_* call on this thread failed (el_last_error)."""
    return from_library(json.loads(c_bytes(lib().el_last_error())), opening=opening)


def check(rc: int) -> None:
    """An int-returning el_* call's result: nothing for 0, its error for -1."""
    if rc != 0:
        raise last_error()


def encode(value: Any) -> bytes:
    """JSON for the library; NaN, Infinity and objects JSON cannot hold are refused here, by name."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise InvalidRequest(f"cannot send this to the model as JSON: {e}") from e


def encode_messages(messages: list[Any]) -> bytes:
    """The conversation as JSON for the library, by orjson: every call sends the whole of it, and
    the standard encoder took ~0.5 ms at ~16k tokens, orjson ~0.04 (issue 16). What orjson does
    not take (keys that are not strings, integers past 64 bits, unknown objects) goes to
    ``encode``, which converts or refuses it as before. orjson writes a non-finite float as
    null, as JavaScript's JSON.stringify does; OpenAI's messages hold no numbers, and the tools and
    options, where numbers mean something, are still refused NaN and Infinity by ``encode``."""
    try:
        return orjson.dumps(messages)
    except TypeError:
        return encode(messages)


def version() -> str:
    return c_bytes(lib().el_version()).decode()


def build_info() -> dict[str, Any]:
    """What the loaded library was built from: the llama.cpp commit, which of pyshim's patches
    its tree carried and lacked, and what is refused for each missing one (el_build_info)."""
    info: dict[str, Any] = orjson.loads(ffi.string(lib().el_build_info()))
    return info


__all__ = [
    "ShimError",
    "build_info",
    "c_bytes",
    "candidates",
    "encode",
    "encode_messages",
    "ffi",
    "lib",
    "read_json",
    "take_json",
    "version",
]
