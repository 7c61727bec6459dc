"""pyshim beside the engine's ceiling and its peers, on one machine, in one run.

    python -m bench.peers [--models M ...] [--systems S ...] [--reps 3]
        [--out docs/bench-peers.md] [--chart docs/bench-peers-ttft.png]
    python -m bench.peers --from-json docs/bench-peers.json --out ...   # re-render only

One invocation measures everything its report shows: the ceiling, every workload, the
verdicts. A partial run (some models, systems or workloads, or --quick) aimed at
docs/bench-peers.md writes docs/bench-peers-partial-DATE.md instead of patching the full
report. Rates count the tokens each system evaluated, and every target is judged over the
min–max of the repetitions ("within noise" when that spread cannot resolve it).

Systems: llama.cpp's own ``llama-bench`` (the ceiling), ``pyshim``, ``llama-cpp-python``
0.3.36 and ``llama-server``, all from the pinned llama.cpp tree (``make bench`` builds the
last three's parts into ``build-peers/``). Every system gets the same prompts, threads,
greedy sampling and context size. Each (system, model, workload) runs in a process of its
own, so peak RSS is that workload's, and no system warms another's caches.

Workloads (see each function): ``single`` (prefill over a ~512-token prompt, decode over
128 tokens, time to first token; median of ``--reps``), ``overhead`` (time per call outside
the model on a ~4k-token conversation, for the systems that report their model time),
``agent`` (the scripted 20-turn tool-calling session of ``bench.agent_session``),
``interleaved`` (2 and 4 such conversations of 6 turns, taking turns on one model; median
of ``--reps``).
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common.fixtures import FILLER, PEER_MODELS, TOOLS, conversation, desk_conversations, session_max_tokens
from bench.common.host import batch_ms, llama_bench, machine, worker
from bench.common.provenance import ROOT, args_command, stamp
from bench.common.stats import p10_p90
from bench.common.systems import PEERS, PEERS_UPSTREAM, LlamaServer, System, open_system, session
from bench.peers_report import OVERHEAD_TURNS, attention, chart, report

MODELS = PEER_MODELS
SYSTEMS = ["pyshim", "llama-cpp-python", "llama-server"]
N_CTX = 8192

# -- workloads: each takes an open system and returns plain data ----------------------


def single(system: System, reps: int, quick: bool = False) -> dict[str, Any]:
    """Prefill rate over a ~512-token prompt (max_tokens 1, so TTFT is prompt evaluation
    plus one sampled token) and decode rate over 128 generated tokens (rate taken after the
    first token, so it is decoding alone). Every repetition clears the system's cache first
    and opens with its own words, and the prefill rate counts the tokens the system really
    evaluated (the chat template's shared opening would otherwise come from the cache)."""
    words, n_out = (40, 8) if quick else (360, 128)
    system.turn([{"role": "user", "content": "Warm up: say OK."}], None, 2)  # page the weights in
    prefill, decode = [], []
    for k in range(reps):
        long = (FILLER * (words // 30 + 1))[: words * 6]
        system.clear_cache()
        p = system.turn([{"role": "user", "content": f"Run {k}. Summarise this log in a sentence.\n\n{long}"}], None, 1)
        n_eval = p.n_evaluated if p.n_evaluated is not None else p.n_prompt
        prefill.append({"n_prompt": p.n_prompt, "n_evaluated": n_eval, "ttft_s": p.ttft_s, "tps": n_eval / p.ttft_s})
        d = system.turn(
            [{"role": "user", "content": f"Run {k}. Count from 1 to 1000, one number per line, nothing else."}],
            None,
            n_out,
            ignore_eos=True,
        )
        decode.append({"n_gen": d.n_gen, "tps": (d.n_gen - 1) / max(1e-9, d.total_s - d.ttft_s), "ttft_s": d.ttft_s})
    return {
        "prefill": prefill,
        "decode": decode,
        "prefill_tps": statistics.median(r["tps"] for r in prefill),
        "prefill_tps_range": [min(r["tps"] for r in prefill), max(r["tps"] for r in prefill)],
        "decode_tps": statistics.median(r["tps"] for r in decode),
        "decode_tps_range": [min(r["tps"] for r in decode), max(r["tps"] for r in decode)],
        "n_prompt": statistics.median(r["n_prompt"] for r in prefill),
        "n_evaluated": statistics.median(r["n_evaluated"] for r in prefill),
        "n_gen": statistics.median(r["n_gen"] for r in decode),
        "ttft_ms": 1000 * statistics.median(r["ttft_s"] for r in prefill),
    }


# Conversation sizes for the outside-the-model workload: turns of bench.agent_session
# (~110 tokens each) giving ~1k, ~4k and ~16k prompt tokens, and a context that holds them.
OVERHEAD_N_CTX = 20480


def overhead(system: System, reps: int, quick: bool = False, size: str = "4k") -> dict[str, Any]:
    """What a user waits for on an agent's next turn: the wall time of a call on a long
    conversation. The conversation is evaluated once; each timed call then sends it with a new
    last question, so the model evaluates only that question and samples one token. Every
    system is timed the same way, by the wall; the floor it is held to (the same tokens at the
    engine's own rate at that depth) is measured by ``llama-bench`` in the same run
    (``depth_floor``). A system's own split of its time is kept only as detail."""
    history = conversation(3 if quick else OVERHEAD_TURNS[size])[-1][:-1]
    system.turn([*history, {"role": "user", "content": "Warm-up: which city was first?"}], TOOLS, 1)
    rows = []
    for i in range(max(reps, 3) * 5):
        question = {"role": "user", "content": f"Question {i}: which of these cities was the warmest, and by how much?"}
        t = system.turn([*history, question], TOOLS, 1)
        row: dict[str, Any] = {"wall_ms": 1000 * t.total_s, "n_prompt": t.n_prompt, "n_evaluated": t.n_evaluated}
        if t.model_s is not None:  # the system's own timer: detail, never the yardstick
            row["own_model_ms"] = 1000 * t.model_s
        rows.append({**row, **t.detail})
    walls = sorted(r["wall_ms"] for r in rows)
    summary = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k.endswith("_ms")}
    counts = [r["n_evaluated"] for r in rows if r["n_evaluated"] is not None]
    return {
        "rows": rows,
        "n_prompt": rows[0]["n_prompt"],
        "n_evaluated": statistics.median(counts) if counts else None,
        "wall_range_ms": [walls[0], walls[-1]],
        **summary,
    }


def agent(system: System, reps: int, quick: bool = False) -> dict[str, Any]:
    """The 20-turn tool-calling session: every turn adds a question, a tool call and its
    result; the model writes up to 16 tokens of the next assistant message. Run `reps`
    times, each session opening with its own words so that none reuses another's cache;
    the session with the median wall time is reported, turn by turn."""
    runs = []
    for k in range(reps):
        rows = session(
            system, conversation(3 if quick else 20, who=f"Session {k + 1}. "), max_tokens=session_max_tokens(quick)
        )
        runs.append({"turns": rows, "total_s": sum(r["total_s"] for r in rows)})
    runs.sort(key=lambda r: r["total_s"])
    return {**runs[len(runs) // 2], "runs_s": [r["total_s"] for r in runs]}


def interleaved(system: System, reps: int, quick: bool = False, n_conv: int = 2) -> dict[str, Any]:
    """n_conv conversations of 6 turns taking turns on one model: turn 1 of each, then turn
    2 of each, and so on. They differ from their system prompt's first words on, and each
    carries a ~500-token brief of standing instructions, as agent programs do. Run `reps`
    times, each with its own opening words; the run with the median wall time is reported."""
    runs = []
    for k in range(reps):
        convs = desk_conversations(k + 1, n_conv, quick)
        order = [(c, t) for t in range(len(convs[0])) for c in range(n_conv)]
        rows = session(system, [convs[c][t] for c, t in order], max_tokens=session_max_tokens(quick))
        for (c, t), r in zip(order, rows, strict=True):
            r["conversation"], r["turn"] = c, t
        runs.append({"turns": rows, "n_conv": n_conv, "total_s": sum(r["total_s"] for r in rows)})
    runs.sort(key=lambda r: r["total_s"])
    return {**runs[len(runs) // 2], "runs_s": [r["total_s"] for r in runs]}


WORKLOADS = {
    "single": single,
    **{f"overhead-{size}": functools.partial(overhead, size=size) for size in OVERHEAD_TURNS},
    "agent": agent,
    "interleaved-2": lambda s, reps, quick=False: interleaved(s, reps, quick, 2),
    "interleaved-4": lambda s, reps, quick=False: interleaved(s, reps, quick, 4),
}


def slots_for(workload: str) -> int:
    return int(workload.split("-")[1]) if workload.startswith("interleaved") else 1


def run_workload(system_name: str, model: Path, workload: str, reps: int, quick: bool = False) -> dict[str, Any]:
    """One workload on a freshly opened system, in this process."""
    n_seq = slots_for(workload)
    n_ctx = OVERHEAD_N_CTX if workload.startswith("overhead") else N_CTX if n_seq == 1 else 4096
    system = open_system(system_name, model, n_ctx=n_ctx, n_seq=n_seq)
    try:
        result = WORKLOADS[workload](system, reps, quick)
        rss = system.peak_rss_mib() if isinstance(system, LlamaServer) else None
    finally:
        system.close()
    if rss is None:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"system": system_name, "workload": workload, "peak_rss_mib": rss, "info": system.info, **result}


def in_subprocess(system: str, model: Path, workload: str, reps: int, quick: bool) -> dict[str, Any]:
    spec = {"system": system, "model": str(model), "workload": workload, "reps": reps, "quick": quick}
    return worker("bench.peers", spec)


def ceiling(model: Path, reps: int) -> dict[str, float]:
    """llama-bench on the same tree and threads: pp512 and tg128 (tokens/s), the rates the
    single-turn figures are held to; and pp128 and tg16 at a depth of 2048 tokens, the shape
    of an agent turn late in a session."""
    rows = llama_bench(model, reps, "-p", "512", "-n", "128")
    pp = next(r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
    deep = llama_bench(model, reps, "-p", "128", "-n", "16", "-d", "2048")
    dpp = next(r for r in deep if r["n_prompt"] > 0 and r["n_gen"] == 0)
    dtg = next(r for r in deep if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return {
        "pp512": pp["avg_ts"],
        "pp512_sd": pp["stddev_ts"],
        "pp512_range": [min(pp["samples_ts"]), max(pp["samples_ts"])],
        "tg128": tg["avg_ts"],
        "tg128_sd": tg["stddev_ts"],
        "tg128_range": [min(tg["samples_ts"]), max(tg["samples_ts"])],
        "pp128_d2048": dpp["avg_ts"],
        "tg16_d2048": dtg["avg_ts"],
    }


# -- the model-time floor: what the engine alone would need -----------------------------


def depth_floor(
    model: Path, n_new: int, depth: int, reps: int, flash_attn: str = "auto", peers: Path = PEERS
) -> dict[str, Any]:
    """The engine alone on a next turn's work: ``llama-bench`` evaluating ``n_new`` tokens on
    top of ``depth`` cached ones (its depth is evaluated once and restored for each repetition),
    same tree and threads, with the attention setting of the system it is held against. One
    sample per repetition; a system's wall per call minus this is what it adds, whatever its own
    timers say."""
    rows = llama_bench(model, reps, "-p", str(n_new), "-n", "0", "-d", str(depth), "-fa", flash_attn, peers=peers)
    pp = next(r for r in rows if r["n_prompt"] == n_new)
    samples = batch_ms(pp)
    return {
        "n_new": n_new,
        "depth": depth,
        "flash_attn": flash_attn,
        "ms": statistics.median(samples),
        "range_ms": [samples[0], samples[-1]],
        "p10_p90_ms": p10_p90(samples),
    }


def next_turn_floors(model: Path, results: list[dict[str, Any]], reps: int) -> dict[str, Any]:
    """The floor of each next-turn workload this model ran, for the tokens it evaluated per call
    (as pyshim, else llama-server, counted them: the same template and tokenizer) at the depth
    they were evaluated on, for each attention setting a system ran with (llama.cpp's flash
    attention kernel and its plain one differ most at depth)."""
    floors: dict[str, Any] = {}
    for size in OVERHEAD_TURNS:
        ran = [r for r in results if r["workload"] == f"overhead-{size}"]
        counted = sorted((r for r in ran if r.get("n_evaluated")), key=lambda r: r["system"] != "pyshim")
        if counted:
            n_new = round(counted[0]["n_evaluated"])
            depth = int(counted[0]["n_prompt"]) - n_new
            settings = sorted({attention(r) for r in ran})
            floors[size] = {fa: depth_floor(model, n_new, depth, max(reps, 3) * 5, fa) for fa in settings}
            if (PEERS_UPSTREAM / "llama-bench").exists():  # plain llama.cpp, no patch: the yardstick
                for fa in ("on", "off"):
                    floors[size][f"upstream-{fa}"] = depth_floor(
                        model, n_new, depth, max(reps, 3) * 5, fa, peers=PEERS_UPSTREAM
                    )
    return floors


CANONICAL = ROOT / "docs" / "bench-peers.md"


def is_partial(args: argparse.Namespace) -> bool:
    return (
        args.quick
        or set(args.models) != set(MODELS)
        or set(args.systems) != set(SYSTEMS)
        or set(args.workloads) != set(WORKLOADS)
    )


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement of one report, in this invocation: the ceiling of each model,
    then each (system, workload) in a process of its own."""
    from pyshim import models

    data: dict[str, Any] = {
        "command": "python -m bench.peers " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "when": time.strftime("%Y-%m-%d"),
        "llama_cpp_python": "0.3.36",
        "models": args.models,
        "systems": args.systems,
        "reps": args.reps,
        "ceiling": {},
        "results": [],
    }
    for m in args.models:
        path = models.path(m)
        data["ceiling"][m] = ceiling(path, args.reps)
        print(f"{m}: llama-bench {data['ceiling'][m]}", flush=True)
        plan = [(s, w) for w in args.workloads for s in args.systems]
        if "agent" in args.workloads:
            plan.append(("pyshim-fa-off", "agent"))  # llama-cpp-python's attention setting
            if m == "gemma-3-270m":
                plan.append(("pyshim-reuse-off", "agent"))  # what llama-cpp-python's SWA fix (PR 2180) does
        for s, w in plan:
            t0 = time.monotonic()
            reps = 1 if s == "pyshim-reuse-off" else args.reps  # 5× slower, and far from its goal
            r = in_subprocess(s, path, w, reps, args.quick)
            r["model"] = m
            data["results"].append(r)
            print(f"{m} {s} {w}: {time.monotonic() - t0:.0f} s", flush=True)
        ran = [r for r in data["results"] if r["model"] == m]
        data.setdefault("floors", {})[m] = next_turn_floors(path, ran, args.reps)
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--systems", nargs="+", default=SYSTEMS)
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="tiny prompts and few turns: checks the harness only")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--chart", type=Path)
    ap.add_argument("--from-json", type=Path, help="re-render a report from a saved run")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        spec = json.loads(args.worker)
        result = run_workload(spec["system"], Path(spec["model"]), spec["workload"], spec["reps"], spec["quick"])
        Path(args.worker_out).write_text(json.dumps(result))
        return

    if args.from_json:
        data = json.loads(args.from_json.read_text())
    else:
        data = run_all(args)
        if args.out and is_partial(args) and args.out.resolve() == CANONICAL.resolve():
            # a partial run never patches the full report: it writes one of its own, dated
            args.out = args.out.with_name(f"{args.out.stem}-partial-{data['when']}{args.out.suffix}")
            if args.chart:
                args.chart = args.chart.with_name(f"{args.chart.stem}-partial-{data['when']}{args.chart.suffix}")
            print(f"partial run (not every model, system and workload): writing {args.out}", flush=True)
    if args.chart:
        chart(data, args.chart)
        data["chart"] = str(args.chart)
    text = report(data)
    print(text)
    if args.out:
        args.out.write_text(stamp(args_command("bench.peers")) + text)
        if not args.from_json:
            args.out.with_suffix(".json").write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
