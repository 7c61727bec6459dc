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
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agent_session import TOOLS, conversation
from bench.provenance import args_command, stamp
from bench.systems import PEERS, PEERS_UPSTREAM, THREADS, LlamaServer, System, open_system

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["qwen2.5-coder-0.5b-instruct", "gemma-3-270m"]
SYSTEMS = ["pyshim", "llama-cpp-python", "llama-server"]
N_CTX = 8192

FILLER = (
    "The harbour master logs every ship that enters the bay, its cargo, its crew and the hour "
    "of its arrival, and at dusk he reads the list aloud to the lighthouse keeper. "
)

BRIEF = "\n\nStanding instructions for this desk:\n" + "\n".join(
    f"{i}. When a traveller asks about {place}, check the weather there first, quote the temperature in "
    f"degrees Celsius, mention the chance of rain as a percentage, and suggest one item to pack."
    for i, place in enumerate(
        [
            "a coastal town",
            "a mountain pass",
            "a desert city",
            "an island",
            "a river port",
            "a high plateau",
            "a northern capital",
            "a southern harbour",
            "a forest village",
            "a lake resort",
            "a border crossing",
            "a volcanic valley",
            "a fishing village",
            "a university town",
        ],
        start=1,
    )
)

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
OVERHEAD_TURNS = {"1k": 9, "4k": 36, "16k": 145}
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


DESKS = ["north", "south", "east", "west"]


def desk_conversations(run: int, n_conv: int, quick: bool = False) -> list[list[list[dict[str, Any]]]]:
    """The n_conv agent conversations of one run (6 turns; 2 and no brief when quick): each
    turn's prompt, per conversation. They differ from their system prompt's first words on
    ("Run 1. Desk 2 of 4, south."), and each carries the ~500-token brief."""
    return [
        conversation(
            2 if quick else 6, who=f"Run {run}. Desk {c + 1} of {n_conv}, {DESKS[c]}. ", brief="" if quick else BRIEF
        )
        for c in range(n_conv)
    ]


def session_max_tokens(quick: bool = False) -> int:
    """What the model may write per agent turn."""
    return 4 if quick else 16


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


def worker(module: str, spec: dict[str, Any]) -> dict[str, Any]:
    """``python -m module --worker SPEC --worker-out FILE`` in a process of its own: the JSON
    it wrote to FILE."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [sys.executable, "-m", module, "--worker", json.dumps(spec), "--worker-out", out.name],
            check=True,
            cwd=ROOT,
        )
        return json.loads(Path(out.name).read_text())


def in_subprocess(system: str, model: Path, workload: str, reps: int, quick: bool) -> dict[str, Any]:
    spec = {"system": system, "model": str(model), "workload": workload, "reps": reps, "quick": quick}
    return worker("bench.peers", spec)


def machine() -> str:
    """The machine, as the reports name it."""
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.platform()}"


def llama_bench(model: Path, reps: int, *args: str, peers: Path = PEERS) -> list[dict[str, Any]]:
    cmd = [str(peers / "llama-bench"), "-m", str(model), "-t", str(THREADS), "-r", str(reps), "-o", "json", *args]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


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


def batch_ms(row: dict[str, Any]) -> list[float]:
    """One llama-bench result's samples as milliseconds per batch of its prompt tokens, ascending."""
    return sorted(1000 * row["n_prompt"] / ts for ts in row["samples_ts"])


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


def attention(result: dict[str, Any]) -> str:
    """The flash-attention setting a system ran with, as llama-bench's -fa takes it."""
    fa = str(result.get("info", {}).get("flash_attn", "auto"))
    return fa if fa in ("on", "off", "auto") else "auto"


def floor_s(rows: list[dict[str, Any]], ceil: dict[str, float], key: str | None = None) -> float:
    """Each conversation's prompts evaluated once (every turn only what its previous turn's
    prompt did not hold) plus the tokens decoded, at llama-bench's rates. It ignores that
    attention grows with depth, so it is a floor no system can reach exactly."""
    held: dict[Any, int] = {}
    total = 0.0
    for r in rows:
        c = r.get(key) if key else 0
        new = r["n_prompt"] - held.get(c, 0)
        held[c] = r["n_prompt"]
        total += new / ceil["pp512"] + r["n_gen"] / ceil["tg128"]
    return total


