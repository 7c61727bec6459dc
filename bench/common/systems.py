"""The systems the peer benchmark drives, behind one call: a chat turn, streamed and timed.

Each system gets the same OpenAI-shaped messages and tools, the same threads, greedy
sampling and the same context size, and reports the time to the first generated token
(content or tool call; prompt-progress reports do not count), the wall time of the turn
and the token counts it saw.

- ``pyshim``: ``pyshim.Model.generate`` with a streaming callback.
- ``llama-cpp-python``: ``Llama.create_chat_completion(stream=True)``, the 0.3.36 package
  from the same source archive as ``vendor/llama.cpp``, loading the shared ``libllama.so``
  built from that tree (``LLAMA_CPP_LIB_PATH``) instead of compiling it a second time.
- ``llama-server``: the same tree's server, its OpenAI endpoint, prompt caching on.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from bench.common.fixtures import TOOLS
from bench.common.provenance import ROOT
from bench.common.rpc_servers import free_port

PEERS = ROOT / "build-peers" / "bin"  # llama-bench, llama-server, libllama.so (make bench-peers)
# llama-bench from the pinned tree with no patch (make peers-upstream): the upstream floors
PEERS_UPSTREAM = ROOT / "build-peers-upstream" / "bin"
THREADS = os.cpu_count() or 2


#: A turn's OpenAI messages and tools (None: no tools), as every system takes them.
Messages = list[dict[str, Any]]
Tools = list[dict[str, Any]] | None


@dataclass
class Turn:
    ttft_s: float  # request sent → first generated token received
    total_s: float  # request sent → turn complete
    n_prompt: int  # prompt tokens, as the system counted them
    n_gen: int  # tokens generated
    n_evaluated: int | None = None  # prompt tokens actually evaluated (not reused), where reported
    model_s: float | None = None  # time the engine spent evaluating and sampling, where reported
    detail: dict[str, float] = field(default_factory=dict)  # system-specific timings, ms


class System(Protocol):
    name: str
    info: dict[str, Any]  # settings worth reporting beside the results

    def turn(self, messages: Messages, tools: Tools, max_tokens: int, ignore_eos: bool = False) -> Turn: ...

    def clear_cache(self) -> None:
        """Forget every cached prompt, so that the next turn evaluates its whole prompt
        (where the system offers a way; llama-server reports what it evaluated instead)."""
        ...

    def close(self) -> None: ...


def timed_generate(model: Any, messages: list[dict[str, Any]], tools: Any, **options: Any) -> tuple[float, float, dict]:
    """One streamed ``pyshim.Model.generate`` call: (seconds to the first generated token,
    seconds in all, the result). Prompt-progress reports are not generated tokens."""
    first: list[float] = []

    def on_delta(d: dict[str, Any]) -> None:
        if not first and "prompt_progress" not in d:
            first.append(time.perf_counter())

    t0 = time.perf_counter()
    r = model.generate(messages, tools, on_delta=on_delta, **options)
    t1 = time.perf_counter()
    return (first[0] if first else t1) - t0, t1 - t0, r


class Pyshim:
    name = "pyshim"

    def __init__(self, model: Path, n_ctx: int, n_seq: int = 1, reuse: bool = True, flash_attn: str = "auto") -> None:
        import pyshim

        self.model = pyshim.Model(model, n_ctx=n_ctx, n_seq=n_seq, n_threads=THREADS, flash_attn=flash_attn)
        self.info = {"flash_attn": flash_attn}
        self.reuse = reuse

    def turn(
        self, messages: Messages, tools: Tools, max_tokens: int, ignore_eos: bool = False, session: str | None = None
    ) -> Turn:
        """One turn; ``session`` pins its conversation to a slot (the option of that name)."""
        ttft, total, r = timed_generate(
            self.model,
            messages,
            tools,
            max_tokens=max_tokens,
            temperature=0,
            cache_prompt=self.reuse,
            ignore_eos=ignore_eos,
            **({"session": session} if session is not None else {}),
        )
        return Turn(
            ttft,
            total,
            r["n_prompt"],
            r["n_decoded"],
            r["n_prompt"] - r["n_reused"],
            model_s=(r["ms_reset"] + r["ms_prefill"] + r["ms_decode"]) / 1000,
            detail={
                k.replace("ms_", "") + "_ms": r[k]
                for k in ("ms_prepare", "ms_template", "ms_tokenize", "ms_sampler")
                if k in r
            },
        )

    def clear_cache(self) -> None:
        self.model.reset()

    def close(self) -> None:
        self.model.close()


class LlamaCppPython:
    name = "llama-cpp-python"

    def __init__(self, model: Path, n_ctx: int) -> None:
        os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(PEERS))
        from llama_cpp import Llama  # the bench extra; see `make bench`

        self.llm = Llama(str(model), n_ctx=n_ctx, n_threads=THREADS, n_threads_batch=THREADS, verbose=False, seed=0)
        import llama_cpp

        fa = {-1: "auto", 0: "off", 1: "on"}.get(int(self.llm.context_params.flash_attn_type), "?")
        self.info = {"chat_format": self.llm.chat_format, "flash_attn": fa}
        vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.no_eog = {t: float("-inf") for t in range(self.llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)}

    def turn(self, messages: Messages, tools: Tools, max_tokens: int, ignore_eos: bool = False) -> Turn:
        t0 = time.perf_counter()
        first = None
        n_gen = 0
        # Its Jinja renderer cannot concatenate the null content of a tool-call message.
        messages = [{**m, "content": m.get("content") or ""} for m in messages]
        for chunk in self.llm.create_chat_completion(
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=0.0,
            repeat_penalty=1.0,  # the others apply none
            logit_bias=self.no_eog if ignore_eos else None,
            stream=True,
        ):
            delta = chunk["choices"][0]["delta"]  # type: ignore[index]
            if delta.get("content") or delta.get("tool_calls"):
                n_gen += 1
                if first is None:
                    first = time.perf_counter()
        t1 = time.perf_counter()
        # The binding does not report its prompt size; the tokens it holds are prompt + output.
        n_prompt = max(0, self.llm.n_tokens - n_gen)
        return Turn((first or t1) - t0, t1 - t0, n_prompt, n_gen)

    def clear_cache(self) -> None:
        self.llm.reset()  # its token mirror: the next prompt shares no prefix with it

    def close(self) -> None:
        self.llm.close()


class LlamaServer:
    name = "llama-server"

    def __init__(
        self, model: Path, n_ctx: int, n_seq: int = 1, log: Path | None = None, extra: Sequence[str] = ()
    ) -> None:
        self.port = free_port()
        self.info = {"flash_attn": "auto"}
        self.cold = False  # the next turn evaluates its whole prompt (clear_cache)
        # -c is the whole cache; with -np slots each conversation gets n_ctx of its own, as in pyshim.
        cmd = [str(PEERS / "llama-server"), "-m", str(model), "-c", str(n_ctx * n_seq), "-np", str(n_seq)]
        cmd += ["-t", str(THREADS), "-tb", str(THREADS), "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--jinja", "--no-webui", "--temp", "0", *extra]
        self.log = open(log or os.devnull, "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {' '.join(cmd)}")
            try:
                status, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("llama-server did not become healthy in 120 s")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request(method, path, json.dumps(body) if body else None, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def turn(self, messages: Messages, tools: Tools, max_tokens: int, ignore_eos: bool = False) -> Turn:
        cold, self.cold = self.cold, False
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "cache_prompt": not cold,
            "ignore_eos": ignore_eos,
            "timings_per_token": False,
        }
        if tools:
            body["tools"] = tools
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.perf_counter()
        first = None
        timings: dict[str, Any] = {}
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"llama-server answered {resp.status}: {resp.read()[:500]!r}")
            for raw in resp:
                line = raw.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices", []):
                    delta = choice.get("delta", {})
                    if first is None and (delta.get("content") or delta.get("tool_calls")):
                        first = time.perf_counter()
                timings = chunk.get("timings", timings)
        finally:
            conn.close()
        t1 = time.perf_counter()
        n_eval = int(timings.get("prompt_n", 0))
        n_prompt = n_eval + int(timings.get("cache_n", 0))
        model_s = (float(timings.get("prompt_ms", 0)) + float(timings.get("predicted_ms", 0))) / 1000
        return Turn((first or t1) - t0, t1 - t0, n_prompt, int(timings.get("predicted_n", 0)), n_eval, model_s)

    def clear_cache(self) -> None:
        # llama-server has no endpoint that forgets its prompts (slot erase needs slot files and
        # leaves the host-memory prompt cache, which would load the prompt back): the next turn
        # asks for no reuse instead (cache_prompt false), so it evaluates its whole prompt, as
        # the other systems' next turn does after theirs; it still caches what it evaluated.
        self.cold = True

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def session(
    system: System,
    prompts: list[list[dict[str, Any]]],
    max_tokens: int = 16,
    ignore_eos: bool = False,
    tools: list[dict[str, Any]] | None = TOOLS,
) -> list[dict[str, Any]]:
    rows = []
    for messages in prompts:
        t = system.turn(messages, tools, max_tokens, ignore_eos)
        rows.append(
            {
                "ttft_s": t.ttft_s,
                "total_s": t.total_s,
                "n_prompt": t.n_prompt,
                "n_gen": t.n_gen,
                "n_evaluated": t.n_evaluated,
            }
        )
    return rows


@contextmanager
def door_server(model: str, n_ctx: int = 8192) -> Iterator[str]:
    """A ``pyshim serve`` process on a free port, killed on exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "pyshim", "serve", model, "--port", str(port), "--log-level", "warning"]
    cmd += ["--n-ctx", str(n_ctx), "--temperature", "0"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start ({proc.returncode})")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def open_system(name: str, model: Path, n_ctx: int, n_seq: int = 1) -> System:
    if name == "pyshim":
        return Pyshim(model, n_ctx, n_seq)
    if name in ("pyshim-reuse-off", "pyshim-fa-off"):
        s = Pyshim(model, n_ctx, n_seq, reuse=name != "pyshim-reuse-off", flash_attn="off" if "fa" in name else "auto")
        s.name = name
        return s
    if name == "llama-cpp-python":
        return LlamaCppPython(model, n_ctx)
    if name == "llama-server":
        return LlamaServer(model, n_ctx, n_seq)
    raise ValueError(f"unknown system {name!r}")
