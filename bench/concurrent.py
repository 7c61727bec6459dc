# bench/concurrent.py owns the "4 agent sessions at once on one handle" benchmark: its modes,
# the threads that drive them, and its report (docs/bench-concurrent.md and .json).
"""Four agent sessions at once on one handle, against the same four taken in turn and llama-server.

    python -m bench.concurrent [--models M ...] [--modes MODE ...] [--reps 3]
        [--out docs/bench-concurrent.md] [--quick]

The sessions are the agent conversations of ``bench.peers``' interleaved workload (4 desks,
6 tool-calling turns each, the ~500-token brief, up to 16 tokens written per turn, greedy).
Modes, each (repetition, model, mode) in a process of its own:

- ``pyshim-concurrent``: one ``pyshim.Model`` with n_seq 4; 4 threads, each running one
  session's turns, each naming its own ``session`` (so each keeps a slot).
- ``pyshim-serialized``: the same 4 sessions on one n_seq-4 handle, one thread taking their
  turns round-robin (turn 1 of each, then turn 2 of each, ...).
- ``llama-server-np4``: llama-server with ``-np 4`` and 4 client threads (it routes requests
  to slots itself, as it does for any OpenAI client).
- ``pyshim-alone-nseq4`` / ``pyshim-alone-nseq1``: session 1 alone, on an n_seq-4 and an
  n_seq-1 handle: what one call costs when nothing else runs.
- ``pyshim-concurrent-fa-off`` / ``pyshim-serialized-fa-off``: the first two with flash attention
  off (answers workload only).

Every mode is driven from threads other than the main one (pyshim's main-thread path hands
each call to a worker thread, for Ctrl-C), so the modes differ only in what they measure.
Repetition k of every mode runs before repetition k+1 of any, so the ratios pair
measurements taken close together; the report gives each ratio's median and min–max over
the repetitions. ``--quick`` (the smallest catalogue model, 2 turns, 4 tokens, 1
repetition; llama-server only where it is built) checks the harness only.

Before the repetitions, llama.cpp's ``llama-batched-bench`` measures each model's own prompt and
decode rates with 1, 2 and 4 sequences per batch (same cache layout: a stream per sequence). From
them the report gives the least wall any scheduling of the mode's prompt and decoded tokens could
take, serialized and at 4 at once: the most that batching the calls can give on this machine.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common.fixtures import PEER_MODELS, TOOLS, desk_conversations
from bench.common.host import machine, worker
from bench.common.markdown import opening, table_head
from bench.common.provenance import ROOT, args_command, stamp
from bench.common.stats import median_spread
from bench.common.systems import (
    PEERS,
    THREADS,
    LlamaServer,
    Messages,
    Pyshim,
    System,
    Tools,
    Turn,
    open_system,
    session,
)

MODELS = PEER_MODELS
CANONICAL = ROOT / "docs" / "bench-concurrent.md"
QUICK_MODEL = "smollm2-135m-instruct"  # the smallest catalogue model
N_SESSIONS = 4
N_CTX = 4096  # per slot (llama-server gets n_seq times this), as bench.peers' interleaved workload
MODES = [
    "pyshim-concurrent",
    "pyshim-serialized",
    "llama-server-np4",
    "pyshim-alone-nseq4",
    "pyshim-alone-nseq1",
    "pyshim-concurrent-fa-off",
    "pyshim-serialized-fa-off",
]
# The "-fa-off" pair runs with flash_attn "off" (llama.cpp's default, auto, turns it on for CPUs),
# on the answers workload only: what the attention kernel does to several sequences per step.
FA_OFF_MODES = [m for m in MODES if m.endswith("-fa-off")]
PYSHIM_MODES = [m for m in MODES if m.startswith("pyshim") and m not in FA_OFF_MODES]

# What each turn writes: an agent's next step (up to 16 tokens, as bench.peers' sessions: most of
# the time is the prompt), or a written answer (a fixed 96 tokens: most of the time is decoding,
# which is what batching calls together speeds up). (name: (tokens, quick tokens, ignore_eos)).
# Answers are asked for without tools: a fixed length past the end of a grammar-constrained tool
# call is not something a model can write.
WORKLOADS: dict[str, tuple[int, int, bool]] = {"agent": (16, 4, False), "answers": (96, 8, True)}

# Each ratio is subject / baseline, from the same repetition.
COMPARISONS = [
    ("pyshim-concurrent", "pyshim-serialized"),
    ("llama-server-np4", "pyshim-concurrent"),
    ("pyshim-alone-nseq4", "pyshim-alone-nseq1"),
    ("pyshim-concurrent-fa-off", "pyshim-serialized-fa-off"),
]
BATCHED_BENCH = PEERS / "llama-batched-bench"
RATE_SEQS = (1, 2, 4)  # sequences per batch in the engine's own rates
# Prompt tokens per sequence, then decoded tokens per sequence: a shallow context, where both rates
# are at their best (the floors), and one about as deep as the sessions' turns (their prompts hold
# 700-1400 tokens), where the decode rates are those the sessions' decode steps can have.
RATE_PP, RATE_PP_DEEP, RATE_TG = 128, 1024, 32

RATIOS = [  # (summary key, column heading)
    ("wall_s", "total wall"),
    ("decode_tps", "decoded tok/s over the wall"),
    ("step_tps", "decode tok/s in decode steps"),
    ("turn_latency_s", "median turn latency"),
    ("turn_decode_tps", "median per-turn decode tok/s"),
]


class Pinned:
    """One agent session's view of a shared system: its pyshim turns name the session (the
    ``session`` option), so its conversation keeps a slot of its own. llama-server's turns
    name none: the server routes them by prompt, as it does for any OpenAI client."""

    def __init__(self, system: System, session: str) -> None:
        self.system, self.session = system, session
        self.name, self.info = system.name, system.info

    def turn(self, messages: Messages, tools: Tools, max_tokens: int, ignore_eos: bool = False) -> Turn:
        if isinstance(self.system, Pyshim):
            return self.system.turn(messages, tools, max_tokens, ignore_eos, session=self.session)
        return self.system.turn(messages, tools, max_tokens, ignore_eos)


# A lane is the turns one thread takes in order: (session index, turn index, its prompt).
Lane = list[tuple[int, int, list[dict[str, Any]]]]


def lanes_for(mode: str, convs: list[list[list[dict[str, Any]]]]) -> list[Lane]:
    if mode.startswith("pyshim-alone"):
        return [[(0, t, p) for t, p in enumerate(convs[0])]]
    if mode.startswith("pyshim-serialized"):
        return [[(c, t, convs[c][t]) for t in range(len(convs[0])) for c in range(len(convs))]]
    return [[(c, t, p) for t, p in enumerate(conv)] for c, conv in enumerate(convs)]  # a thread per session


def drive(system: System, lanes: list[Lane], max_tokens: int, ignore_eos: bool) -> tuple[float, list[dict[str, Any]]]:
    """Every lane on a thread of its own, all released at once: (seconds from the release to
    the last turn's end, every turn's row with its session, turn and start/end times)."""
    views = {c: Pinned(system, f"desk-{c + 1}") for lane in lanes for c, _, _ in lane}
    start: list[float] = []
    gate = threading.Barrier(len(lanes), action=lambda: start.append(time.perf_counter()))

    def run(lane: Lane) -> list[dict[str, Any]]:
        gate.wait()
        rows = []
        for c, t, messages in lane:
            t0 = time.perf_counter()
            (row,) = session(views[c], [messages], max_tokens, ignore_eos, None if ignore_eos else TOOLS)
            rows.append({**row, "conversation": c, "turn": t, "start_s": t0 - start[0]})
            rows[-1]["end_s"] = time.perf_counter() - start[0]
        return rows

    with ThreadPoolExecutor(len(lanes)) as pool:
        per_lane = [f.result() for f in [pool.submit(run, lane) for lane in lanes]]
    rows = sorted((r for lane in per_lane for r in lane), key=lambda r: r["start_s"])
    return max(r["end_s"] for r in rows), rows


def summarize(wall: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A mode's figures: its wall; decoded tokens over that wall; the prompt
    tokens it evaluated; each turn's latency (as its client saw it, waiting included) and
    decode rate after the first token; calls in flight on average (turn time / wall)."""
    n_gen = sum(r["n_gen"] for r in rows)
    rates = [(r["n_gen"] - 1) / (r["total_s"] - r["ttft_s"]) for r in rows if r["n_gen"] > 1]
    evaluated = [r["n_evaluated"] for r in rows]
    return {
        "wall_s": wall,
        "n_turns": len(rows),
        "n_gen": n_gen,
        "decode_tps": n_gen / wall,
        "n_evaluated": None if None in evaluated else sum(evaluated),
        "turn_latency_s": statistics.median(r["total_s"] for r in rows),
        "turn_decode_tps": statistics.median(rates) if rates else None,
        "in_flight": sum(r["total_s"] for r in rows) / wall,
    }


