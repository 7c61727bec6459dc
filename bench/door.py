"""The HTTP door's overhead per call: the 20-turn agent session in-process and through ``pyshim serve``.

Each turn's prompt (``bench.agent_session.conversation``) is sent to an in-process ``Model`` and,
with the same settings, to a ``python -m pyshim serve`` process through the ``openai`` client,
one after the other, so both see the same prompts, the same cache reuse and the same machine
load. Each turn is timed four ways: wall of a plain call and time to first token of a streamed
call, on each side. Reported: the per-call difference (door minus in-process; median and
interquartile range over the turns) and the ratio of the medians.

    python -m bench.door [--model smollm2-135m-instruct] [--turns 20] [--max-tokens 16] [--out docs/bench-door.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai

import pyshim
from bench.agent_session import TOOLS, conversation
from bench.systems import PEERS, LlamaServer
from pyshim import models

ROOT = Path(__file__).resolve().parent.parent
CONFIG = {"n_ctx": 8192, "temperature": 0}


@contextmanager
def server(model: str) -> Iterator[str]:
    """A ``pyshim serve`` process on a free port, killed on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "pyshim", "serve", model, "--port", str(port), "--log-level", "warning"]
    cmd += ["--n-ctx", str(CONFIG["n_ctx"]), "--temperature", "0"]
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


def _model_ms(r: dict[str, Any]) -> float:
    return float(sum(r.get(k) or 0 for k in ("ms_prepare", "ms_reset", "ms_prefill", "ms_decode")))


def _direct(model: pyshim.Model, prompt: list[Any], options: dict[str, Any]) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    r = model.generate(prompt, TOOLS, **options)
    wall = time.perf_counter() - t0
    outside = wall * 1e3 - _model_ms(r)
    first: list[float] = []
    t0 = time.perf_counter()
    for delta in model.stream(prompt, TOOLS, **options):
        if not first and (delta.get("content") or delta.get("tool_calls")):
            first.append(time.perf_counter() - t0)
    return wall, first[0] if first else float("nan"), outside


def _model_ms_of(response: httpx.Response) -> float:
    """The model time a server reports: pyshim's header, or llama-server's own timings."""
    if "x-pyshim-model-ms" in response.headers:
        return float(response.headers["x-pyshim-model-ms"])
    timings = response.json()["timings"]
    return float(timings["prompt_ms"] + timings["predicted_ms"])


def _door(client: openai.OpenAI, name: str, prompt: list[Any], options: dict[str, Any]) -> tuple[float, float, float]:
    args: dict[str, Any] = {"model": name, "messages": prompt, "tools": TOOLS, "max_tokens": options["max_tokens"]}
    extra = {"ignore_eos": True}
    t0 = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(extra_body=extra, **args)
    wall = time.perf_counter() - t0
    outside = wall * 1e3 - _model_ms_of(raw.http_response)
    first: list[float] = []
    t0 = time.perf_counter()
    for chunk in client.chat.completions.create(stream=True, extra_body=extra, **args):
        d = chunk.choices[0].delta if chunk.choices else None
        if not first and d is not None and (d.content or d.tool_calls):
            first.append(time.perf_counter() - t0)
    return wall, first[0] if first else float("nan"), outside


def _handler_ms(response: httpx.Response) -> float | None:
    """The door's own time inside its handler, from its ``Server-Timing`` header (None elsewhere)."""
    for metric in response.headers.get("server-timing", "").split(","):
        name, _, dur = metric.strip().partition(";dur=")
        if name == "door" and dur:
            return float(dur)
    return None


