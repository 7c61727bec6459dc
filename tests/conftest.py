"""Shared fixtures: real catalogue models, opened once per test session, and real door servers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import pyshim
from pyshim import models

# No test reads prefixes another test (or an earlier run) left on disk, unless it names its own
# cache_dir: a fresh handle must be fresh. Servers started by the tests inherit this.
os.environ["PYSHIM_PREFIX_CACHE"] = ""

ROOT = Path(__file__).resolve().parent.parent
QWEN = "qwen2.5-coder-0.5b-instruct"
GEMMA = "gemma-3-270m"
SMOL = "smollm2-135m-instruct"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
        },
    },
}


def has_patch(name: str) -> bool:
    """Whether the library under test was built with native/patches/<name>.patch (every patch is
    optional: ``make test-nopatch`` runs the suites against a build with none)."""
    return name in pyshim.build_info()["patches"]


def needs_patch(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not has_patch(name), reason=f"the library was built without {name}.patch")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a build without some patch, a test that opens a handle the library refuses for that
    reason (its documented loss: "rpc", "deterministic" on some weight types) is skipped with the
    refusal as its reason, not failed; on a fully patched build nothing changes."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not pyshim.build_info()["patches_missing"]:
        return
    message = str(call.excinfo.value)
    if "patch, which this build of llama.cpp lacks" in message or "patch for this model, which this build" in message:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {message[:200]}")


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def model_path(spec: str) -> Path:
    """A catalogue model by name, or "tiny:<kind>" for a generated one (tests/tiny_models.py)."""
    if spec.startswith("tiny:"):
        from tiny_models import tiny_model

        return tiny_model(spec.removeprefix("tiny:"))
    return models.path(spec)


@pytest.fixture(scope="session")
def qwen() -> Iterator[pyshim.Model]:
    with pyshim.Model(QWEN, n_ctx=4096, temperature=0) as m:
        yield m


@pytest.fixture(scope="session")
def smol() -> Iterator[pyshim.Model]:
    with pyshim.Model(SMOL, n_ctx=2048, temperature=0) as m:
        yield m


@pytest.fixture(scope="session")
def gemma() -> Iterator[pyshim.Model]:
    with pyshim.Model(GEMMA, n_ctx=4096, temperature=0) as m:
        yield m


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    return models.path(QWEN)


# -- real `python -m pyshim serve` processes on free loopback ports (the door's tests) ---------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def start_server() -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("PYSHIM_API_KEY", None)
        cmd = [sys.executable, "-m", "pyshim", "serve", *args, "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}: {proc.stdout.read().decode()}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        pytest.fail("server did not become healthy")

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
