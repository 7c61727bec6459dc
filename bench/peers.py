"""pyshim beside the engine's ceiling and its peers, on one machine, in one run.

    python -m bench.peers [--models M ...] [--systems S ...] [--reps 3]
        [--out docs/bench-peers.md] [--chart docs/bench-peers-ttft.png]
    python -m bench.peers --from-json docs/bench-peers.json --out ...   # re-render only

Systems: llama.cpp's own ``llama-bench`` (the ceiling), ``pyshim``, ``llama-cpp-python``
0.3.36 and ``llama-server``, all from the pinned llama.cpp tree (``make bench`` builds the
last three's parts into ``build-peers/``). Every system gets the same prompts, threads,
greedy sampling and context size. Each (system, model, workload) runs in a process of its
own, so peak RSS is that workload's, and no system warms another's caches.

Workloads (see each function): ``single`` (prefill over a ~512-token prompt, decode over
128 tokens, time to first token; median of ``--reps``), ``overhead`` (time per call outside
the model on a ~4k-token conversation, for the systems that report their model time),
``agent`` (the scripted 20-turn tool-calling session of ``bench.agent_session``),
``interleaved`` (2 and 4 such conversations of 6 turns, taking turns on one model).
"""

from __future__ import annotations

import argparse
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
from bench.systems import PEERS, THREADS, LlamaServer, System, open_system

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["qwen2.5-coder-0.5b-instruct", "gemma-3-270m"]
SYSTEMS = ["pyshim", "llama-cpp-python", "llama-server"]
N_CTX = 8192
OVERHEAD_SYSTEMS = ("pyshim", "llama-server")  # those that report their model time

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
    first token, so it is decoding alone). Every repetition opens with its own words, so no
    system reuses an earlier repetition's prompt."""
    words, n_out = (40, 8) if quick else (360, 128)
    system.turn([{"role": "user", "content": "Warm up: say OK."}], None, 2)  # page the weights in
    prefill, decode = [], []
    for k in range(reps):
        long = (FILLER * (words // 30 + 1))[: words * 6]
        p = system.turn([{"role": "user", "content": f"Run {k}. Summarise this log in a sentence.\n\n{long}"}], None, 1)
        prefill.append({"n_prompt": p.n_prompt, "ttft_s": p.ttft_s, "tps": p.n_prompt / p.ttft_s})
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
        "decode_tps": statistics.median(r["tps"] for r in decode),
        "n_prompt": statistics.median(r["n_prompt"] for r in prefill),
        "n_gen": statistics.median(r["n_gen"] for r in decode),
        "ttft_ms": 1000 * statistics.median(r["ttft_s"] for r in prefill),
    }


def overhead(system: System, reps: int, quick: bool = False) -> dict[str, Any]:
    """A system's own cost per call on a ~4k-token conversation (template rendering,
    tokenizing, cache bookkeeping, JSON both ways, result parsing, the binding or HTTP): a
    call's wall time minus the model time the system reports. The prompt is evaluated once;
    each timed call then re-sends it, so the model only re-evaluates a token or so and
    samples one. Systems that report no model time (llama-cpp-python) are not measured."""
    messages = conversation(3 if quick else 36)[-1]
    system.turn(messages, TOOLS, 1)
    rows = []
    for _ in range(max(reps, 3) * 5):
        t = system.turn(messages, TOOLS, 1)
        if t.model_s is None:
            raise ValueError(f"{system.name} reports no model time")
        wall, model = 1000 * t.total_s, 1000 * t.model_s
        rows.append(
            {"wall_ms": wall, "model_ms": model, "overhead_ms": wall - model, "n_prompt": t.n_prompt, **t.detail}
        )
    over = sorted(r["overhead_ms"] for r in rows)
    summary = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k.endswith("_ms")}
    return {
        "rows": rows,
        "n_prompt": rows[0]["n_prompt"],
        "overhead_p90_ms": over[int(0.9 * (len(over) - 1))],
        **summary,
    }


