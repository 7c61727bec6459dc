"""The HTTP door beside llama-server's own HTTP, by the wall: the 20-turn agent session through
``pyshim serve``, through llama-server (same pinned tree) and in-process for reference.

Each turn's prompt (``bench.agent_session.conversation``) is sent to an in-process ``Model``, to a
``python -m pyshim serve`` process and to llama-server, the last two through the ``openai`` client,
one after the other, so all see the same prompts, the same cache reuse and the same machine
load. Each turn is timed by the wall of a plain call and the time to first token of a streamed
call. Reported: the per-turn difference door minus llama-server (median and interquartile range
over the turns), and door minus in-process; the wall minus each server's reported model time is
shown only to read where each one's time goes, never as the comparison.

    python -m bench.door [--model smollm2-135m-instruct] [--turns 20] [--max-tokens 16] [--out docs/bench-door.md]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai

import pyshim
from bench.common.fixtures import TOOLS, conversation
from bench.common.provenance import args_command, stamp
from bench.common.stats import quartiles
from bench.common.systems import PEERS, LlamaServer, door_server
from pyshim import models

CONFIG = {"n_ctx": 8192, "temperature": 0}
# The bare clients each turn is sent by once more, besides the openai client.
CLIENTS = {"min": "`http.client` (the server's own cost)", "raw": "httpx"}


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


def _model_ms_of(headers: Mapping[str, str], reply: Any) -> float:
    """The model time a server reports: pyshim's header, or llama-server's own timings."""
    if "x-pyshim-model-ms" in headers:
        return float(headers["x-pyshim-model-ms"])
    timings = reply["timings"]
    return float(timings["prompt_ms"] + timings["predicted_ms"])


def _door(client: openai.OpenAI, name: str, prompt: list[Any], options: dict[str, Any]) -> tuple[float, float, float]:
    args: dict[str, Any] = {"model": name, "messages": prompt, "tools": TOOLS, "max_tokens": options["max_tokens"]}
    extra = {"ignore_eos": True}
    client.models.list()  # a kept-alive connection, however long the turn's other calls took
    t0 = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(extra_body=extra, **args)
    wall = time.perf_counter() - t0
    outside = wall * 1e3 - _model_ms_of(raw.http_response.headers, raw.http_response.json())
    first: list[float] = []
    client.models.list()
    t0 = time.perf_counter()
    for chunk in client.chat.completions.create(stream=True, extra_body=extra, **args):
        d = chunk.choices[0].delta if chunk.choices else None
        if not first and d is not None and (d.content or d.tool_calls):
            first.append(time.perf_counter() - t0)
    return wall, first[0] if first else float("nan"), outside


def _handler_ms(headers: Mapping[str, str]) -> float | None:
    """The door's own time inside its handler, from its ``Server-Timing`` header (None elsewhere)."""
    for metric in headers.get("server-timing", "").split(","):
        name, _, dur = metric.strip().partition(";dur=")
        if name == "door" and dur:
            return float(dur)
    return None


# A plain call sent by a bare HTTP client: the status, the response headers (lower-case names),
# the parsed reply, and when the clock started (once the connection was ready).
Post = Callable[[dict[str, Any]], tuple[int, dict[str, str], Any, float]]


def httpx_post(http: httpx.Client, url: str) -> Post:
    """httpx, the HTTP client the openai package is built on."""

    def post(body: dict[str, Any]) -> tuple[int, dict[str, str], Any, float]:
        http.get(f"{url}/health")  # a kept-alive connection, however long the turn's other calls took
        t0 = time.perf_counter()
        r = http.post(f"{url}/v1/chat/completions", json=body)
        return r.status_code, dict(r.headers), r.json(), t0

    return post


