"""Local-only against a model split over one and two rpc-servers on loopback.

    python -m bench.rpc [--model M] [--reps 5] [--prompt-words 300] [--decode 64] [--out docs/bench-rpc.md]

Each configuration opens the same model in this process with the same threads: all layers
local; all layers on one server; all layers split over two servers (by free memory, about
half each). The servers are llama.cpp's rpc-server from ``make rpc-server``, on 127.0.0.1,
each with as many threads as the local engine. Per repetition: a prefill call (the whole
prompt evaluated afresh, one token generated) and a decode call (the same prompt, reused
from the cache, then ``--decode`` tokens with ignore_eos). Rates come from the library's
own timings (ms_prefill, ms_decode). Bytes on the wire are read from the kernel's TCP
counters of the servers' sockets (``ss -ti``): llama.cpp reports none itself.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pyshim
from bench.common.provenance import args_command, stamp
from bench.common.rpc_servers import RpcServer
from bench.common.stats import median_spread
from bench.common.systems import THREADS
from pyshim import models

FILLER = "The keeper logs every ship that enters the bay, its cargo and the hour it arrived. "


def wire(servers: list[RpcServer]) -> tuple[int, int, int]:
    """Bytes clients sent to these servers, bytes they sent back, and client data segments."""
    sent = back = segs = 0
    for s in servers:
        out = subprocess.run(
            ["ss", "-tinH", "state", "established", f"( sport = :{s.port} )"], capture_output=True, text=True
        ).stdout
        sent += sum(int(x) for x in re.findall(r"bytes_received:(\d+)", out))
        back += sum(int(x) for x in re.findall(r"bytes_acked:(\d+)", out))
        segs += sum(int(x) for x in re.findall(r"data_segs_in:(\d+)", out))
    return sent, back, segs


def run(path: Path, servers: list[RpcServer], reps: int, words: int, n_decode: int) -> dict[str, Any]:
    config: dict[str, Any] = {"n_ctx": 4096, "n_threads": THREADS, "temperature": 0}
    if servers:
        config["rpc"] = [s.endpoint for s in servers]
    messages = [{"role": "user", "content": FILLER * (words // 15) + "Summarise the log."}]
    rows: dict[str, list[float]] = {k: [] for k in ("prefill", "decode", "b_prefill", "b_decode", "segs")}
    with pyshim.Model(path, **config) as m:
        m.generate(messages, max_tokens=2)  # warm-up: graphs, buffers, pages
        for _ in range(reps):
            w0 = wire(servers)
            r = m.generate(messages, max_tokens=1, cache_prompt=False)
            w1 = wire(servers)
            d = m.generate(messages, max_tokens=n_decode, ignore_eos=True)
            w2 = wire(servers)
            rows["prefill"].append(r["n_prompt"] / r["ms_prefill"] * 1000)
            rows["decode"].append(d["n_decoded"] / d["ms_decode"] * 1000)
            rows["b_prefill"].append((w1[0] - w0[0] + w1[1] - w0[1]) / r["n_prompt"])
            rows["b_decode"].append((w2[0] - w1[0] + w2[1] - w1[1]) / d["n_decoded"])
            rows["segs"].append((w2[2] - w1[2]) / d["n_decoded"])
        rows["n_prompt"] = [r["n_prompt"]]
    return rows


def kib(xs: list[float]) -> str:
    return f"{statistics.median(xs) / 1024:.1f}"


def markdown(model: str, results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    base = results["local only"]
    lines = [
        "# Split over rpc-servers on loopback\n",
        f"Produced by `python -m bench.rpc --out {args.out}` (`make bench-rpc`) on {platform.machine()}, "
        f"{os.cpu_count()} cores, {pyshim.version()}: {model}, a {int(base['n_prompt'][0])}-token prompt, "
        f"{args.decode} decoded tokens, {THREADS} threads locally and on each server, median (min–max) "
        f"of {args.reps} repetitions, all in one run (load average {args.load}). Ratios are of medians against "
        "local-only. "
        "Bytes are both directions, from the kernel's TCP counters of the servers' sockets; "
        "'segments' counts the client's data segments per decoded token, about one per message.\n",
        "| configuration | prefill tok/s | × local | decode tok/s | × local "
        "| KiB/token prefill | KiB/token decode | segments/token decode |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        pre = statistics.median(r["prefill"]) / statistics.median(base["prefill"])
        dec = statistics.median(r["decode"]) / statistics.median(base["decode"])
        wire_cols = (
            f"{kib(r['b_prefill'])} | {kib(r['b_decode'])} | {statistics.median(r['segs']):.0f}"
            if name != "local only"
            else "– | – | –"
        )
        lines.append(
            f"| {name} | {median_spread(r['prefill'], 1)} | {pre:.2f} | {median_spread(r['decode'], 1)} | {dec:.2f} "
            f"| {wire_cols} |"
        )
    lines.append(NETWORK_NOTE)
    return "\n".join(lines) + "\n"


NETWORK_NOTE = """
## What to expect over a real network

On loopback a round trip costs microseconds, so these figures show the protocol's own cost,
not the network's. The wire columns carry over to a real network unchanged: with every layer
remote (the default with `rpc`, `n_gpu_layers=-1`) each decoded token sends about 25 messages
per server (the client's data segments above) and brings back the logits, vocabulary × 4
bytes (~600 KiB for qwen's 151,936 tokens). Over a network, decode then pays per token about
2 × (messages per server ÷ pipelining) round trips of latency plus those bytes at the link's
bandwidth: on 1 Gbit/s the logits alone take ~5 ms per token, and on a 1 ms link the round
trips add tens of ms, so decode is bound by the network, not the servers; over Wi-Fi or a WAN
(5–50 ms) it is slower still. Setting `n_gpu_layers` to the model's layer count instead keeps
the output layer on the local CPU, so only the last hidden state (a few KiB) comes back per
token. Prefill pays the same per *batch* rather than per token (8–16 KiB per prompt token
here), so it suffers far less. The weights cross the network once, at open (0.5 GB takes ~5 s
at 1 Gbit/s; `rpc-server -c` caches them on the server's disk). Splitting pays when the model
does not fit one machine, or when the remote device is much faster than the local one (a GPU
box serving a laptop); it does not make a model that fits locally faster.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt-words", type=int, default=300)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    path = models.path(args.model)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as logs:
        servers = [RpcServer(Path(logs), name, threads=THREADS, debug=False) for name in ("a", "b")]
        for s in servers:
            s.start()
        try:
            results = {}
            for name, used in (("local only", []), ("one server", servers[:1]), ("two servers", servers)):
                results[name] = run(path, used, args.reps, args.prompt_words, args.decode)
                shown = {k: median_spread(v, 1) for k, v in results[name].items() if k in ("prefill", "decode")}
                print(name, shown, flush=True)
        finally:
            for s in servers:
                s.stop()
    args.load = f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    text = markdown(args.model, results, args)
    print(text)
    if args.out:
        args.out.write_text(stamp(args_command("bench.rpc")) + text)


if __name__ == "__main__":
    main()