def run_mode(mode: str, workload: str, model: Path, rep: int, quick: bool) -> dict[str, Any]:
    """One repetition of one mode on one workload, on a freshly opened system, in this process."""
    tokens, quick_tokens, ignore_eos = WORKLOADS[workload]
    n_seq = 1 if mode.endswith("nseq1") else N_SESSIONS
    name = "llama-server" if mode.startswith("llama-server") else "pyshim-fa-off" if mode in FA_OFF_MODES else "pyshim"
    system = open_system(name, model, N_CTX, n_seq)
    try:
        system.turn([{"role": "user", "content": "Warm up: say OK."}], None, 2)  # page the weights in
        system.clear_cache()
        convs = desk_conversations(rep + 1, N_SESSIONS, quick)
        before = engine_counts(system)
        wall, rows = drive(system, lanes_for(mode, convs), quick_tokens if quick else tokens, ignore_eos)
        steps = engine_counts(system, before)
        rss = system.peak_rss_mib() if isinstance(system, LlamaServer) else None
    finally:
        system.close()
    if rss is None:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "mode": mode,
        "workload": workload,
        "rep": rep,
        "n_seq": n_seq,
        "peak_rss_mib": rss,
        "turns": rows,
        "engine": steps,
        "step_tps": steps["decode_tokens"] / steps["ms_decode_steps"] * 1000 if steps else None,
        # the share of the wall the evaluator spent in llama_decode: what is left for any scheduler
        "busy": (steps["ms_decode_steps"] + steps["ms_prompt_batches"]) / 1000 / wall if steps else None,
        **summarize(wall, rows),
    }