def _fresh(url: str, stack: ExitStack) -> Callable[[], http.client.HTTPConnection]:
    """An ``http.client`` connection, opened anew for each call before its clock starts: both
    servers close a kept-alive connection that idles 5 s, as these do between a turn's calls."""
    where = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=600)
    stack.callback(conn.close)

    def connect() -> http.client.HTTPConnection:
        conn.close()
        conn.connect()
        time.sleep(0.01)  # the server takes the connection in before the request is timed
        return conn

    return connect


def _send_chat(conn: http.client.HTTPConnection, body: dict[str, Any]) -> http.client.HTTPResponse:
    """One chat completion request on an open ``http.client`` connection."""
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    return conn.getresponse()


def stdlib_post(url: str, stack: ExitStack) -> Post:
    """The standard library's ``http.client``: the least work a client can do per call, so what
    it measures is the server's own cost and loopback TCP."""
    connect = _fresh(url, stack)

    def post(body: dict[str, Any]) -> tuple[int, dict[str, str], Any, float]:
        conn = connect()
        t0 = time.perf_counter()
        r = _send_chat(conn, body)
        reply = json.loads(r.read())
        return r.status, {k.lower(): v for k, v in r.getheaders()}, reply, t0

    return post


def stdlib_first_delta(url: str, stack: ExitStack) -> Callable[[dict[str, Any]], float]:
    """A streamed call by ``http.client``: milliseconds to the first chunk holding content or a
    tool call (the rest of the stream is read, unparsed)."""
    connect = _fresh(url, stack)

    def first_delta(body: dict[str, Any]) -> float:
        conn = connect()
        t0, first = time.perf_counter(), float("nan")
        r = _send_chat(conn, body | {"stream": True})
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()!r}")
        for line in r:
            if first != first and line.startswith(b"data: {"):  # still NaN: look at this chunk
                delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
                if delta.get("content") or delta.get("tool_calls"):
                    first = (time.perf_counter() - t0) * 1e3
        return first

    return first_delta


def _bare_clients(
    bare: httpx.Client, url: str, stack: ExitStack
) -> tuple[dict[str, Post], Callable[[dict[str, Any]], float]]:
    """One server's bare senders: a plain call by each of CLIENTS, and a streamed one by ``http.client``."""
    return {"raw": httpx_post(bare, url), "min": stdlib_post(url, stack)}, stdlib_first_delta(url, stack)


def _body(name: str, prompt: list[Any], options: dict[str, Any]) -> dict[str, Any]:
    return {"model": name, "messages": prompt, "tools": TOOLS, "max_tokens": options["max_tokens"], "ignore_eos": True}


def _raw(post: Post, name: str, prompt: list[Any], options: dict[str, Any]) -> tuple[float, float | None]:
    """Wall outside the engine of a plain call sent by a bare HTTP client, without the openai
    client's request building and response parsing; and the part of it spent inside the door's
    handler."""
    status, headers, reply, t0 = post(_body(name, prompt, options))  # the reply parsed inside the timing
    wall = (time.perf_counter() - t0) * 1e3
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {reply}")
    return wall - _model_ms_of(headers, reply), _handler_ms(headers)


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
    with ExitStack() as stack:
        direct = stack.enter_context(pyshim.Model(model, **CONFIG))
        url = stack.enter_context(door_server(model, CONFIG["n_ctx"]))
        peer_url = stack.enter_context(llama_server(model))
        client = stack.enter_context(openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0))
        bare = stack.enter_context(httpx.Client(timeout=600))
        door_posts, door_first = _bare_clients(bare, url, stack)
        peer = peer_posts = peer_first = None
        if peer_url:
            peer = stack.enter_context(openai.OpenAI(base_url=f"{peer_url}/v1", api_key="none", max_retries=0))
            peer_posts, peer_first = _bare_clients(bare, peer_url, stack)
        for i, prompt in enumerate(conversation(turns)):
            d_wall, d_ttft, d_out = _direct(direct, prompt, options)
            h_wall, h_ttft, h_out = _door(client, model, prompt, options)
            row = (
                {"turn": i + 1, "direct_wall": d_wall * 1e3, "door_wall": h_wall * 1e3}
                | {"direct_ttft": d_ttft * 1e3, "door_ttft": h_ttft * 1e3}
                | {"direct_outside": d_out, "door_outside": h_out}
            )
            for kind, post in door_posts.items():
                row[f"door_{kind}_outside"], row[f"door_{kind}_handler"] = _raw(post, model, prompt, options)
            row["door_min_ttft"] = door_first(_body(model, prompt, options))
            if peer is not None and peer_posts is not None and peer_first is not None:
                s_wall, s_ttft, s_out = _door(peer, model, prompt, options)
                row |= {"server_wall": s_wall * 1e3, "server_ttft": s_ttft * 1e3, "server_outside": s_out}
                for kind, post in peer_posts.items():
                    row[f"server_{kind}_outside"] = _raw(post, model, prompt, options)[0]
                row["server_min_ttft"] = peer_first(_body(model, prompt, options))
            rows.append(row)
    return rows


