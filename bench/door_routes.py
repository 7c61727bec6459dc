"""Each door route's own cost per call, against the chat door's, by wall time on one server.

The same turn of ``bench.agent_session``'s conversation is sent to one ``pyshim serve`` process
through ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages``, each in its own API's
shape, by the standard library's ``http.client`` (the least a client does, so what differs is the
server), in a rotating order, three times per turn. The three render the same prompt, so after
the first the cache holds it: every call evaluates the same last prompt token and decodes the same
greedy tokens (prompt and output tokens are checked equal per turn). The engine's work is the same,
so the difference of the walls is the route's own cost: no system's self-reported model time enters.
``/v1/embeddings`` is set against ``Model.embeddings`` in this process on the same input, wall to wall.

    python -m bench.door_routes [--model smollm2-135m-instruct] [--turns 12] [--out docs/bench-door-routes.md]
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
from collections.abc import Callable
from typing import Any

import pyshim
from bench.common.fixtures import TOOLS, conversation
from bench.common.provenance import publish
from bench.common.stats import quartiles
from bench.common.systems import door_server

MAX_TOKENS = 4  # few: decode time varies by more than the routes differ
REPEATS = 5
ROUTES = ("chat", "responses", "messages")
EMBED_INPUT = ["The cat sat on the mat.", "A kitten rested on the rug.", "Stock markets fell sharply today."]


def chat_body(name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": name, "messages": messages, "tools": TOOLS, "max_tokens": MAX_TOKENS, "temperature": 0}


def responses_body(name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The conversation as Responses input items: instructions, messages, function calls and outputs."""
    items: list[dict[str, Any]] = []
    for m in messages[1:]:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m.get("tool_calls"):
            for c in m["tool_calls"]:
                f = c["function"]
                call = {"type": "function_call", "call_id": c["id"], "name": f["name"], "arguments": f["arguments"]}
                items.append(call)
        else:
            items.append({"role": m["role"], "content": m["content"]})
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    return {"model": name, "instructions": messages[0]["content"], "input": items, "tools": tools,
            "max_output_tokens": MAX_TOKENS, "temperature": 0, "store": False}  # fmt: skip


def messages_body(name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The conversation in Anthropic's shape: tool_use blocks, tool results in user turns."""
    out: list[dict[str, Any]] = []
    for m in messages[1:]:
        if m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            out.append({"role": "user", "content": [block]})
        elif m.get("tool_calls"):
            uses = [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                     "input": json.loads(c["function"]["arguments"])} for c in m["tool_calls"]]  # fmt: skip
            out.append({"role": "assistant", "content": uses})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]  # fmt: skip
    return {"model": name, "system": messages[0]["content"], "messages": out, "tools": tools,
            "max_tokens": MAX_TOKENS, "temperature": 0}  # fmt: skip


PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
BODIES: dict[str, Callable[[str, list[dict[str, Any]]], dict[str, Any]]] = {
    "chat": chat_body,
    "responses": responses_body,
    "messages": messages_body,
}


def tokens(route: str, reply: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, output tokens) as each API reports them."""
    u = reply["usage"]
    if route == "chat":
        return u["prompt_tokens"], u["completion_tokens"]
    if route == "messages":  # Anthropic counts the cached part apart
        cached = (u.get("cache_read_input_tokens") or 0) + (u.get("cache_creation_input_tokens") or 0)
        return u["input_tokens"] + cached, u["output_tokens"]
    return u["input_tokens"], u["output_tokens"]


def _handler_ms(timing: str) -> float:
    for metric in timing.split(","):
        name, _, dur = metric.strip().partition(";dur=")
        if name == "door" and dur:
            return float(dur)
    return float("nan")


class Client:
    """``http.client`` on a connection opened anew before each call's clock starts (the servers
    close one that idles), so every route pays the same connection cost: none."""

    def __init__(self, url: str) -> None:
        where = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=600)

    def post(self, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any], float]:
        """Wall (ms), the reply, and the handler's own time from its Server-Timing header."""
        self.conn.close()
        self.conn.connect()
        time.sleep(0.01)
        data = json.dumps(body)
        t0 = time.perf_counter()
        self.conn.request("POST", path, data, {"Content-Type": "application/json", "x-api-key": "none"})
        r = self.conn.getresponse()
        reply = json.loads(r.read())
        wall = (time.perf_counter() - t0) * 1e3
        if r.status != 200:
            raise RuntimeError(f"{path}: HTTP {r.status}: {reply}")
        return wall, reply, _handler_ms(r.getheader("server-timing") or "")