def engine_counts(system: System, since: dict[str, float] | None = None) -> dict[str, float] | None:
    """pyshim's own count of what its context evaluated (el_stats "evaluation"), minus `since`:
    decode steps (one token of every running call each) and prompt batches, and the time they
    took. None for llama-server."""
    if not isinstance(system, Pyshim):
        return None
    now = system.model.stats()["evaluation"]
    return {k: v - (since or {}).get(k, 0) for k, v in now.items()}


def modes_to_run(args: argparse.Namespace) -> list[str]:
    modes = list(args.modes)
    if not BATCHED_BENCH.exists() and not args.quick:
        raise SystemExit(f"{BATCHED_BENCH} is not built: `make peers` builds it")
    if "llama-server-np4" in modes and not (PEERS / "llama-server").exists():
        if not args.quick:
            raise SystemExit(f"{PEERS / 'llama-server'} is not built: `make peers` builds it")
        modes.remove("llama-server-np4")
        print("llama-server is not built: skipping llama-server-np4", flush=True)
    return modes


def engine_rates(model: Path) -> list[dict[str, Any]]:
    """llama-batched-bench's prompt and decode tok/s with 1, 2 and 4 sequences per batch, at a
    shallow and a deep prompt, on a context laid out as the handle's (n_seq streams of N_CTX),
    flash attention on as pyshim's default: one row per (prompt length, sequence count), as the
    tool writes it (jsonl)."""
    cmd = [str(BATCHED_BENCH), "-m", str(model), "-c", str(N_CTX * N_SESSIONS), "-b", "512", "-ub", "512"]
    cmd += ["-t", str(THREADS), "-fa", "on", "-npp", f"{RATE_PP},{RATE_PP_DEEP}", "-ntg", str(RATE_TG)]
    # the first count runs twice and its first, cold, row is dropped: the tool's own warm-up is 16
    # tokens, and its first measurement ran ~8 % below the same one repeated
    cmd += ["-npl", ",".join(map(str, (RATE_SEQS[0], *RATE_SEQS))), "--output-format", "jsonl"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900).stdout
    rows = {(r["pp"], r["pl"]): r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}
    return list(rows.values())  # the last row of each (depth, count)


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement of one report, in this invocation: repetition by repetition, each
    (model, mode) in a process of its own."""
    from pyshim import models

    modes = modes_to_run(args)
    data: dict[str, Any] = {
        "command": "python -m bench.concurrent " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "when": time.strftime("%Y-%m-%d"),
        "threads": THREADS,
        "models": args.models,
        "modes": modes,
        "reps": args.reps,
        "quick": args.quick,
        "n_sessions": N_SESSIONS,
        "workloads": {w: (q if args.quick else t, e) for w, (t, q, e) in WORKLOADS.items()},
        "n_ctx": N_CTX,
        "results": [],
        "engine_rates": {},
    }
    paths = {m: models.path(m) for m in args.models}
    for m in args.models if BATCHED_BENCH.exists() else []:
        data["engine_rates"][m] = engine_rates(paths[m])
        print(f"{m}: the engine's own rates measured", flush=True)
    for rep in range(args.reps):
        for m in args.models:
            for w in WORKLOADS:
                for mode in (m for m in modes if w == "answers" or m not in FA_OFF_MODES):
                    t0 = time.monotonic()
                    spec = {"mode": mode, "workload": w, "model": str(paths[m]), "rep": rep, "quick": args.quick}
                    data["results"].append({**worker("bench.concurrent", spec), "model": m})
                    print(f"rep {rep + 1} {m} {w} {mode}: {time.monotonic() - t0:.0f} s", flush=True)
    return data


# -- report --------------------------------------------------------------------------


def find(data: dict[str, Any], model: str, workload: str, mode: str) -> list[dict[str, Any]]:
    """A (model, workload, mode)'s repetitions, in order."""
    rs = [r for r in data["results"] if (r["model"], r["workload"], r["mode"]) == (model, workload, mode)]
    return sorted(rs, key=lambda r: r["rep"])


