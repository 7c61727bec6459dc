"""The library as a language-neutral contract: exports, the C and Ruby examples, loading rules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import pyshim
from pyshim import _lib

LIB = ROOT / "build" / "libel_shim.so"


def test_only_el_symbols_are_exported() -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], check=True, capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert names, "nm listed nothing"
    assert [n for n in names if not n.startswith("el_")] == []
    for fn in ("el_open", "el_generate", "el_generate_stream", "el_close", "el_free", "el_version", "el_cancel"):
        assert fn in names


def test_the_library_needs_no_llama_cpp_at_run_time() -> None:
    out = subprocess.run(["ldd", str(LIB)], check=True, capture_output=True, text=True).stdout
    assert "llama" not in out and "ggml" not in out


def test_version() -> None:
    v = pyshim.version()
    assert v.startswith("1.1 (llama.cpp 0c1e570")


def test_c_example_runs_a_tool_call(qwen_path: Path) -> None:
    exe = ROOT / "build" / "el_example_c"
    p = subprocess.run([str(exe), str(qwen_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    result = json.loads(p.stdout)
    assert result["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.skipif(shutil.which("ruby") is None, reason="no Ruby interpreter (CI installs Debian's ruby)")
def test_ruby_example_runs_a_tool_call(qwen_path: Path) -> None:
    p = subprocess.run(
        ["ruby", str(ROOT / "examples" / "ruby" / "tool_call.rb"), str(qwen_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr + p.stdout
    assert json.loads(p.stdout)["tool_calls"][0]["function"]["name"] == "get_weather"


def _loader(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "from pyshim import _lib; _lib.lib(); print(_lib.lib_path, '|', _lib.lib_origin)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)


def test_loader_says_where_the_library_came_from(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYSHIM_LIB"}
    p = _loader(env)
    assert p.returncode == 0, p.stderr
    assert "from the build tree" in p.stdout or "installed with the package" in p.stdout
    copy = tmp_path / "libel_shim.so"
    shutil.copy(LIB, copy)
    p = _loader({**env, "PYSHIM_LIB": str(copy)})
    assert p.stdout.strip() == f"{copy} | from $PYSHIM_LIB"
    p = _loader({**env, "PYSHIM_LIB": str(tmp_path / "missing.so")})
    assert p.returncode != 0 and "from $PYSHIM_LIB" in p.stderr and "missing.so" in p.stderr


def test_candidates_are_in_the_documented_order() -> None:
    reasons = [why for _, why in _lib.candidates()]
    assert reasons[-2:] == ["installed with the package", "from the build tree"]


def test_c_abi_test_program_passes() -> None:
    """tests/c/abi_test.c: bad input, streaming stop, cancellation and handle misuse, from C alone."""
    from conftest import SMOL

    from pyshim import models

    p = subprocess.run(
        [str(ROOT / "build" / "el_abi_test"), str(models.path(SMOL))], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr + p.stdout
    assert p.stdout.strip().endswith("0 failed")