def _raw(
    http: httpx.Client, url: str, name: str, prompt: list[Any], options: dict[str, Any]
) -> tuple[float, float | None]:
    """Wall outside the engine of a plain call sent with httpx alone (the HTTP client the openai
    package is built on): the server's own cost, without the openai client's request building
    and response parsing; and the part of it spent inside the door's handler."""
    body = {"model": name, "messages": prompt, "tools": TOOLS, "max_tokens": options["max_tokens"], "ignore_eos": True}
    t0 = time.perf_counter()
    r = http.post(f"{url}/v1/chat/completions", json=body)
    r.json()  # parsed inside the timing, as the openai client parses its response
    wall = (time.perf_counter() - t0) * 1e3
    r.raise_for_status()
    return wall - _model_ms_of(r), _handler_ms(r)


@contextmanager
def llama_server(model: str) -> Iterator[str | None]:
    """llama-server from build-peers/ (``make peers``) on the same model and settings, or None."""
    if not (PEERS / "llama-server").exists():
        yield None
        return
    peer = LlamaServer(models.path(model), n_ctx=int(CONFIG["n_ctx"]))
    try:
        yield f"http://127.0.0.1:{peer.port}"
    finally:
        peer.close()


def run(model: str, turns: int, max_tokens: int) -> list[dict[str, float]]:
    """Per turn, in milliseconds, in-process, through the door and (where built) through llama-server's
    own HTTP: wall and TTFT, and the wall time spent outside the engine (wall minus the model time each
    reports), which machine load barely moves. The three take the same prompts turn by turn."""
    options = {"max_tokens": max_tokens, "ignore_eos": True}
    rows = []
    with pyshim.Model(model, **CONFIG) as direct, server(model) as url, llama_server(model) as peer_url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        peer = openai.OpenAI(base_url=f"{peer_url}/v1", api_key="none", max_retries=0) if peer_url else None
        http = httpx.Client(timeout=600)
        for i, prompt in enumerate(conversation(turns)):
            d_wall, d_ttft, d_out = _direct(direct, prompt, options)
            h_wall, h_ttft, h_out = _door(client, model, prompt, options)
            row = (
                {"turn": i + 1, "direct_wall": d_wall * 1e3, "door_wall": h_wall * 1e3}
                | {"direct_ttft": d_ttft * 1e3, "door_ttft": h_ttft * 1e3}
                | {"direct_outside": d_out, "door_outside": h_out}
            )
            row["door_raw_outside"], row["door_handler"] = _raw(http, url, model, prompt, options)
            if peer is not None:
                s_wall, s_ttft, s_out = _door(peer, model, prompt, options)
                row |= {"server_wall": s_wall * 1e3, "server_ttft": s_ttft * 1e3, "server_outside": s_out}
                row["server_raw_outside"] = _raw(http, str(peer_url), model, prompt, options)[0]
            rows.append(row)
        client.close()
        http.close()
        if peer is not None:
            peer.close()
    return rows