def ratios(
    data: dict[str, Any], model: str, workload: str, subject: str, baseline: str
) -> dict[str, list[float]] | None:
    """Each figure of RATIOS as subject / baseline, one ratio per repetition both ran."""
    mine, base = find(data, model, workload, subject), find(data, model, workload, baseline)
    pairs = [(s, b) for s in mine for b in base if s["rep"] == b["rep"]]
    if not pairs:
        return None
    return {k: [s[k] / b[k] for s, b in pairs if s[k] and b[k]] for k, _ in RATIOS}


def ratio_text(values: list[float]) -> str:
    if not values:
        return "n/a"
    text = f"{statistics.median(values):.2f}×"
    if len(values) > 1:
        text += f" ({min(values):.2f}–{max(values):.2f})"
    return text + (" ·" if min(values) <= 1.0 <= max(values) else "")


def ratio_table(data: dict[str, Any]) -> list[str]:
    out = [
        f"## Ratios: subject / baseline (per-repetition ratios: median, min–max over {data['reps']})",
        "",
        "Each ratio divides the subject's figure by the baseline's from the same repetition. A wall or "
        "latency ratio below 1 and a tokens/s ratio above 1 favour the subject; · marks a ratio whose "
        "spread over the repetitions includes 1 (no difference the run can resolve).",
        "",
        *table_head(" | ".join(["model", "workload", "subject / baseline", *(h for _, h in RATIOS)]), left=3),
    ]
    for m in data["models"]:
        for w in data["workloads"]:
            for subject, baseline in COMPARISONS:
                if (rs := ratios(data, m, w, subject, baseline)) is not None:
                    cells = " | ".join(ratio_text(rs[k]) for k, _ in RATIOS)
                    out.append(f"| {m} | {w} | {subject} / {baseline} | {cells} |")
    return [*out, ""]