def run(model: str, turns: int) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
    rows, embeds = [], []
    with door_server(model) as url, pyshim.Model(model, n_ctx=8192, temperature=0) as here:
        client = Client(url)
        for i, messages in enumerate(conversation(turns)):
            row: dict[str, Any] = {"turn": i + 1}
            walls: dict[str, list[float]] = {r: [] for r in ROUTES}
            handler: dict[str, list[float]] = {r: [] for r in ROUTES}
            seen: dict[str, set[tuple[int, int]]] = {r: set() for r in ROUTES}
            client.post(PATHS["chat"], chat_body(model, messages))  # the turn's prompt into the cache
            for k in range(REPEATS):
                for j in range(len(ROUTES)):
                    route = ROUTES[(i + j + k) % len(ROUTES)]
                    wall, reply, own = client.post(PATHS[route], BODIES[route](model, messages))
                    walls[route].append(wall)
                    handler[route].append(own)
                    seen[route].add(tokens(route, reply))
            for route in ROUTES:
                row[route] = statistics.median(walls[route])
                row[f"{route}_handler"] = statistics.median(handler[route])
                row[f"{route}_tokens"] = sorted(seen[route])
            rows.append(row)
            t0 = time.perf_counter()
            here.embeddings(EMBED_INPUT)
            direct = (time.perf_counter() - t0) * 1e3
            wall, _, _ = client.post("/v1/embeddings", {"model": model, "input": EMBED_INPUT})
            embeds.append({"direct": direct, "door": wall})
    return rows, embeds


def _iqr(xs: list[float]) -> str:
    med, q1, q3 = quartiles(xs)
    return f"{med:+.2f} ms [{q1:+.2f}, {q3:+.2f}]"


def markdown(model: str, turns: int, rows: list[dict[str, Any]], embeds: list[dict[str, float]]) -> str:
    same = all(len({tuple(map(tuple, r[f"{x}_tokens"])) for x in ROUTES}) == 1 for r in rows)
    lines = [
        "# Each door route's own cost per call",
        "",
        f"`python -m bench.door_routes --model {model} --turns {turns}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs: each turn of `bench.agent_session`'s conversation sent to one `pyshim serve` in "
        f"each API's shape by `http.client`, {REPEATS} times per route in rotating order, {MAX_TOKENS} tokens, "
        "greedy. The three routes render the same prompt and decode the same tokens "
        f"({'checked: equal prompt and output tokens on every turn' if same else 'NOT equal on every turn'}), "
        "so the wall difference is the route's own cost. Wall per call, median over turns of each turn's median:",
        "",
        "| route | wall per call | route − chat door: median [IQR] over turns | ratio to chat "
        "| handler's own time (`Server-Timing: door`) |",
        "|---|---|---|---|---|",
    ]
    chat = [r["chat"] for r in rows]
    for route in ROUTES:
        walls = [r[route] for r in rows]
        diff = _iqr([w - c for w, c in zip(walls, chat, strict=True)]) if route != "chat" else "—"
        ratio = statistics.median(walls) / statistics.median(chat)
        own = statistics.median(r[f"{route}_handler"] for r in rows)
        lines.append(f"| `{PATHS[route]}` | {statistics.median(walls):.1f} ms | {diff} | {ratio:.3f} | {own:.2f} ms |")
    lines += [
        "",
        "The handler's own time is the door's time inside its request handler outside the library (reading the "
        "body, translating request and response, the hop to the model's thread), by the door's one clock for "
        "every route: the part of the wall that differs between routes, without the decode's noise.",
    ]
    direct = [e["direct"] for e in embeds]
    door = [e["door"] for e in embeds]
    lines += [
        "",
        f"`/v1/embeddings` ({len(EMBED_INPUT)} short inputs, float): {statistics.median(door):.1f} ms per call "
        f"against {statistics.median(direct):.1f} ms for `Model.embeddings` in process, door − in-process "
        f"{_iqr([b - a for a, b in zip(direct, door, strict=True)])} (median [IQR] over {len(embeds)} calls).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--turns", type=int, default=12)
    p.add_argument("--out")
    args = p.parse_args()
    rows, embeds = run(args.model, args.turns)
    text = markdown(args.model, args.turns, rows, embeds)
    publish(text, args.out, "bench.door_routes")


if __name__ == "__main__":
    main()