# -- report --------------------------------------------------------------------------


def span(r: dict[str, Any], key: str) -> str:
    """ "(min–max)" of a rate's repetitions, where the run recorded them."""
    if f"{key}_range" not in r:
        return ""
    lo, hi = r[f"{key}_range"]
    return f"({lo:.1f}–{hi:.1f})"


def report(data: dict[str, Any]) -> str:
    names = ["llama.cpp's ceiling"] + [x for x in data["systems"] if x != "pyshim"]  # what this run ran
    out = [
        "# pyshim beside " + (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]),
        "",
        f"Produced by one invocation of `{data['command']}` on {data['machine']}; {data['when']}: every table, "
        "the ceiling and the verdicts below come from that run. llama.cpp from the pinned "
        f"llama-cpp-python {data['llama_cpp_python']} source archive for every system; {THREADS} threads, greedy "
        "sampling, one process per (system, model, workload). Ratios are to the row named in the header.",
        "",
    ]
    res = data["results"]

    def find(model: str, system: str, workload: str) -> dict[str, Any] | None:
        return next(
            (r for r in res if r["model"] == model and r["system"] == system and r["workload"] == workload), None
        )

    out += [
        f"## Single turn (median of {data['reps']} runs)",
        "",
        "| model | system | prefill tok/s (min–max) | of ceiling (pp512) | decode tok/s (min–max) "
        "| of ceiling (tg128) | TTFT, ~512-token prompt | peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in data["models"]:
        c = data["ceiling"][m]
        if "pp128_d2048" in c:
            depth = f"; pp128 at depth 2048: {c['pp128_d2048']:.1f}, tg16 there: {c['tg16_d2048']:.1f}"
        else:
            depth = ""
        out.append(
            f"| {m} | **llama-bench** (ceiling{depth}) | {c['pp512']:.1f} {span(c, 'pp512')} | 100 % "
            f"| {c['tg128']:.1f} {span(c, 'tg128')} | 100 % | | |"
        )
        for s in data["systems"]:
            r = find(m, s, "single")
            if r:
                n_eval = r.get("n_evaluated", r["n_prompt"])
                out.append(
                    f"| {m} | {s} | {r['prefill_tps']:.1f} {span(r, 'prefill_tps')} "
                    f"| {100 * r['prefill_tps'] / c['pp512']:.1f} % "
                    f"| {r['decode_tps']:.1f} {span(r, 'decode_tps')} | {100 * r['decode_tps'] / c['tg128']:.1f} % "
                    f"| {r['ttft_ms']:.0f} ms ({r['n_prompt']:.0f} tok, {n_eval:.0f} evaluated) "
                    f"| {r['peak_rss_mib']:.0f} MiB |"
                )
    out += [
        "",
        "Prefill rate is the prompt tokens evaluated (each repetition starts from a cleared cache; where a "
        "system reports what it evaluated, that count) over time to first token (one token sampled); decode "
        "rate is tokens after the first over the time after it. llama-bench times pp512 and tg128 in the "
        "engine alone. The ranges are the min–max of the repetitions (llama-bench's own samples for the ceiling).",
        "",
    ]

    out += next_turn_table(data, find)

    for workload, title in [
        ("agent", "Agent session: 20 tool-calling turns"),
        ("interleaved-2", "Two conversations taking turns, 6 turns each"),
        ("interleaved-4", "Four conversations taking turns, 6 turns each"),
    ]:
        variants = ["pyshim-fa-off", "pyshim-reuse-off"]
        rows = [(m, s, find(m, s, workload)) for m in data["models"] for s in data["systems"] + variants]
        rows = [(m, s, r) for m, s, r in rows if r]
        if not rows:
            continue
        out += [
            f"## {title}",
            "",
            "| model | system | wall | its model-time floor | wall / floor | pyshim faster by "
            "| prompt tokens, last turn | tokens evaluated | median TTFT | last TTFT | peak RSS |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for m in data["models"]:
            mine = find(m, "pyshim", workload)
            if not mine:
                continue
            key = "conversation" if workload.startswith("interleaved") else None
            for mm, s, r in rows:
                if mm != m:
                    continue
                ttfts = [t["ttft_s"] * 1000 for t in r["turns"]]
                faster = "" if s == "pyshim" else f"{r['total_s'] / mine['total_s']:.2f}×"
                counts = [t["n_evaluated"] for t in r["turns"]]
                evaluated = "n/a" if None in counts else sum(counts)
                floor = floor_s(r["turns"], data["ceiling"][m], key)
                wall = f"{r['total_s']:.1f} s"
                if len(r.get("runs_s", [])) > 1:
                    wall += f" (median of {len(r['runs_s'])}: {min(r['runs_s']):.1f}–{max(r['runs_s']):.1f})"
                out.append(
                    f"| {m} | {s} | {wall} | {floor:.1f} s | {100 * r['total_s'] / floor:.0f} % "
                    f"| {faster} | {r['turns'][-1]['n_prompt']} | {evaluated} "
                    f"| {statistics.median(ttfts):.0f} ms | {ttfts[-1]:.0f} ms | {r['peak_rss_mib']:.0f} MiB |"
                )
        out.append("")
    out += [
        "A system's model-time floor is its own prompts (as it rendered them) evaluated once per "
        "conversation (each turn only the tokens its previous turn's prompt did not hold) plus the tokens "
        "it decoded, at llama-bench's pp512 and tg128 rates; it ignores that attention slows as the context "
        "grows and that short batches run below the pp512 rate, so no system can reach it exactly. "
        "Prompt tokens are as each system rendered and counted them; tokens evaluated are the prompt "
        "tokens not taken from a cache, summed over the session, where the system reports them "
        "(llama-cpp-python does not).",
        "",
    ]
    if data.get("chart"):
        out += [f"![per-turn time to first token]({Path(data['chart']).name})", ""]
    out += targets(data, find)
    out += notes(data)
    return "\n".join(out)


def p10_p90(values: list[float]) -> list[float]:
    v = sorted(values)
    return [v[int(0.1 * (len(v) - 1))], v[int(0.9 * (len(v) - 1))]]


def ms_span(lo_hi: list[float]) -> str:
    return f"{lo_hi[0]:.1f}–{lo_hi[1]:.1f}"


def upstream_floor(data: dict[str, Any], model: str, size: str) -> dict[str, Any] | None:
    """The better (faster) of plain llama.cpp's two floors at this depth, flash attention on or off:
    what a user who dropped pyshim for llama.cpp itself would wait for, at best."""
    here = data.get("floors", {}).get(model, {}).get(size, {})
    both = [f for k, f in here.items() if k.startswith("upstream-")]
    return min(both, key=lambda f: f["ms"]) if both else None


def next_turn_table(data: dict[str, Any], find: Any) -> list[str]:
    """An agent's next turn on a long conversation, by the wall, every system side by side, with
    the engine's own time for the same tokens at that depth (llama-bench, this run)."""
    rows = [
        (m, size, s, r)
        for m in data["models"]
        for size in OVERHEAD_TURNS
        for s in data["systems"]
        if (r := find(m, s, f"overhead-{size}"))
    ]
    if not rows:
        return []
    out = [
        "## An agent's next turn, by the wall",
        "",
        "| model | conversation | system | prompt tokens | evaluated per call | wall per call, median (min–max) "
        "| / pyshim's | engine floor (llama-bench) | above the floor, median (p10–p90) "
        "| upstream floor, the better of fa on/off | / upstream floor |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    other = False
    for m, size, s, r in rows:
        floor = data.get("floors", {}).get(m, {}).get(size, {}).get(attention(r))
        mine = find(m, "pyshim", f"overhead-{size}")
        ratio = f"{r['wall_ms'] / mine['wall_ms']:.3f}" if mine else ""
        n_eval = "n/a" if r.get("n_evaluated") is None else f"{r['n_evaluated']:.0f}"
        walls = r.get("wall_range_ms", [r["wall_ms"]] * 2)
        # a system whose chat format renders another conversation does other work: marked
        mark = " †" if mine and abs(r["n_prompt"] - mine["n_prompt"]) > 0.1 * mine["n_prompt"] else ""
        other = other or bool(mark)
        if floor:
            above = [x - floor["ms"] for x in p10_p90([x["wall_ms"] for x in r["rows"]])]
            f_cell = (
                f"{floor['ms']:.1f} ms ({floor['n_new']} tokens at depth {floor['depth']}, fa {floor['flash_attn']})"
            )
            a_cell = f"**{r['wall_ms'] - floor['ms']:.1f} ms** ({ms_span(above)}){mark}"
        else:
            f_cell, a_cell = "not measured", "not measured" + mark
        up = upstream_floor(data, m, size)
        u_cell, u_ratio = (
            (f"{up['ms']:.1f} ms (fa {up['flash_attn']})", f"**{r['wall_ms'] / up['ms']:.2f}×**")
            if up
            else ("not measured", "")
        )
        out.append(
            f"| {m} | ~{size} | {s} | {r['n_prompt']} | {n_eval} | {r['wall_ms']:.1f} ms ({ms_span(walls)}) "
            f"| {ratio} | {f_cell} | {a_cell} | {u_cell} | {u_ratio} |"
        )
    if other:
        out += [
            "",
            "† Not the same work: this system's chat format rendered another conversation (more than 10 % "
            "fewer or more prompt tokens than pyshim's, e.g. a fallback format that drops the tools and the "
            "tool calls), so its wall and its distance from a floor computed for pyshim's tokens say nothing "
            "about the others.",
        ]
    out += [
        "",
        "Each timed call sends the cached conversation with a new last question, as an agent's next turn "
        "does, and samples one token; 15 calls per system, each system in a process of its own. The wall is "
        "the only yardstick: from the request to the complete reply, as the caller sees it (pyshim: the "
        "Python call; llama-server: the HTTP request from a client on loopback; llama-cpp-python: the "
        "Python call). The engine floor is llama.cpp's own `llama-bench` evaluating the same number of "
        "tokens on top of a cache of the same depth (the tokens pyshim evaluated per call; the depth is "
        "the rest of its prompt), same tree and threads, with the row's flash-attention setting (fa; "
        "llama-cpp-python turns it off, the others leave llama.cpp's auto, on for this CPU), 15 "
        "repetitions, median: "
        "what no system built on this engine can go below. The upstream floor is the same measurement by "
        "`llama-bench` built from the pinned tree with no pyshim patch (`make peers-upstream`), flash "
        "attention on and off, the faster of the two: what plain llama.cpp costs for this turn, the "
        "yardstick a system is judged against (issue 55's target: pyshim's wall at most 0.8× it). "
        "Above the floor is the wall minus that "
        "median: everything a system adds (its template, tokenizing, cache bookkeeping, sampling, JSON, "
        "HTTP or binding, and any engine work it does differently). No system's own timers enter these "
        "figures.",
        "",
    ]
    own = [(m, size, r) for m, size, s, r in rows if s == "pyshim" and "prepare_ms" in r]
    if own:
        out += [
            "pyshim's own timers, for reading where its time goes (not for comparing systems): "
            + "; ".join(
                f"{m} ~{size}: preparation {r['prepare_ms']:.2f} ms (template {r.get('template_ms', 0):.2f}, "
                f"tokenizing {r.get('tokenize_ms', 0):.2f}, sampler and grammar {r.get('sampler_ms', 0):.2f})"
                for m, size, r in own
            )
            + ".",
            "",
        ]
    return out


def notes(data: dict[str, Any]) -> list[str]:
    """What explains the numbers; the settings quoted are those recorded in this run."""
    formats = sorted(
        {(r["model"], r["info"]["chat_format"]) for r in data["results"] if "chat_format" in r.get("info", {})}
    )
    lines = [
        "## Reading the results",
        "",
        "- **Same engine, same settings, same speed.** pyshim and llama-server run llama.cpp's default "
        "attention setting (flash attention `auto`, on for this CPU); llama-cpp-python 0.3.36 turns it off. "
        "Which is faster depends on the model and the depth of the context, so `pyshim-fa-off` repeats the "
        "agent session with pyshim's `flash_attn: \"off\"`, llama-cpp-python's setting.",
        "- **Above the floor**, pyshim's part is mostly llama.cpp's `common/` chat-template code. As patched "
        "(`native/patches/common-render-*.patch`, see `docs/per-call-cost.md`) it renders a request once "
        "and runs the template's message loop only for messages it has not rendered before. pyshim also "
        "keeps, per handle, each message as read from the request and as the template's value "
        "(`native/message_cache.h`, `native/patches/common-shared-message-values.patch`), and the template "
        "takes each message's value by the number the message cache gave it "
        "(`native/patches/common-shared-values-message-ids.patch`), so a call parses, converts and "
        "builds common/'s JSON form only for its new messages. On sliding-window and recurrent models the "
        "cache checkpoint's place (where the last message starts) is read off the same render "
        "(`native/patches/common-shared-values-last-message.patch`). llama-server is built from the same "
        "patched tree, so its renders take the loop memo too, but it keeps none of these caches. Each "
        "timed call follows the model's evaluation, which streams the weights through the CPU's caches: "
        "the same preparation in a loop of calls that evaluate nothing takes about 60 % of the time.",
        "- **The model-time floor** is computed at the pp512/tg128 rates, but an agent turn evaluates about "
        "110 new tokens at a depth of 1-2k tokens, where the engine itself runs slower (llama-bench's "
        "pp128 at depth 2048 is well below pp512); pyshim and llama-server land at the same distance from it.",
    ]
    if formats:
        used = ", ".join(f"{m}: `{f}`" for m, f in formats)
        lines.append(
            f"- **llama-cpp-python's chat formats** in this run: {used}. Where that is a fallback rather than "
            "the model's own template (it does not read every GGUF's template), its prompts are a different "
            "conversation (tool calls and results are dropped), so its times there are not comparable; the "
            "prompt-token columns show it, and the targets table marks it."
        )
    return [*lines, ""]


def judge(interval: tuple[float, float], band: tuple[float, float]) -> bool | str:
    """A target's verdict: met when every ratio the repetitions allow lies in the band,
    missed when none does, and "within noise" when the spread straddles an edge, so the
    run cannot tell (the spread is then wider than the margin it would have to resolve)."""
    lo, hi = interval
    if band[0] <= lo and hi <= band[1]:
        return True
    if hi < band[0] or lo > band[1]:
        return False
    return "within noise"


def ratio_interval(num: tuple[float, float], den: tuple[float, float]) -> tuple[float, float]:
    """The range of num/den over the min–max of each side's repetitions."""
    return num[0] / den[1], num[1] / den[0]


def runs_range(r: dict[str, Any]) -> tuple[float, float]:
    runs = r.get("runs_s") or [r["total_s"]]
    return min(runs), max(runs)


def pct(interval: tuple[float, float]) -> str:
    return f"{100 * interval[0]:.1f}–{100 * interval[1]:.1f} %"


def targets(data: dict[str, Any], find: Any) -> list[str]:
    """The goals set for pyshim (issues 7 and 8), each checked against this run: a band
    around a ratio to the ceiling or the floor, or an explicit ratio to a peer, over the
    min–max of the repetitions of both sides."""
    rows: list[tuple[str, str, str, bool | str | None]] = []

    def check(goal: str, model: str, measured: str, ok: bool | str | None) -> None:
        rows.append((goal, model, measured, ok))

    for m in data["models"]:
        c = data["ceiling"][m]
        if r := find(m, "pyshim", "single"):
            for what, key, ceil in [("prefill", "prefill_tps", "pp512"), ("decode", "decode_tps", "tg128")]:
                mine = tuple(r.get(f"{key}_range", [r[key]] * 2))
                theirs = tuple(c.get(f"{ceil}_range", [c[ceil]] * 2))
                iv = ratio_interval(mine, theirs)
                check(
                    f"{what} at 98–102 % of llama-bench (the same work at the same speed)",
                    m,
                    f"{100 * r[key] / c[ceil]:.1f} % (spread {pct(iv)})",
                    judge(iv, (0.98, 1.02)),
                )
        for size in OVERHEAD_TURNS:
            mine, server = find(m, "pyshim", f"overhead-{size}"), find(m, "llama-server", f"overhead-{size}")
            if mine and server:
                # 15 calls a side: judged on p10–p90, so that one preempted call cannot decide it
                spreads = [tuple(p10_p90([x["wall_ms"] for x in r["rows"]])) for r in (mine, server)]
                iv = ratio_interval(*spreads)
                check(
                    f"next turn at ~{size} tokens: pyshim's wall ≤ llama-server's (p10–p90 of 15 calls each)",
                    m,
                    f"{mine['wall_ms'] / server['wall_ms']:.3f}× (spread {iv[0]:.3f}–{iv[1]:.3f}×)",
                    judge(iv, (0.0, 1.0)),
                )
        for workload, peer_factor in [("agent", 1.0), ("interleaved-2", 4.0), ("interleaved-4", 4.0)]:
            mine = find(m, "pyshim", workload)
            if not mine:
                continue
            key = "conversation" if workload.startswith("interleaved") else None
            floor = floor_s(mine["turns"], c, key)
            iv = (runs_range(mine)[0] / floor, runs_range(mine)[1] / floor)
            check(
                f"{workload}: 100–110 % of the model-time floor",
                m,
                f"{100 * mine['total_s'] / floor:.0f} % (spread {pct(iv)})",
                judge(iv, (1.0, 1.10)),
            )
            peers = [("llama-server", "llama-server", 1.0), ("llama-cpp-python", "llama-cpp-python", peer_factor)]
            if workload == "agent":
                peers.append(("pyshim-reuse-off", "reuse off", 3.0))
            for system, label, factor in peers:
                other = find(m, system, workload)
                if not other:
                    continue
                x = other["total_s"] / mine["total_s"]
                iv = ratio_interval(runs_range(other), runs_range(mine))
                goal = f"{workload}: {label} / pyshim wall ≥ {factor:.1f}×"
                measured = f"{x:.2f}× (spread {iv[0]:.2f}–{iv[1]:.2f}×)"
                theirs, ours = other["turns"][-1]["n_prompt"], mine["turns"][-1]["n_prompt"]
                if system == "llama-cpp-python" and abs(theirs - ours) > 0.1 * ours:
                    # it rendered another conversation: not the same work
                    check(goal, m, f"{measured}; prompts differ: {theirs} vs {ours} tokens", None)
                else:
                    check(goal, m, measured, judge(iv, (factor, float("inf"))))
    if not rows:
        return []
    out = [
        "## Targets",
        "",
        "Each verdict holds over the spread of the repetitions of both sides (min–max, or p10–p90 where the "
        "goal says so): *yes* when every ratio they allow is inside the band, ***no*** when none is, *within "
        "noise* when the spread straddles an edge (the run cannot resolve the margin).",
        "",
        "| goal | model | measured | met |",
        "|---|---|---:|:---:|",
    ]
    verdict = {True: "yes", False: "**no**", None: "not comparable", "within noise": "within noise"}
    out += [f"| {g} | {m} | {v} | {verdict[ok]} |" for g, m, v, ok in rows]
    return [*out, ""]


def chart(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in data["models"] if any(r["model"] == m and r["workload"] == "agent" for r in data["results"])]
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, m in zip(axes[0], models, strict=True):
        for r in data["results"]:
            if r["model"] == m and r["workload"] == "agent":
                ax.plot(
                    range(1, len(r["turns"]) + 1),
                    [t["ttft_s"] * 1000 for t in r["turns"]],
                    marker="o",
                    markersize=3,
                    label=r["system"] + (f" ({fmt} format)" if (fmt := r.get("info", {}).get("chat_format")) else ""),
                )
        ax.set_title(f"{m}: 20-turn agent session")
        ax.set_xlabel("turn")
        ax.set_ylabel("time to first token (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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