def _spread(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    return statistics.median(xs), q[0], q[2]


def summary(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for what in ("wall", "ttft", "outside"):
        direct = [r[f"direct_{what}"] for r in rows]
        door = [r[f"door_{what}"] for r in rows]
        med, q1, q3 = _spread([b - a for a, b in zip(direct, door, strict=True)])
        out[what] = {
            "direct_ms": statistics.median(direct),
            "door_ms": statistics.median(door),
            "overhead_ms": med,
            "overhead_q1": q1,
            "overhead_q3": q3,
            "ratio": statistics.median(door) / max(statistics.median(direct), 1e-9),
        }
        if all(f"server_{what}" in r for r in rows):
            out[what]["server_ms"] = statistics.median(r[f"server_{what}"] for r in rows)
    raw = [r["door_raw_outside"] - r["direct_outside"] for r in rows]
    med, q1, q3 = _spread(raw)
    out["raw"] = {"door_ms": statistics.median(r["door_raw_outside"] for r in rows), "overhead_ms": med}
    out["raw"] |= {"overhead_q1": q1, "overhead_q3": q3, "client_ms": out["outside"]["door_ms"] - out["raw"]["door_ms"]}
    if all(r.get("door_handler") is not None for r in rows):
        out["raw"]["handler_ms"] = statistics.median(r["door_handler"] for r in rows)
    if all("server_raw_outside" in r for r in rows):
        out["raw"]["server_ms"] = statistics.median(r["server_raw_outside"] for r in rows)
    return out


def markdown(model: str, turns: int, max_tokens: int, s: dict[str, dict[str, float]]) -> str:
    lines = [
        "# The HTTP door's overhead per call",
        "",
        f"`python -m bench.door --model {model} --turns {turns} --max-tokens {max_tokens}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs: the {turns}-turn agent session of `bench.agent_session`, "
        f"{max_tokens} tokens per turn, in-process (`Model`), through `pyshim serve` and through llama-server's "
        "own HTTP (same pinned tree, `make peers`), the last two with the openai client, turn by turn on the same "
        "prompts. Outside = wall minus the model time each reports (pyshim's timings; llama-server's "
        "`timings.prompt_ms + predicted_ms`).",
        "",
        "| per call | in-process (median) | door (median) | door − in-process: median [IQR] | ratio "
        "| llama-server HTTP (median) |",
        "|---|---|---|---|---|---|",
    ]
    labels = (
        ("outside", "wall outside the library, plain call"),
        ("wall", "wall, plain call"),
        ("ttft", "time to first token, streamed"),
    )
    for what, label in labels:
        r = s[what]
        lines.append(
            f"| {label} | {r['direct_ms']:.1f} ms | {r['door_ms']:.1f} ms | "
            f"{r['overhead_ms']:+.2f} ms [{r['overhead_q1']:+.2f}, {r['overhead_q3']:+.2f}] | {r['ratio']:.3f} | "
            + (f"{r['server_ms']:.1f} ms |" if "server_ms" in r else "not built |")
        )
    return "\n".join(lines + raw_table(s)) + "\n"


def raw_table(s: dict[str, dict[str, float]]) -> list[str]:
    """The outside time of a plain call split into the server's share and the openai client's."""
    r, o = s["raw"], s["outside"]
    peer = f"{r['server_ms']:.1f} ms" if "server_ms" in r else "not built"
    peer_openai = f"{o['server_ms']:.1f} ms" if "server_ms" in o else "not built"
    lines = [
        "",
        "Where the outside time goes, plain call (median ms per call; the same turns sent once more with httpx "
        "alone, the HTTP client the openai package is built on, so the client's own request building and "
        "response parsing drop out):",
        "",
        "| client | in-process | door | door − in-process: median [IQR] | llama-server HTTP |",
        "|---|---|---|---|---|",
        f"| httpx (the server's own cost) | {o['direct_ms']:.1f} ms | {r['door_ms']:.1f} ms | "
        f"{r['overhead_ms']:+.2f} ms [{r['overhead_q1']:+.2f}, {r['overhead_q3']:+.2f}] | {peer} |",
        f"| openai client | {o['direct_ms']:.1f} ms | {o['door_ms']:.1f} ms | {o['overhead_ms']:+.2f} ms "
        f"| {peer_openai} |",
        "",
        f"The openai client itself accounts for about {r['client_ms']:.1f} ms of each door call "
        "(openai row minus httpx row); it costs the same against any server.",
    ]
    if "handler_ms" in r:
        lines += [
            "",
            f"Of the door's {r['door_ms']:.1f} ms (httpx row), {r['handler_ms']:.1f} ms is spent inside its request "
            "handler outside the library (the `door` entry of its `Server-Timing` header: reading and parsing the "
            "body, the hop to the model's worker thread and back, the library call's own outside time that "
            f"in-process calls pay too, building the response); the other {r['door_ms'] - r['handler_ms']:.1f} ms is "
            "HTTP: uvicorn reading and writing, loopback TCP, httpx sending the request and reading the reply.",
        ]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    text = markdown(args.model, args.turns, args.max_tokens, summary(run(args.model, args.turns, args.max_tokens)))
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
