"""``POST /v1/embeddings`` and ``GET /metrics`` on a real ``python -m pyshim serve`` process.

Embeddings are driven by the real ``openai`` client (which asks for base64 by default and
decodes it with numpy) and checked against ``Model.embed`` in this process: the door must hand
over exactly the library's vectors. Metrics are read as Prometheus text with
``prometheus_client``'s own parser, before and after known traffic, so each counter must move
by what was sent."""

from __future__ import annotations

import time
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from conftest import SMOL, model_path
from prometheus_client.parser import text_string_to_metric_families

import pyshim

KEY = "door-key"
TEXTS = ["The cat sat on the mat.", "A kitten rested on the rug.", "Stock markets fell sharply today."]


@pytest.fixture(scope="module")
def url(start_server: Any) -> str:
    return str(start_server(SMOL, "--n-ctx", "2048", "--temperature", "0", "--api-key", KEY, "--n-seq", "2"))


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120)


def scrape(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {KEY}"}, timeout=30).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_embeddings_are_the_librarys_vectors_in_both_encodings(url: str) -> None:
    c = client(url)
    got = c.embeddings.create(model=SMOL, input=TEXTS)  # base64 on the wire (the client's default)
    assert [d.index for d in got.data] == [0, 1, 2] and got.model == SMOL
    vectors = np.array([d.embedding for d in got.data], dtype=np.float32)
    with pyshim.Model(model_path(SMOL)) as m:
        here = m.embed(TEXTS)
        n_tokens = m.embeddings(TEXTS)["n_tokens"]
    assert np.array_equal(vectors, here)
    assert got.usage.prompt_tokens == got.usage.total_tokens == n_tokens
    floats = c.embeddings.create(model=SMOL, input=TEXTS[0], encoding_format="float")
    assert np.array_equal(np.array(floats.data[0].embedding, dtype=np.float32), here[0])
    tokens = c.embeddings.create(model=SMOL, input=[[1, 2, 3], [4, 5]])
    assert len(tokens.data) == 2


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": SMOL}, 400, "input"),
        ({"model": SMOL, "input": ""}, 400, None),
        ({"model": SMOL, "input": []}, 400, None),
        ({"model": SMOL, "input": [10**12]}, 400, None),
        ({"model": SMOL, "input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
        ({"model": SMOL, "input": "x", "dimensions": 3}, 400, "dimensions"),
        ({"model": "gpt-4", "input": "x"}, 404, "model"),
        ({"input": "x", "model": 7}, 400, "model"),  # no model is the served one
        ([1, 2], 400, None),
    ],
    ids=repr,
)
def test_hostile_embedding_bodies_get_openai_errors(url: str, body: Any, status: int, param: str | None) -> None:
    r = httpx.post(f"{url}/v1/embeddings", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["param"] == param
    assert client(url).embeddings.create(model=SMOL, input="still fine").data


def test_embeddings_need_the_key_and_overflow_is_a_clear_error(url: str) -> None:
    r = httpx.post(f"{url}/v1/embeddings", json={"model": SMOL, "input": "x"}, timeout=30)
    assert r.status_code == 401
    with pytest.raises(openai.BadRequestError, match="embd_ctx"):
        client(url).embeddings.create(model=SMOL, input="word " * 2000)


def test_metrics_count_what_was_sent(url: str) -> None:
    assert httpx.get(f"{url}/metrics", timeout=30).status_code == 401  # behind the key
    before = scrape(url)
    c = client(url)
    first = c.chat.completions.create(
        model=SMOL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, temperature=0
    )
    again = c.chat.completions.create(
        model=SMOL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, temperature=0
    )
    streamed = c.chat.completions.create(
        model=SMOL, messages=[{"role": "user", "content": "Count to 5."}], max_tokens=8, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    usage = [chunk.usage for chunk in streamed if chunk.usage is not None][-1]
    c.embeddings.create(model=SMOL, input=TEXTS)
    httpx.post(f"{url}/v1/chat/completions", content=b"{", headers={"authorization": f"Bearer {KEY}"}, timeout=30)
    after = scrape(url)

    def moved(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    chat = "route=/v1/chat/completions"
    assert moved(f"pyshim_requests_total{{{chat},status=200}}") == 3
    assert moved(f"pyshim_requests_total{{{chat},status=400}}") == 1
    assert moved("pyshim_requests_total{route=/v1/embeddings,status=200}") == 1
    assert moved(f"pyshim_request_duration_seconds_count{{{chat}}}") == 4
    reasons = ("stop", "length", "tool_calls", "cancelled")
    assert sum(moved(f"pyshim_generations_total{{finish_reason={r}}}") for r in reasons) == 3
    decoded = first.usage.completion_tokens + again.usage.completion_tokens + usage.completion_tokens
    assert moved("pyshim_completion_tokens_total") == decoded
    prompt = first.usage.prompt_tokens + again.usage.prompt_tokens
    assert moved("pyshim_prompt_tokens_total") > prompt
    assert moved("pyshim_prompt_tokens_reused_total") >= first.usage.prompt_tokens - 1  # the repeat reused it
    assert moved("pyshim_time_to_first_token_seconds_count") == 3
    assert moved("pyshim_time_per_output_token_seconds_count") == 3
    assert moved("pyshim_embedding_inputs_total") == 3
    assert after["pyshim_slots"] == 2 and after["pyshim_requests_running"] == 0
    assert after["pyshim_requests_waiting"] == 0


def test_a_stream_its_client_left_is_counted(url: str) -> None:
    """Issue 58: a call ended by its client's disconnect was not in /metrics (cancelled stayed 0)
    and its tokens were not counted."""
    before = scrape(url)
    body = {"model": SMOL, "messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 400,
            "stream": True, "ignore_eos": True}  # fmt: skip
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"},
                      timeout=60) as r:  # fmt: skip
        for i, _ in enumerate(r.iter_lines()):
            if i >= 6:
                break  # leave after a few tokens
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = scrape(url)
        if after.get("pyshim_generations_total{finish_reason=cancelled}", 0) > before.get(
            "pyshim_generations_total{finish_reason=cancelled}", 0
        ):
            break
        time.sleep(0.2)
    moved = after.get("pyshim_generations_total{finish_reason=cancelled}", 0) - before.get(
        "pyshim_generations_total{finish_reason=cancelled}", 0
    )
    assert moved == 1
    assert after["pyshim_completion_tokens_total"] - before["pyshim_completion_tokens_total"] >= 2


def test_a_whole_answer_its_client_left_is_counted(url: str) -> None:
    """The same for a call answered whole: the client gives up waiting (a read timeout), the door
    stops the call, and /metrics counts it as cancelled with the tokens it wrote."""
    before = scrape(url)
    body = {"model": SMOL, "messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 2000,
            "ignore_eos": True}  # fmt: skip
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=1.5)
    key = "pyshim_generations_total{finish_reason=cancelled}"
    deadline = time.monotonic() + 30
    while (after := scrape(url)).get(key, 0) <= before.get(key, 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert after.get(key, 0) - before.get(key, 0) == 1
    assert after["pyshim_completion_tokens_total"] - before["pyshim_completion_tokens_total"] >= 2