def session(system: System, prompts: list[list[dict[str, Any]]], max_tokens: int = 16) -> list[dict[str, Any]]:
    rows = []
    for messages in prompts:
        t = system.turn(messages, TOOLS, max_tokens)
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
            system, conversation(3 if quick else 20, who=f"Session {k + 1}. "), max_tokens=4 if quick else 16
        )
        runs.append({"turns": rows, "total_s": sum(r["total_s"] for r in rows)})
    runs.sort(key=lambda r: r["total_s"])
    return {**runs[len(runs) // 2], "runs_s": [r["total_s"] for r in runs]}


def interleaved(system: System, reps: int, quick: bool = False, n_conv: int = 2) -> dict[str, Any]:
    """n_conv conversations of 6 turns taking turns on one model: turn 1 of each, then turn
    2 of each, and so on. They differ from their system prompt's first words on, and each
    carries a ~500-token brief of standing instructions, as agent programs do."""
    turns = 2 if quick else 6
    desks = ["north", "south", "east", "west"]
    convs = [
        conversation(turns, who=f"Desk {c + 1} of {n_conv}, {desks[c]}. ", brief="" if quick else BRIEF)
        for c in range(n_conv)
    ]
    order = [(c, t) for t in range(turns) for c in range(n_conv)]
    rows = session(system, [convs[c][t] for c, t in order], max_tokens=4 if quick else 16)
    for (c, t), r in zip(order, rows, strict=True):
        r["conversation"], r["turn"] = c, t
    return {"turns": rows, "n_conv": n_conv, "total_s": sum(r["total_s"] for r in rows)}


WORKLOADS = {
    "single": single,
    "overhead": overhead,
    "agent": agent,
    "interleaved-2": lambda s, reps, quick=False: interleaved(s, reps, quick, 2),
    "interleaved-4": lambda s, reps, quick=False: interleaved(s, reps, quick, 4),
}


def slots_for(workload: str) -> int:
    return int(workload.split("-")[1]) if workload.startswith("interleaved") else 1


def run_workload(system_name: str, model: Path, workload: str, reps: int, quick: bool = False) -> dict[str, Any]:
    """One workload on a freshly opened system, in this process."""
    n_seq = slots_for(workload)
    system = open_system(system_name, model, n_ctx=N_CTX if n_seq == 1 else 4096, n_seq=n_seq)
    try:
        result = WORKLOADS[workload](system, reps, quick)
        rss = system.peak_rss_mib() if isinstance(system, LlamaServer) else None
    finally:
        system.close()
    if rss is None:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"system": system_name, "workload": workload, "peak_rss_mib": rss, "info": system.info, **result}


def in_subprocess(system: str, model: Path, workload: str, reps: int, quick: bool) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        spec = {"system": system, "model": str(model), "workload": workload, "reps": reps, "quick": quick}
        subprocess.run(
            [sys.executable, "-m", "bench.peers", "--worker", json.dumps(spec), "--worker-out", out.name],
            check=True,
            cwd=ROOT,
        )
        return json.loads(Path(out.name).read_text())


def llama_bench(model: Path, reps: int, *args: str) -> list[dict[str, Any]]:
    cmd = [str(PEERS / "llama-bench"), "-m", str(model), "-t", str(THREADS), "-r", str(reps), "-o", "json", *args]
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
        "tg128": tg["avg_ts"],
        "tg128_sd": tg["stddev_ts"],
        "pp128_d2048": dpp["avg_ts"],
        "tg16_d2048": dtg["avg_ts"],
    }


# -- the model-time floor: what the engine alone would need -----------------------------


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


