"""The door's Prometheus metrics (``GET /metrics``): what an operator scrapes.

One registry per app (``prometheus_client.CollectorRegistry``), never the process-global one, so
two doors in one process (tests, an app mounting two models) count apart. Three sources:
- the ASGI middleware counts every HTTP request by route template and status, with its wall time
  to the last byte (a stream's included);
- each generation's library result adds its prompt tokens (evaluated and reused), completion
  tokens and finish reason, its time to the first token and its time per output token;
- the gate is read at scrape time: calls running, calls waiting, and the slots they use.

Invariant: a label's values are bounded (route templates, not paths; statuses; the library's few
finish reasons), so no client can grow the registry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE", "Metrics", "MetricsMiddleware", "route_of"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Seconds: from a token's few milliseconds on 2 cores up to a long prompt's minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
ROUTES = (
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/embeddings",
    "/v1/models",
    "/health",
    "/metrics",
)
FINISH_REASONS = ("stop", "length", "tool_calls", "cancelled")


def route_of(path: str) -> str:
    """The route template a path belongs to ("other" for none: a 404's path is not a label)."""
    if path in ROUTES:
        return path
    for prefix, template in (("/v1/responses/", "/v1/responses/{id}"), ("/v1/models/", "/v1/models/{model}")):
        if path.startswith(prefix):
            return template
    return "other"


class Metrics:
    """The door's metrics; ``gauges`` returns (running, waiting, slots) when scraped."""

    def __init__(self, gauges: Callable[[], tuple[int, int, int]]) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("pyshim_requests", "HTTP requests answered", ["route", "status"], registry=r)
        self.duration = Histogram(
            "pyshim_request_duration_seconds", "Wall time of a request, to its last byte", ["route"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.generations = Counter("pyshim_generations", "Generations, by finish reason", ["finish_reason"], registry=r)
        self.prompt_tokens = Counter("pyshim_prompt_tokens", "Prompt tokens of generations", registry=r)
        self.reused_tokens = Counter(
            "pyshim_prompt_tokens_reused", "Prompt tokens taken from the cache, not evaluated", registry=r
        )
        self.completion_tokens = Counter("pyshim_completion_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram(
            "pyshim_time_to_first_token_seconds",
            "From a request's arrival to its first generated token (waiting for a slot included)",
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.tpot = Histogram(
            "pyshim_time_per_output_token_seconds", "Decode time per generated token after the first, per request",
            buckets=TOKEN_BUCKETS, registry=r,
        )  # fmt: skip
        self.embedding_inputs = Counter("pyshim_embedding_inputs", "Inputs embedded", registry=r)
        self.embedding_tokens = Counter("pyshim_embedding_tokens", "Tokens of inputs embedded", registry=r)
        self._gauges = gauges
        running = Gauge("pyshim_requests_running", "Generations on the model now", registry=r)
        running.set_function(lambda: self._gauges()[0])
        waiting = Gauge("pyshim_requests_waiting", "Generations waiting for a slot", registry=r)
        waiting.set_function(lambda: self._gauges()[1])
        slots = Gauge("pyshim_slots", "Slots (calls that can run at once, n_seq)", registry=r)
        slots.set_function(lambda: self._gauges()[2])
        for reason in FINISH_REASONS:
            self.generations.labels(reason)  # present from the first scrape, at 0

    def generation(self, result: Mapping[str, Any], started: float, first_token_at: float | None = None) -> None:
        """Count one finished generation. ``started`` is the request's arrival and
        ``first_token_at`` its first streamed token (``time.perf_counter``); for a response
        given whole, the first token came when the wall time less the later tokens' decode."""
        n_decoded = int(result.get("n_decoded") or 0)
        ms_decode = float(result.get("ms_decode") or 0.0)
        reason = str(result.get("finish_reason") or "stop")
        self.generations.labels(reason if reason in FINISH_REASONS else "stop").inc()
        self.prompt_tokens.inc(int(result.get("n_prompt") or 0))
        self.reused_tokens.inc(int(result.get("n_reused") or 0))
        self.completion_tokens.inc(n_decoded)
        if n_decoded == 0:
            return
        per_token = ms_decode / 1e3 / n_decoded
        if first_token_at is None:
            first_token_at = time.perf_counter() - per_token * (n_decoded - 1)
        self.ttft.observe(max(0.0, first_token_at - started))
        if n_decoded > 1:
            self.tpot.observe(per_token)

    def embeddings(self, result: Mapping[str, Any]) -> None:
        self.embedding_inputs.inc(len(result.get("data") or ()))
        self.embedding_tokens.inc(int(result.get("n_tokens") or 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts each HTTP request by route template and status, timed to its last byte."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = route_of(scope.get("path", ""))
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.duration.labels(route).observe(time.perf_counter() - started)