def column(runs: list[dict[str, Any]], key: str, scale: float = 1) -> str:
    """A figure's spread over the repetitions that have it."""
    return median_spread([scale * r[key] for r in runs if r.get(key) is not None])


def mode_table(data: dict[str, Any]) -> list[str]:
    out = [
        f"## Per mode (median of {data['reps']} repetitions, min–max)",
        "",
        *table_head(MODE_HEAD, left=3),
    ]
    for m, w, mode in ((m, w, mode) for m in data["models"] for w in data["workloads"] for mode in data["modes"]):
        if runs := find(data, m, w, mode):
            col = functools.partial(column, runs)
            out.append(
                f"| {m} | {w} | {mode} | {runs[0]['n_seq']} | {runs[0]['n_turns']} | {col('wall_s')} | {col('n_gen')} "
                f"| {col('decode_tps')} | {col('n_evaluated')} | {col('turn_latency_s', 1000)} "
                f"| {col('turn_decode_tps')} | {col('in_flight')} | {col('peak_rss_mib')} |"
            )
    return [*out, ""]


def rates_by(rows: list[dict[str, Any]], pp: int) -> dict[int, dict[str, Any]]:
    """llama-batched-bench's rows for one prompt length, by sequences per batch."""
    return {r["pl"]: r for r in rows if r["pp"] == pp}


