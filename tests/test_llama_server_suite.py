"""llama.cpp's own server tests judge the door: a peer's suite, run as its authors run it against
an external server.

The five files of the pinned tree's ``tools/server/tests/unit`` that cover what the door speaks
(chat completions, tool calls, Responses, Anthropic Messages, embeddings) run, with their own
conftest and helpers, against a real ``pyshim serve`` on a free loopback port
(``DEBUG_EXTERNAL=1 PORT=...``), started as their harness starts llama-server (``--seed 42``) and
answering the model names they send (``--alias``). Every case runs but those listed in
``tests/data/llama_server_skips.toml``, each with the reason it cannot apply here; an entry that
matches no case fails, so the list cannot outlive the cases it names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "vendor" / "llama.cpp" / "tools" / "server" / "tests"
FILES = ["test_chat_completion.py", "test_tool_call.py", "test_compat_oai_responses.py",
         "test_compat_anthropic.py", "test_embedding.py"]  # fmt: skip
ALIASES = ["test", "gpt-3.5-turbo-instruct", "gpt-4.1", "text-embedding-3-small"]  # the names the cases send
SKIPS = tomllib.loads((ROOT / "tests" / "data" / "llama_server_skips.toml").read_text())["skip"]

pytest.importorskip("aiohttp", reason="llama.cpp's server tests need aiohttp (make test installs it)")
pytest.importorskip("wget", reason="llama.cpp's server tests need wget (make test installs it)")


def _pytest(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    return subprocess.run(cmd, cwd=SUITE, env=env, capture_output=True, text=True, timeout=timeout)


def _names(entry: dict[str, str], case: str) -> bool:
    """Whether a skip entry names ``case``: itself, or the test function it is a parametrized case of."""
    return case == entry["case"] or case.startswith(entry["case"] + "[")


def _skipped(case: str) -> bool:
    return any(_names(s, case) for s in SKIPS)


def test_skip_list_names_cases_that_exist() -> None:
    out = _pytest(["--collect-only", *[f"unit/{f}" for f in FILES]], dict(os.environ), 120)
    cases = [line for line in out.stdout.splitlines() if "::" in line]
    assert cases, out.stdout + out.stderr
    stale = [s["case"] for s in SKIPS if not any(_names(s, c) for c in cases)]
    assert not stale, f"skip entries that match no case: {stale}"
    assert all(s.get("why") for s in SKIPS)


def test_llama_server_suite_passes_against_the_door(start_server: Callable[..., str]) -> None:
    aliases = [a for name in ALIASES for a in ("--alias", name)]
    url = start_server("qwen2.5-coder-0.5b-instruct", "--seed", "42", *aliases)
    env = {**os.environ, "DEBUG_EXTERNAL": "1", "PORT": url.rsplit(":", 1)[1]}
    listed = _pytest(["--collect-only", *[f"unit/{f}" for f in FILES]], env, 120)
    cases = [line for line in listed.stdout.splitlines() if "::" in line]
    run = [c for c in cases if not _skipped(c)]
    assert len(run) >= 60, listed.stdout[-2000:]  # what the list leaves runs (the hub models skip 196)
    out = _pytest(["--tb=short", "-rf", *run], env, 900)
    assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-2000:]
    print(out.stdout.splitlines()[-1], f"({len(cases) - len(run)} of {len(cases)} cases on the skip list)")
