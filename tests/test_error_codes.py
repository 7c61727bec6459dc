"""Every el_code the ABI returns, provoked for real: its number in the error object (or in
``el_last_error`` after -1 or NULL), and the exception Python raises for it, chosen by the code and
deriving from the builtin a caller would catch (issue 59)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import SMOL, user

import pyshim
from pyshim import models
from pyshim._lib import ffi, lib
from pyshim.errors import Code, from_library
from pyshim.handle import Handle

HEADER = Path(__file__).resolve().parent.parent / "native" / "el_shim.h"
HI = b'[{"role": "user", "content": "hi"}]'


def _raw_generate(m: pyshim.Model, options: dict[str, Any], messages: bytes = HI) -> dict[str, Any]:
    ptr = lib().el_generate(m.handle, messages, ffi.NULL, json.dumps(options).encode())
    try:
        return json.loads(ffi.string(ptr).decode())
    finally:
        lib().el_free(ptr)


def _last_error() -> dict[str, Any]:
    return json.loads(ffi.string(lib().el_last_error()).decode())


def test_the_codes_are_the_headers() -> None:
    """pyshim's Code is el_shim.h's el_code, name for name and value for value."""
    body = HEADER.read_text().split("typedef enum el_code {", 1)[1].split("} el_code;", 1)[0]
    declared = {name: int(value) for name, value in re.findall(r"\b(EL_\w+)\s*=\s*(\d+)", body)}
    assert declared.pop("EL_OK") == 0
    assert declared == {f"EL_E_{c.name}": c.value for c in Code}


def test_invalid(smol: pyshim.Model) -> None:
    r = _raw_generate(smol, {"max_tokens": "ten"})
    assert r["code"] == Code.INVALID and "max_tokens" in r["error"]
    with pytest.raises(ValueError, match="max_tokens") as e:
        smol.generate(user("hi"), max_tokens=-1)
    assert isinstance(e.value, pyshim.InvalidRequest) and e.value.code == Code.INVALID


def test_unknown_key(smol: pyshim.Model) -> None:
    r = _raw_generate(smol, {"max_tokenz": 3})
    assert r["code"] == Code.UNKNOWN_KEY and 'did you mean "max_tokens"' in r["error"]
    with pytest.raises(TypeError, match="max_tokens") as e:
        smol.generate(user("hi"), max_tokenz=3)
    assert isinstance(e.value, pyshim.UnknownOption) and isinstance(e.value, pyshim.InvalidRequest)
    assert lib().el_open(json.dumps({"model": str(models.path(SMOL)), "n_contxt": 64}).encode()) == ffi.NULL
    assert _last_error()["code"] == Code.UNKNOWN_KEY
    with pytest.raises(TypeError, match="n_ctx") as opened:
        pyshim.Model(SMOL, n_contxt=64)
    assert isinstance(opened.value, pyshim.InvalidConfig) and isinstance(opened.value, pyshim.ModelLoadError)


def test_invalid_config_value() -> None:
    with pytest.raises(ValueError, match="flash_attn") as e:
        pyshim.Model(SMOL, flash_attn="fast")
    assert isinstance(e.value, pyshim.InvalidConfigValue) and e.value.code == Code.INVALID


def test_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    assert lib().el_open(json.dumps({"model": str(missing)}).encode()) == ffi.NULL
    assert _last_error()["code"] == Code.NOT_FOUND
    with pytest.raises(FileNotFoundError) as e:  # the library's own answer, past Model's check
        Handle({"model": str(missing)})
    assert isinstance(e.value, pyshim.ModelFileNotFound) and e.value.filename == str(missing)


def test_load(tmp_path: Path) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 60)  # the magic, then nothing llama.cpp can read
    assert lib().el_open(json.dumps({"model": str(fake)}).encode()) == ffi.NULL
    assert _last_error()["code"] == Code.LOAD
    with pytest.raises(pyshim.ModelLoadError) as e:
        pyshim.Model(fake)
    assert e.value.code == Code.LOAD and not isinstance(e.value, (TypeError, ValueError))


def test_context_full(smol: pyshim.Model) -> None:
    long = json.dumps([{"role": "user", "content": "word " * 5000}]).encode()
    r = _raw_generate(smol, {}, long)
    assert r["code"] == Code.CONTEXT_FULL and "the context holds" in r["error"]
    with pytest.raises(ValueError) as e:
        smol.generate(user("word " * 5000))
    assert isinstance(e.value, pyshim.ContextFull)


def test_closed() -> None:
    m = pyshim.Model(SMOL, n_ctx=256)
    h = m.handle
    m.close()
    for rc in (lib().el_cancel(h), lib().el_reset(h), lib().el_forget(h, b"s"), lib().el_close(h)):
        assert rc == -1 and _last_error()["code"] == Code.CLOSED
    ptr = lib().el_stats(h)
    assert json.loads(ffi.string(ptr).decode())["code"] == Code.CLOSED
    lib().el_free(ptr)
    for call in (m.stats, m.reset, m.cancel, lambda: m.generate(user("hi"))):
        with pytest.raises(ValueError) as e:  # as I/O on a closed file
            call()
        assert isinstance(e.value, pyshim.ClosedModel)
    lib().el_cancel(h)
    assert isinstance(from_library(_last_error()), pyshim.ClosedModel)  # the library's own answer


def test_a_successful_int_call_clears_the_last_error(smol: pyshim.Model) -> None:
    assert lib().el_cancel_request(smol.handle, b"") == -1
    assert _last_error()["code"] == Code.INVALID
    with pytest.raises(ValueError):
        smol.cancel("")
    assert lib().el_forget(smol.handle, b"nobody") == 0
    assert _last_error() == {}
    assert lib().el_forget_scope(smol.handle, ffi.NULL, ffi.NULL) == -1
    assert _last_error()["code"] == Code.INVALID


def test_device_and_internal(tmp_path: Path) -> None:
    with pyshim.Model(SMOL, n_ctx=512) as m:
        r = _raw_generate(m, {"max_tokens": 2, "_test": {"fail_after_prefill": True}})
        assert r["code"] == Code.INTERNAL
        with pytest.raises(RuntimeError) as internal:
            m.generate(user("hi"), max_tokens=2, _test={"fail_after_prefill": True})
        assert isinstance(internal.value, pyshim.InternalError)
        assert m.generate(user("Say OK."), max_tokens=2)["n_decoded"] >= 1  # the handle lives on
        r = _raw_generate(m, {"max_tokens": 2, "_test": {"device_lost": True}})
        assert r["code"] == Code.DEVICE and "device may be lost" in r["error"]
        assert lib().el_reset(m.handle) == -1 and _last_error()["code"] == Code.DEVICE
        for call in (m.stats, m.reset, lambda: m.generate(user("hi"))):
            with pytest.raises(ConnectionError, match="handle is dead") as e:
                call()
            assert isinstance(e.value, pyshim.DeviceLost)


def test_timeout(smol: pyshim.Model) -> None:
    texts = [f"text number {i}, long enough to take a moment " * 8 for i in range(64)]
    ptr = lib().el_embed(smol.handle, json.dumps(texts).encode(), b'{"timeout_ms": 1}')
    r = json.loads(ffi.string(ptr).decode())
    lib().el_free(ptr)
    assert r["code"] == Code.TIMEOUT and "timed out" in r["error"]
    with pytest.raises(TimeoutError) as e:
        smol.embed(texts, timeout_ms=1)
    assert isinstance(e.value, pyshim.TimedOut)


def test_cancelled(smol: pyshim.Model) -> None:
    texts = [f"text number {i}, long enough to take a moment " * 8 for i in range(400)]
    smol.embed("warm up the embedding context")
    box: dict[str, BaseException] = {}

    def embed() -> None:
        try:
            smol.embed(texts)
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=embed)
    t.start()
    while t.is_alive() and "error" not in box:
        smol.cancel()
        t.join(0.05)
    t.join()
    assert isinstance(box.get("error"), pyshim.Cancelled), box
    assert box["error"].code == Code.CANCELLED


def test_no_memory() -> None:
    """A request bigger than what the process may still allocate: the library's allocation fails
    (RLIMIT_AS, in a child process), and the call says so instead of aborting."""
    script = textwrap.dedent(
        f"""
        import json, resource, sys
        import pyshim
        m = pyshim.Model({str(models.path(SMOL))!r}, n_ctx=256, cache_dir=None)
        messages = json.dumps([{{"role": "user", "content": "x" * (600 << 20)}}]).encode()
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize")) << 10
        resource.setrlimit(resource.RLIMIT_AS, (vm + (300 << 20), resource.RLIM_INFINITY))
        try:
            m._open().generate(messages, None, b"{{}}")
        except MemoryError as e:
            print(json.dumps({{"type": type(e).__name__, "code": getattr(e, "code", None), "msg": str(e)}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["type"] == "OutOfMemory" and seen["code"] == Code.NO_MEMORY, seen