def report(data: dict[str, Any]) -> str:
    out = [
        "# pyshim beside llama.cpp's ceiling, llama-cpp-python and llama-server",
        "",
        f"Produced by `{data['command']}` on {data['machine']}; {data['when']}. llama.cpp from the pinned "
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
        "| model | system | prefill tok/s | of ceiling (pp512) | decode tok/s | of ceiling (tg128) "
        "| TTFT, ~512-token prompt | peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in data["models"]:
        c = data["ceiling"][m]
        if "pp128_d2048" in c:
            depth = f"; pp128 at depth 2048: {c['pp128_d2048']:.1f}, tg16 there: {c['tg16_d2048']:.1f}"
        else:
            depth = ""
        out.append(
            f"| {m} | **llama-bench** (ceiling{depth}) | {c['pp512']:.1f} ± {c['pp512_sd']:.1f} | 100 % "
            f"| {c['tg128']:.1f} ± {c['tg128_sd']:.1f} | 100 % | | |"
        )
        for s in data["systems"]:
            r = find(m, s, "single")
            if r:
                out.append(
                    f"| {m} | {s} | {r['prefill_tps']:.1f} | {100 * r['prefill_tps'] / c['pp512']:.1f} % "
                    f"| {r['decode_tps']:.1f} | {100 * r['decode_tps'] / c['tg128']:.1f} % "
                    f"| {r['ttft_ms']:.0f} ms ({r['n_prompt']:.0f} tok) | {r['peak_rss_mib']:.0f} MiB |"
                )
    out += [
        "",
        "Prefill rate is prompt tokens over time to first token (one token sampled); decode rate is "
        "tokens after the first over the time after it. llama-bench times pp512 and tg128 in the engine alone.",
        "",
    ]

    over = [(m, s, find(m, s, "overhead")) for m in data["models"] for s in OVERHEAD_SYSTEMS]
    if any(r for _, _, r in over):
        out += [
            "## Time per call outside the model, ~4k-token conversation",
            "",
            "| model | system | prompt tokens | wall per call | outside the model (median) | p90 "
            "| of which: request preparation | of which: chat template |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for m, s, r in over:
            if r:
                prep = f"{r['prepare_ms']:.2f} ms" if "prepare_ms" in r else "n/a"
                tmpl = f"{r['template_ms']:.2f} ms" if "template_ms" in r else "n/a"
                out.append(
                    f"| {m} | {s} | {r['n_prompt']} | {r['wall_ms']:.1f} ms | **{r['overhead_ms']:.2f} ms** "
                    f"| {r['overhead_p90_ms']:.2f} ms | {prep} | {tmpl} |"
                )
        out += [
            "",
            "Wall time of a call minus the model time the system reports (pyshim: cache restore, prefill and "
            "decode; llama-server: its prompt and generation timings), on a prompt already cached but for its "
            "last token. Request preparation (pyshim's `ms_prepare`) is parsing, rendering the chat template, "
            "building the tool-call grammar and sampler, and tokenizing; the rest is the binding, JSON and "
            "parsing the reply.",
            "",
        ]

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
        "- **Time outside the model** is dominated by llama.cpp's `common/` chat-template code, which "
        "renders the whole conversation three times per request (the prompt, and twice more to find the "
        "generation prompt) and re-analyses the template; llama-server does the same per request. On "
        "sliding-window and recurrent models pyshim renders the history once more, to place a cache "
        "checkpoint where the last message starts.",
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


def targets(data: dict[str, Any], find: Any) -> list[str]:
    """The goals set for pyshim (issues 7 and 8), each checked against this run."""
    rows: list[tuple[str, str, str, bool | None]] = []

    def check(goal: str, model: str, measured: str, ok: bool | None) -> None:
        rows.append((goal, model, measured, ok))

    for m in data["models"]:
        c = data["ceiling"][m]
        if r := find(m, "pyshim", "single"):
            for what, got, ceil in [("prefill", r["prefill_tps"], c["pp512"]), ("decode", r["decode_tps"], c["tg128"])]:
                check(f"{what} within 2 % of llama-bench", m, f"{100 * got / ceil:.1f} %", got >= 0.98 * ceil)
        if r := find(m, "pyshim", "overhead"):
            check("time outside the model < 2 ms at ~4k tokens", m, f"{r['overhead_ms']:.1f} ms", r["overhead_ms"] < 2)
        for workload, peer_factor in [("agent", 1.0), ("interleaved-2", 4.0), ("interleaved-4", 4.0)]:
            mine = find(m, "pyshim", workload)
            if not mine:
                continue
            key = "conversation" if workload.startswith("interleaved") else None
            ratio = mine["total_s"] / floor_s(mine["turns"], c, key)
            check(f"{workload}: within 10 % of the model-time floor", m, f"{100 * ratio:.0f} %", ratio <= 1.10)
            if server := find(m, "llama-server", workload):
                x = server["total_s"] / mine["total_s"]
                check(f"{workload}: no slower than llama-server", m, f"{x:.2f}×", x >= 1.0)
            if lcp := find(m, "llama-cpp-python", workload):
                x = lcp["total_s"] / mine["total_s"]
                goal = "no slower than" if peer_factor == 1.0 else f"≥ {peer_factor:.0f}× faster than"
                theirs, ours = lcp["turns"][-1]["n_prompt"], mine["turns"][-1]["n_prompt"]
                if abs(theirs - ours) > 0.1 * ours:  # it rendered another conversation: not the same work
                    check(
                        f"{workload}: {goal} llama-cpp-python",
                        m,
                        f"{x:.2f}× (prompts differ: {theirs} vs {ours} tokens)",
                        None,
                    )
                else:
                    check(f"{workload}: {goal} llama-cpp-python", m, f"{x:.2f}×", x >= peer_factor)
            if workload == "agent" and (off := find(m, "pyshim-reuse-off", workload)):
                x = off["total_s"] / mine["total_s"]
                check("agent: ≥ 3× faster than reuse off", m, f"{x:.2f}×", x >= 3.0)
    if not rows:
        return []
    out = ["## Targets", "", "| goal | model | measured | met |", "|---|---|---:|:---:|"]
    verdict = {True: "yes", False: "**no**", None: "not comparable"}
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
    ap.add_argument("--update", type=Path, help="a saved run whose results for these workloads are replaced")
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
        from pyshim import models

        kept: dict[str, Any] = json.loads(args.update.read_text()) if args.update else {}
        data = {
            "command": kept.get("command") or "python -m bench.peers " + " ".join(sys.argv[1:]),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.platform()}",
            "when": time.strftime("%Y-%m-%d"),
            "llama_cpp_python": "0.3.36",
            "models": args.models,
            "systems": args.systems,
            "reps": args.reps,
            "ceiling": {},
            "results": [],
        }
        if kept:  # a partial rerun: keep the saved ceiling and every result it does not replace
            data.update(models=kept["models"], systems=kept["systems"], reps=kept["reps"], ceiling=kept["ceiling"])
            data["results"] = [r for r in kept["results"] if r["workload"] not in args.workloads]
        for m in args.models:
            path = models.path(m)
            if "pp128_d2048" not in data["ceiling"].get(m, {}):
                data["ceiling"][m] = ceiling(path, args.reps)
            print(f"{m}: llama-bench {data['ceiling'][m]}", flush=True)
            plan = [(s, w) for w in args.workloads for s in args.systems if w != "overhead" or s in OVERHEAD_SYSTEMS]
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
    if args.chart:
        chart(data, args.chart)
        data["chart"] = str(args.chart)
    text = report(data)
    print(text)
    if args.out:
        args.out.write_text(text)
        if not args.from_json:
            args.out.with_suffix(".json").write_text(json.dumps(data, indent=1))
    elif args.update:
        args.update.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
