"""Remote devices: a model split over two real rpc-server processes on loopback.

The servers are llama.cpp's own (``make rpc-server``, same pinned and patched tree), bound
to 127.0.0.1 on free ports and started and stopped here. Checked: the split model computes
what the local one does (the KL oracle, with prefix reuse, on qwen and on gemma's
sliding-window cache); the weights really leave the process; and the faults a network
brings (a server that is not there, one killed mid-generation, one that stalls) end a call
with an error in bounded time while the caller's process carries on.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import GEMMA, QWEN, ROOT, SMOL, WEATHER_TOOL, user
from oracle import KL_BOUND, divergence, text

import pyshim
from bench.common.rpc_servers import RpcServer, binary, free_port
from pyshim import models
from pyshim._lib import lib

if binary() is None:
    pytest.skip("rpc-server could not be built (make rpc-server failed)", allow_module_level=True)


def two_servers(logs: Path) -> Iterator[list[RpcServer]]:
    pair = [RpcServer(logs, "a"), RpcServer(logs, "b")]
    try:
        for s in pair:
            s.start()
        yield pair
    finally:
        for s in pair:
            s.stop()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RpcServer]]:
    yield from two_servers(tmp_path_factory.mktemp("rpc"))


@pytest.fixture
def own_servers(tmp_path: Path) -> Iterator[list[RpcServer]]:
    """Servers for a test that kills or stops them."""
    yield from two_servers(tmp_path)


def endpoints(servers: list[RpcServer]) -> list[str]:
    return [s.endpoint for s in servers]


# -- open ---------------------------------------------------------------------


def test_an_endpoint_that_cannot_be_reached_is_named(servers: list[RpcServer]) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    with pytest.raises(pyshim.ModelLoadError, match=f"cannot reach the RPC server {nobody} .*refused"):
        pyshim.Model(SMOL, rpc=[servers[0].endpoint, nobody])
    with pytest.raises(pyshim.ModelLoadError, match='"host:port"'):
        pyshim.Model(SMOL, rpc=["localhost"])
    with pytest.raises(pyshim.ModelLoadError, match="twice"):
        pyshim.Model(SMOL, rpc=[servers[0].endpoint, servers[0].endpoint])
    # A port that accepts connections but never answers the handshake: no hang.
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(1)
        where = f"127.0.0.1:{mute.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(pyshim.ModelLoadError, match=f"cannot reach the RPC server {where} .*timed out"):
            pyshim.Model(SMOL, rpc=[where], rpc_timeout_ms=500)
        assert time.monotonic() - t0 < 5


# -- the same computation -----------------------------------------------------

# (name, model, layers offloaded (the rest stay on the local CPU), words per message)
SPLIT_CASES = [("qwen", QWEN, 16, 25), ("gemma-swa", GEMMA, 12, 110)]


@pytest.mark.parametrize(("name", "spec", "n_gpu_layers", "words"), SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
def test_split_generation_matches_local(
    servers: list[RpcServer], name: str, spec: str, n_gpu_layers: int, words: int
) -> None:
    path = models.path(spec)
    with (
        pyshim.Model(path, n_ctx=4096, temperature=0, rpc=endpoints(servers), n_gpu_layers=n_gpu_layers) as split,
        pyshim.Model(path, n_ctx=4096, temperature=0) as local,
    ):
        assert split.stats()["rpc"] == endpoints(servers)
        rng = random.Random(f"rpc-{name}")
        conv: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a terse assistant. " + text(rng, words)},
            {"role": "user", "content": text(rng, words)},
        ]
        last: dict[str, Any] | None = None
        for step, op in enumerate(["first", "append", "tool", "repeat"]):
            if op == "append" and last is not None:
                conv = [*conv, last["message"], {"role": "user", "content": text(rng, words // 2)}]
            elif op == "tool":
                conv = [
                    *conv,
                    {"role": "assistant", "content": None, "tool_calls": [_weather_call(step)]},
                    {"role": "tool", "tool_call_id": f"call_{step}", "name": "get_weather", "content": text(rng, 25)},
                ]
            d, last = divergence(split, local, conv, [WEATHER_TOOL], max_tokens=rng.randint(1, 4))
            assert d < KL_BOUND, f"{name}: step {step} ({op}): KL {d:.4f}"
            if op != "first":
                assert last["n_reused"] > last["n_prompt"] // 2, f"{name}: step {step} reused too little"
        # The oracle can fail on this path: a deliberately corrupted reused prefix shows.
        split.reset()
        split.generate(conv, max_tokens=1, temperature=0)
        bad, r = divergence(split, local, conv, _test={"reuse": "corrupt"})
        assert r["n_reused"] > 0
        assert bad > KL_BOUND, f"{name}: a corrupted cache gave KL {bad:.4f}; the oracle cannot see it here"


def _weather_call(step: int) -> dict[str, Any]:
    return {
        "id": f"call_{step}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }


# -- where the weights live ---------------------------------------------------

RSS_PROBE = """
import json, sys
import pyshim
from scripts.soak import rss_bytes
with pyshim.Model(sys.argv[1], **json.loads(sys.argv[2])) as m:
    m.generate([{"role": "user", "content": "Hi"}], max_tokens=2)
    print(rss_bytes(), flush=True)
    sys.stdin.readline()  # hold the model while the caller looks at the servers