def summary(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for what in ("wall", "ttft", "outside"):
        direct = [r[f"direct_{what}"] for r in rows]
        door = [r[f"door_{what}"] for r in rows]
        med, q1, q3 = quartiles([b - a for a, b in zip(direct, door, strict=True)])
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
    for what in ("wall", "ttft"):  # like for like: the two servers, by the wall, paired per turn
        if all(f"server_{what}" in r for r in rows):
            med, q1, q3 = quartiles([r[f"door_{what}"] - r[f"server_{what}"] for r in rows])
            out[what] |= {"vs_server_ms": med, "vs_server_q1": q1, "vs_server_q3": q3}
    med, q1, q3 = quartiles([r["door_min_ttft"] - r["direct_ttft"] for r in rows])
    out["min_ttft"] = {"door_ms": statistics.median(r["door_min_ttft"] for r in rows), "overhead_ms": med}
    out["min_ttft"] |= {"overhead_q1": q1, "overhead_q3": q3}
    if all("server_min_ttft" in r for r in rows):
        out["min_ttft"]["server_ms"] = statistics.median(r["server_min_ttft"] for r in rows)
    for kind in CLIENTS:
        med, q1, q3 = quartiles([r[f"door_{kind}_outside"] - r["direct_outside"] for r in rows])
        out[kind] = {"door_ms": statistics.median(r[f"door_{kind}_outside"] for r in rows), "overhead_ms": med}
        out[kind] |= {"overhead_q1": q1, "overhead_q3": q3}
        if all(r.get(f"door_{kind}_handler") is not None for r in rows):
            out[kind]["handler_ms"] = statistics.median(r[f"door_{kind}_handler"] for r in rows)
        if all(f"server_{kind}_outside" in r for r in rows):
            out[kind]["server_ms"] = statistics.median(r[f"server_{kind}_outside"] for r in rows)
    return out


def markdown(model: str, turns: int, max_tokens: int, s: dict[str, dict[str, float]]) -> str:
    lines = [
        "# The HTTP door beside llama-server's, by the wall",
        "",
        f"`python -m bench.door --model {model} --turns {turns} --max-tokens {max_tokens}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs: the {turns}-turn agent session of `bench.agent_session`, "
        f"{max_tokens} tokens per turn, through `pyshim serve` and through llama-server's own HTTP (same pinned "
        "tree, `make peers`), both with the openai client, and in-process (`Model`) for reference, turn by turn "
        "on the same prompts. The yardstick is the wall a caller waits for; the two servers are compared turn by "
        "turn (the difference per turn, its median and interquartile range).",
        "",
        "| per call | door (median) | llama-server HTTP (median) | door − llama-server: median [IQR] "
        "| in-process (median) |",
        "|---|---|---|---|---|",
    ]
    for what, label in (("wall", "wall, plain call"), ("ttft", "time to first token, streamed")):
        r = s[what]
        versus = (
            f"{r['vs_server_ms']:+.2f} ms [{r['vs_server_q1']:+.2f}, {r['vs_server_q3']:+.2f}]"
            if "vs_server_ms" in r
            else "not built"
        )
        lines.append(f"| {label} | {r['door_ms']:.1f} ms | {_peer(r)} | {versus} | {r['direct_ms']:.1f} ms |")
    w = s["wall"]
    lines += [
        "",
        f"The door against in-process, by the wall: {w['overhead_ms']:+.2f} ms per call "
        f"[{w['overhead_q1']:+.2f}, {w['overhead_q3']:+.2f}] ({w['ratio']:.3f}×), the openai client's own work "
        "included.",
    ]
    return "\n".join(lines + raw_table(s)) + "\n"


def raw_table(s: dict[str, dict[str, float]]) -> list[str]:
    """The outside time of a plain call by client: what the server costs, and what each client adds."""
    o, lean, t = s["outside"], s["min"], s["min_ttft"]
    lines = [
        "",
        "Where the time around the engine goes, plain call (median ms per call of the wall minus the model time "
        "each server reports: a server's own split, for reading each one's parts, compared like for like only "
        "between two rows of the same client). The same turns are sent once more by two "
        "bare HTTP clients, so the openai client's request building and response parsing drop out: httpx, the "
        "client the openai package is built on, and the standard library's `http.client`, the least work a client "
        "can do, whose row is the server's own cost and loopback TCP. Every client's connection is ready before "
        "the clock starts (both servers close one that idles 5 s, as they do between a turn's calls):",
        "",
        "| client | in-process | door | door − in-process: median [IQR] | llama-server HTTP |",
        "|---|---|---|---|---|",
    ]
    for kind, label in CLIENTS.items():
        r = s[kind]
        lines.append(
            f"| {label} | {o['direct_ms']:.1f} ms | {r['door_ms']:.1f} ms | {r['overhead_ms']:+.2f} ms "
            f"[{r['overhead_q1']:+.2f}, {r['overhead_q3']:+.2f}] | {_peer(r)} |"
        )
    lines += [
        f"| openai client | {o['direct_ms']:.1f} ms | {o['door_ms']:.1f} ms | {o['overhead_ms']:+.2f} ms "
        f"[{o['overhead_q1']:+.2f}, {o['overhead_q3']:+.2f}] | {_peer(o)} |",
        "",
        f"Each client's own work, the same against any server: httpx about {s['raw']['door_ms'] - lean['door_ms']:.1f} "
        f"ms more than `http.client`, the openai client about {o['door_ms'] - s['raw']['door_ms']:.1f} ms more "
        "than httpx.",
        "",
        f"Time to first token, streamed, sent by `http.client` (the server's own cost): {t['door_ms']:.1f} ms "
        f"through the door against {s['ttft']['direct_ms']:.1f} ms in-process, {t['overhead_ms']:+.2f} ms per call "
        f"[{t['overhead_q1']:+.2f}, {t['overhead_q3']:+.2f}]; llama-server HTTP {_peer(t)}.",
    ]
    if "handler_ms" in lean:
        lines += [
            "",
            f"Of the door's {lean['door_ms']:.1f} ms (`http.client` row), {lean['handler_ms']:.1f} ms is spent inside "
            "its request handler outside the library (the `door` entry of its `Server-Timing` header: reading and "
            "parsing the body, the hop to the model's worker thread and back, the library call's own outside time "
            f"that in-process calls pay too, building the response); the other "
            f"{lean['door_ms'] - lean['handler_ms']:.1f} ms is HTTP: uvicorn reading and writing, loopback TCP, the "
            "client sending the request and reading the reply.",
        ]
    return lines


def _peer(r: dict[str, float]) -> str:
    return f"{r['server_ms']:.1f} ms" if "server_ms" in r else "not built"


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
        args.out.write_text(stamp(args_command("bench.door")) + text)


if __name__ == "__main__":
    main()
