"""The door's bounds on connections and clients (issue 54, item 9; pyshim/door_limits.py), on a
real server: a connection that sends nothing, or half a request, is closed after
--request-timeout; connections past --max-connections are closed at once, and /health still
answers meanwhile; a client past --max-per-client gets 429 in the API's shape while another
key's request goes through. Before the change 200 idle or half-sent connections stayed open
after 90 s, and one keyless client could hold every file descriptor."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest
from conftest import SMOL

KEYS = ("key-a", "key-b")


@pytest.fixture(scope="module")
def url(start_server: Any) -> str:
    return str(
        start_server(
            SMOL, "--n-ctx", "1024", "--n-seq", "2", "--temperature", "0", "--api-key", KEYS[0], "--api-key", KEYS[1],
            "--request-timeout", "2", "--max-connections", "40", "--max-per-client", "1",
        )
    )  # fmt: skip


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def outcome(s: socket.socket, within: float) -> str:
    """What the server did with the connection within the time: "closed", "answered" (an HTTP
    response came, such as a 429), or nothing yet ("open")."""
    s.settimeout(within)
    try:
        return "closed" if s.recv(1024) == b"" else "answered"
    except TimeoutError:
        return "open"
    except ConnectionResetError:
        return "closed"


def test_silent_and_half_sent_connections_are_closed_and_the_cap_holds(url: str) -> None:
    silent = [connect(url) for _ in range(30)]
    half = [connect(url) for _ in range(5)]
    for s in half:
        s.sendall(  # a tenant's request whose body never ends: the app is waiting for it
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-a\r\n"
            b'Content-Length: 100\r\n\r\n{"mod'
        )
    time.sleep(0.3)
    over = [connect(url) for _ in range(10)]  # 45 in all: the last ones are past the cap of 40
    assert sum(outcome(s, 0.5) == "closed" for s in over) >= 5
    t0 = time.monotonic()
    silent_end = [outcome(s, 5) for s in silent]
    half_end = [outcome(s, 5) for s in half]
    assert time.monotonic() - t0 < 6
    assert silent_end == ["closed"] * len(silent), silent_end
    # the first holds key-a's one request in flight until its body times out; the others get 429
    assert half_end[0] == "closed" and "open" not in half_end, half_end
    for s in silent + half + over:
        s.close()
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200  # the door is free again


def test_a_client_past_its_bound_gets_429_and_another_key_is_served(url: str) -> None:
    a = openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS[0], max_retries=0, timeout=60)
    b = openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS[1], max_retries=0, timeout=60)
    msgs: Any = [{"role": "user", "content": "Count to fifty."}]
    started = threading.Event()
    done: list[Any] = []

    def long_stream() -> None:
        stream = a.chat.completions.create(model=SMOL, messages=msgs, max_tokens=200, stream=True,
                                           extra_body={"ignore_eos": True})  # fmt: skip
        for _ in stream:
            started.set()
        done.append(True)

    t = threading.Thread(target=long_stream)
    t.start()
    assert started.wait(60)
    with pytest.raises(openai.RateLimitError) as e:
        a.chat.completions.create(model=SMOL, messages=msgs, max_tokens=2)
    assert e.value.status_code == 429 and "in flight" in str(e.value)
    with pytest.raises(anthropic.RateLimitError):
        anthropic.Anthropic(base_url=url, api_key=KEYS[0], max_retries=0).messages.create(
            model=SMOL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
    assert b.chat.completions.create(model=SMOL, messages=msgs, max_tokens=2).choices  # the other tenant
    t.join(120)
    assert done
    assert a.chat.completions.create(model=SMOL, messages=msgs, max_tokens=2).choices  # its turn again
    for _ in range(5):  # a stream read to its end leaves the client's one place free at once
        assert list(a.chat.completions.create(model=SMOL, messages=msgs, max_tokens=3, stream=True))
        assert a.chat.completions.create(model=SMOL, messages=msgs, max_tokens=2).choices


def test_routes_without_v1_and_aliases(start_server: Any) -> None:
    """Issue 58: llama-server's and Ollama's paths (no /v1) answer, and a client configured for
    another model id reaches this one through --alias; any other id is a 404 that lists them."""
    url = start_server(SMOL, "--n-ctx", "512", "--alias", "gpt-4.1", "--alias", "test")
    ask = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert httpx.post(f"{url}/chat/completions", json={"model": "gpt-4.1", **ask}, timeout=60).status_code == 200
    assert httpx.post(f"{url}/embeddings", json={"model": "test", "input": "hi"}, timeout=60).status_code == 200
    listed = [m["id"] for m in httpx.get(f"{url}/models", timeout=10).json()["data"]]
    assert listed == [SMOL, "gpt-4.1", "test"]
    other = openai.OpenAI(base_url=url, api_key="x", max_retries=0)  # no /v1 in the base URL
    with pytest.raises(openai.NotFoundError, match=r"gpt-4\.1"):
        other.chat.completions.create(model="llama3", messages=ask["messages"], max_tokens=2)  # type: ignore[arg-type]


def test_a_response_is_out_of_flight_once_its_last_bytes_are_sent() -> None:
    """A client that has read a whole response and asks again at once is served: the bound is
    released when the last body message is handed to the server, not when the app returns
    (a streaming route still closes its generator after [DONE]; the next request raced it and
    got 429 on a loaded machine). The app here holds on after its last message, as that
    generator does, so the race is certain rather than likely."""
    import asyncio

    from pyshim.door_limits import PerClientLimit

    async def main() -> list[int]:
        tail = asyncio.Event()

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"done", "more_body": False})
            if scope["path"] == "/first":
                await tail.wait()  # the work after the response: a generator's cleanup

        limit = PerClientLimit(app, 1)
        statuses: list[int] = []

        def scope(path: str) -> dict[str, Any]:
            return {"type": "http", "path": path, "headers": [(b"authorization", b"Bearer key-a")]}

        async def call(path: str) -> None:
            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])

            await limit(scope(path), None, send)

        first = asyncio.create_task(call("/first"))
        await asyncio.sleep(0.01)  # its response is whole; its app has not returned
        await call("/second")
        tail.set()
        await first
        await call("/third")
        assert limit.running == {}  # nothing left counted
        return statuses

    assert asyncio.run(main()) == [200, 200, 200]