"""


class Probe:
    """A fresh process that opens the model, generates with it and holds it until closed."""

    def __init__(self, path: Path, **config: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RSS_PROBE, str(path), json.dumps(config)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip().isdigit(), f"probe failed: {line!r}"
        self.rss = int(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def test_the_weights_live_on_the_servers(own_servers: list[RpcServer]) -> None:
    path = models.path(QWEN)
    size = path.stat().st_size
    mib = 1 << 20
    local = Probe(path, n_ctx=512)
    local.close()
    idle = [s.rss() for s in own_servers]
    split = Probe(path, n_ctx=512, rpc=endpoints(own_servers))
    try:
        held = [s.rss() - rss0 for s, rss0 in zip(own_servers, idle, strict=True)]
    finally:
        split.close()
    print(f"\nRSS local-only {local.rss / mib:.0f} MiB, split over two servers {split.rss / mib:.0f} MiB")
    for s, h in zip(own_servers, held, strict=True):
        print(f"{s.endpoint}: resident +{h / mib:.0f} MiB, buffers allocated {s.allocated() / mib:.0f} MiB")
    assert split.rss < local.rss - size // 2, "the split process still holds most of the weights"
    # Each server holds a real share (the layers are split by free memory, about half each).
    for s, h in zip(own_servers, held, strict=True):
        assert h > size // 4, f"{s.endpoint} holds only {h / mib:.0f} MiB of a {size / mib:.0f} MiB model"
        assert s.allocated() > size // 4


# -- faults -------------------------------------------------------------------


def _stream_until(n: int, action: Any) -> tuple[Any, list[float]]:
    """An on_delta that runs `action` once, after n deltas, and records when."""
    seen: list[float] = []
    count = [0]

    def on_delta(_delta: dict[str, Any]) -> None:
        count[0] += 1
        if count[0] == n:
            action()
            seen.append(time.monotonic())

    return on_delta, seen


LONG = {"max_tokens": 400, "ignore_eos": True}


def test_a_killed_server_fails_the_call_and_the_handle(own_servers: list[RpcServer]) -> None:
    a, b = own_servers
    m = pyshim.Model(SMOL, n_ctx=1024, temperature=0, rpc=endpoints(own_servers))
    on_delta, killed = _stream_until(3, b.kill)
    with pytest.raises(pyshim.ShimError, match=f"lost the RPC server {b.endpoint} while generating"):
        m.generate(user("Count from 1 to 500."), on_delta=on_delta, **LONG)
    kill_to_error = time.monotonic() - killed[0]
    print(f"\nkill to error: {kill_to_error * 1000:.0f} ms")
    assert kill_to_error < 5
    for _ in range(2):
        with pytest.raises(pyshim.ShimError, match="handle is dead"):
            m.generate(user("hi"), max_tokens=2)
    closed = a.connections_closed()
    assert lib().el_close(m.handle) == 0
    m._handle = None
    # el_close freed the model, remote buffers included: the surviving server sees its client go.
    deadline = time.monotonic() + 10
    while a.connections_closed() == closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert a.connections_closed() > closed
    with pytest.raises(pyshim.ModelLoadError, match=f"cannot reach the RPC server {b.endpoint}"):
        pyshim.Model(SMOL, rpc=endpoints(own_servers))
    b.start()  # back on the same port
    with pyshim.Model(SMOL, n_ctx=1024, temperature=0, rpc=endpoints(own_servers)) as again:
        assert again.generate(user("Say OK."), max_tokens=3)["n_decoded"] >= 1


def test_a_stalled_server_is_caught_by_timeout_ms(own_servers: list[RpcServer]) -> None:
    a, _ = own_servers
    m = pyshim.Model(SMOL, n_ctx=1024, temperature=0, rpc=endpoints(own_servers))
    try:
        on_delta, _paused = _stream_until(3, a.pause)
        t0 = time.monotonic()
        with pytest.raises(pyshim.ShimError, match=f"lost the RPC server .*{a.endpoint}.*connection was cut"):
            m.generate(user("Count from 1 to 500."), on_delta=on_delta, timeout_ms=2000, **LONG)
        took = time.monotonic() - t0
        print(f"\ntimeout_ms 2000 on a stalled server: error after {took * 1000:.0f} ms")
        assert took < 2 + 2 + 3  # timeout_ms + the grace the watchdog allows + slack
    finally:
        a.resume()
        m.close()
    with pyshim.Model(SMOL, n_ctx=1024, temperature=0, rpc=endpoints(own_servers)) as again:
        assert again.generate(user("Say OK."), max_tokens=3)["n_decoded"] >= 1


def test_a_stalled_server_is_caught_by_the_socket_timeout(own_servers: list[RpcServer]) -> None:
    a, _ = own_servers
    m = pyshim.Model(SMOL, n_ctx=1024, temperature=0, rpc=endpoints(own_servers), rpc_timeout_ms=1500)
    try:
        on_delta, paused = _stream_until(3, a.pause)
        with pytest.raises(pyshim.ShimError, match=f"lost the RPC server {a.endpoint} .*stalled past rpc_timeout_ms"):
            m.generate(user("Count from 1 to 500."), on_delta=on_delta, **LONG)
        took = time.monotonic() - paused[0]
        print(f"\nrpc_timeout_ms 1500 on a stalled server: error {took * 1000:.0f} ms after the stall")
        assert took < 1.5 + 3
    finally:
        a.resume()
        m.close()