def rates_table(data: dict[str, Any]) -> list[str]:
    """The engine's own rates by depth and sequences per batch."""
    rates = data.get("engine_rates") or {}
    if not rates:
        return []
    out = [
        "## What the engine allows (llama-batched-bench, same run)",
        "",
        "llama.cpp's `llama-batched-bench` on each model before the repetitions: a prompt of "
        f"{RATE_PP} or {RATE_PP_DEEP} tokens per sequence in one batch, then {RATE_TG} decode steps of one "
        "token per sequence, on a context laid out as the handle's (a cache stream per sequence), flash "
        f"attention on. At {RATE_PP_DEEP} the decode steps run about as deep as the sessions' (their prompts "
        "hold 700–1400 tokens).",
        "",
        "| model | prompt tokens per sequence | sequences per batch | prompt tok/s | decode tok/s "
        "| decode vs 1 sequence |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m, rows in rates.items():
        for pp in sorted({r["pp"] for r in rows}):
            by = rates_by(rows, pp)
            for pl, r in sorted(by.items()):
                out.append(
                    f"| {m} | {pp} | {pl} | {r['speed_pp']:.1f} | {r['speed_tg']:.1f} "
                    f"| {r['speed_tg'] / by[1]['speed_tg']:.2f}× |"
                )
    return [*out, "", *floor_table(data), *depth_table(data)]


# The two engine tables' columns.


# The tables' columns.
MODE_HEAD = (
    "model | workload | mode | n_seq | turns | total wall s | decoded tokens | decoded tok/s over the wall "
    "| prompt tokens evaluated | median turn latency ms | median per-turn decode tok/s | calls in flight "
    "| peak RSS MiB"
)
FLOOR_HEAD = (
    "model | workload | prompt tokens evaluated | decoded tokens | floor, one at a time | floor, 4 at "
    "once | most the wall ratio can be | pyshim concurrent / serialized (decoded tok/s over the wall) | "
    "pyshim-concurrent wall / its floor | llama-server-np4 wall / the same floor"
)
DEPTH_HEAD = (
    "model | workload | decode tok/s, serialized (batched-bench: 1 sequence) | decode tok/s, concurrent "
    "(batched-bench: 4 sequences) | concurrent / serialized (batched-bench: 4 / 1) | prompt s, serialized "
    "/ concurrent | evaluator busy, serialized / concurrent"
)


def floor_table(data: dict[str, Any]) -> list[str]:
    """The least wall the shallow rates allow each workload, one call at a time and 4 at once."""
    out = [
        "**Floor** is the least wall a mode's tokens allow at the shallow rates: one call at a time, its prompt "
        "tokens at the rate of 1 sequence per batch and its decoded tokens at 1 per step; 4 at once, the prompt "
        "tokens at the best rate of any sequence count and the decoded tokens at 4 per step (every step full). "
        "Shallow, both rates are at their best, so no scheduler reaches a floor; the quotient of the two floors "
        "is about the most that running the 4 sessions at once can give over the wall.",
        "",
        *table_head(FLOOR_HEAD),
    ]
    for m, rows in data["engine_rates"].items():
        by = rates_by(rows, RATE_PP)
        pp = max(r["speed_pp"] for r in by.values())
        for w in data["workloads"]:
            runs = find(data, m, w, "pyshim-concurrent")
            if not runs or runs[0]["n_evaluated"] is None:
                continue
            n_eval = statistics.median(r["n_evaluated"] for r in runs)
            n_gen = statistics.median(r["n_gen"] for r in runs)
            one = n_eval / by[1]["speed_pp"] + n_gen / by[1]["speed_tg"]
            four = n_eval / pp + n_gen / by[max(by)]["speed_tg"]
            measured = ratios(data, m, w, "pyshim-concurrent", "pyshim-serialized")
            server = find(data, m, w, "llama-server-np4")
            walls = [median_spread([r["wall_s"] / four for r in rs]) if rs else "n/a" for rs in (runs, server)]
            out.append(
                f"| {m} | {w} | {n_eval:.0f} | {n_gen:.0f} | {one:.1f} s | {four:.1f} s | {one / four:.2f}× "
                f"| {ratio_text(measured['decode_tps']) if measured else 'n/a'} | {walls[0]}× | {walls[1]}× |"
            )
    return [*out, ""]


def depth_table(data: dict[str, Any]) -> list[str]:
    """pyshim's decode steps against the engine's own at the sessions' depth, and how much of the
    wall its evaluator spent in llama_decode."""
    out = [
        f"**At the sessions' depth.** pyshim's decode-step rates (el_stats `evaluation`) beside "
        f"llama-batched-bench's with a {RATE_PP_DEEP}-token prompt per sequence; and the share of the wall "
        "pyshim's evaluator thread spent in llama_decode (prompt batches and decode steps): the rest is all "
        "that any scheduling of the calls could take back.",
        "",
        *table_head(DEPTH_HEAD),
    ]
    for m, rows in data["engine_rates"].items():
        deep = rates_by(rows, RATE_PP_DEEP)
        if 1 not in deep or N_SESSIONS not in deep:
            continue
        one, four = deep[1]["speed_tg"], deep[N_SESSIONS]["speed_tg"]
        for w in data["workloads"]:
            conc, ser = find(data, m, w, "pyshim-concurrent"), find(data, m, w, "pyshim-serialized")
            if not conc or not ser or not conc[0].get("engine"):
                continue
            prompt_s = [median_spread([r["engine"]["ms_prompt_batches"] / 1000 for r in rs]) for rs in (ser, conc)]
            steps = (ratios(data, m, w, "pyshim-concurrent", "pyshim-serialized") or {}).get("step_tps", [])
            out.append(
                f"| {m} | {w} | {column(ser, 'step_tps')} ({one:.1f}) | {column(conc, 'step_tps')} ({four:.1f}) "
                f"| {ratio_text(steps)} ({four / one:.2f}×) | {prompt_s[0]} / {prompt_s[1]} "
                f"| {column(ser, 'busy')} / {column(conc, 'busy')} |"
            )
    return [*out, ""]


def report(data: dict[str, Any]) -> str:
    out = opening("Four agent sessions at once on one handle", data)
    out[-1] += (
        f" {data['n_sessions']} sessions of bench.peers' interleaved agent "
        f"conversations, two workloads: **agent** (up to {data['workloads']['agent'][0]} tokens per turn, as "
        f"bench.peers: mostly prompt) and **answers** (exactly {data['workloads']['answers'][0]} tokens per "
        f"turn: mostly decoding); greedy, {data['threads']} threads, "
        f"{data['n_ctx']} tokens of context per slot; each (repetition, model, mode) in a process of its own, "
        "repetition k of every mode before repetition k+1 of any."
    )
    out += [""]
    out += ratio_table(data)
    out += rates_table(data)
    out += mode_table(data)
    out += [
        "## Reading the results",
        "",
        "- **Total wall** runs from the moment every thread of the mode is released to the end of its last "
        "turn; **decoded tok/s over the wall** is every token decoded in the mode over that wall. The sessions, "
        "prompts and greedy sampling are the same in every mode, so the decoded tokens should match "
        "(compare the column), and this figure is the wall inverted.",
        "- **Decode tok/s in decode steps** is pyshim's own count (el_stats `evaluation`): the tokens its decode "
        "steps evaluated over the time llama_decode took for those steps, prompt chunks excluded: the aggregate "
        "throughput of decoding itself, which batching the calls' tokens into one step is for. The wall figures "
        "also hold the prompts, which a 2-core CPU evaluates at the same rate however they are batched (prompt "
        "seconds, serialized / concurrent, in the depth table), so they move less.",
        "- **Turn latency** is a turn's wall as its client saw it: with 4 threads on one handle it includes "
        "waiting for the other sessions' calls. **Per-turn decode tok/s** counts the tokens after the first "
        "over the time after the first, so it is decoding alone (and, concurrently, whatever shares it).",
        "- **Calls in flight** is the turns' summed wall over the mode's wall: about 1 when calls run one "
        "at a time, up to 4 when the 4 sessions' calls overlap. Where it is near 4 but the wall ratio "
        "concurrent / serialized is near 1, the calls were in flight together but served one at a time.",
        "- **Prompt tokens evaluated** are those not taken from a cache. pyshim pins each session to a slot "
        "(`session` option); llama-server routes each request to a slot itself, so a turn it sends to "
        "another session's slot shows here as more tokens evaluated.",
        "- **-fa-off** modes are the concurrent and serialized pyshim modes with `flash_attn` off, on the "
        "answers workload. llama.cpp's default (auto) turns flash attention on for CPUs; pyshim's build patches "
        "its CPU kernel for small heads (`native/patches/ggml-cpu-fa-blocked-decode.patch`), and this pair shows "
        "what the attention setting does to several sequences per step.",
        "- **Alone, n_seq 4 vs n_seq 1** is session 1 by itself on each handle: the price one call pays for "
        "a handle that could serve 4 (the ratios should be 1.00×).",
        "",
    ]
    return "\n".join(out)


def output_path(args: argparse.Namespace, when: str) -> Path:
    """--out, except that a partial run (--quick, or not every model and mode) never replaces
    the full report: it writes one of its own, dated."""
    partial = args.quick or set(args.models) != set(MODELS) or set(args.modes) != set(MODES)
    if partial and args.out.resolve() == CANONICAL.resolve():
        out = args.out.with_name(f"{args.out.stem}-partial-{when}{args.out.suffix}")
        print(f"partial run (--quick, or not every model and mode): writing {out}", flush=True)
        return out
    return args.out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+")
    ap.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--quick", action="store_true", help="tiny sessions on the smallest model: checks the harness")
    ap.add_argument("--out", type=Path, default=CANONICAL)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        spec = json.loads(args.worker)
        result = run_mode(spec["mode"], spec["workload"], Path(spec["model"]), spec["rep"], spec["quick"])
        Path(args.worker_out).write_text(json.dumps(result))
        return

    args.models = args.models or ([QUICK_MODEL] if args.quick else MODELS)
    args.reps = args.reps or (1 if args.quick else 3)
    data = run_all(args)
    text = report(data)
    print(text)
    out = output_path(args, data["when"])
    out.write_text(stamp(args_command("bench.concurrent")) + text)
    out.with_suffix(".json").write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
