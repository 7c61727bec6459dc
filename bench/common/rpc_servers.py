"""llama.cpp rpc-server processes on loopback, for tests/test_rpc.py and bench/rpc.py.

The binary comes from ``make rpc-server`` (build-rpc/, the same pinned and patched tree as
the library). Servers bind 127.0.0.1 only: rpc-server has no authentication, and a test
has no business opening a port to the network. Each server logs to a file of its own with
GGML_RPC_DEBUG on, which is where it reports the buffers it allocates for a client.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from bench.common.provenance import ROOT

BINARY = ROOT / "build-rpc" / "bin" / "ggml-rpc-server"


def binary(build: bool = True) -> Path | None:
    """The rpc-server binary, built with `make rpc-server` if missing; None if that fails."""
    if not BINARY.exists() and build:
        subprocess.run(["make", "-s", "rpc-server"], cwd=ROOT, capture_output=True, timeout=3600)
    return BINARY if BINARY.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RpcServer:
    """One rpc-server on 127.0.0.1; start(), stop(), kill(), pause()/resume() (SIGSTOP/CONT)."""

    def __init__(self, log_dir: Path, name: str, threads: int = 1, debug: bool = True) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = log_dir / f"{name}.log"
        self.threads = threads
        self.debug = debug  # GGML_RPC_DEBUG: the server logs every command (allocated() reads it)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RpcServer:
        exe = binary()
        if exe is None:
            raise RuntimeError("rpc-server is not built (make rpc-server)")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(exe), "-H", "127.0.0.1", "-p", str(self.port), "-t", str(self.threads)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "GGML_RPC_DEBUG": "1"} if self.debug else None,
            )
        deadline = time.monotonic() + 30
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"rpc-server on {self.endpoint} did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def _listening(self) -> bool:
        # The kernel's table, not a connect(): rpc-server serves one client at a time and
        # would count a probe connection as a client.
        hexport = f":{self.port:04X} "
        with open("/proc/net/tcp") as f:
            return any(hexport in line and line.split()[3] == "0A" for line in f)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def allocated(self) -> int:
        """Bytes of the buffers this server allocated for clients, from its debug log."""
        text = self.log.read_text(errors="replace")
        return sum(int(m) for m in re.findall(r"\[alloc_buffer\] device: \d+, size: \d+ -> .*remote_size: (\d+)", text))

    def connections_closed(self) -> int:
        return self.log.read_text(errors="replace").count("Client connection closed")

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> RpcServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
