"""The report of ``bench.peers``: tables, notes, the verdict on each target and the chart, from
the plain data a run wrote (``python -m bench.peers --from-json`` re-renders it alone).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common.markdown import produced_by
from bench.common.stats import ms_span, p10_p90
from bench.common.systems import THREADS

#: The next-turn workloads' conversation sizes: turns of the scripted session per depth.
OVERHEAD_TURNS = {"1k": 9, "4k": 36, "16k": 145}


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


def attention(result: dict[str, Any]) -> str:
    """The flash-attention setting a system ran with, as llama-bench's -fa takes it."""
    fa = str(result.get("info", {}).get("flash_attn", "auto"))
    return fa if fa in ("on", "off", "auto") else "auto"


def span(r: dict[str, Any], key: str) -> str:
    """ "(min–max)" of a rate's repetitions, where the run recorded them."""
    if f"{key}_range" not in r:
        return ""
    lo, hi = r[f"{key}_range"]
    return f"({lo:.1f}–{hi:.1f})"


#: A run's result for (model, system, workload), if it ran.
Find = Callable[[str, str, str], "dict[str, Any] | None"]


def finder(results: list[dict[str, Any]]) -> Find:
    def find(model: str, system: str, workload: str) -> dict[str, Any] | None:
        return next(
            (r for r in results if r["model"] == model and r["system"] == system and r["workload"] == workload), None
        )

    return find


def report(data: dict[str, Any]) -> str:
    names = ["llama.cpp's ceiling"] + [x for x in data["systems"] if x != "pyshim"]  # what this run ran
    out = [
        "# pyshim beside " + (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]),
        "",
        f"{produced_by(data)}: every table, "
        "the ceiling and the verdicts below come from that run. llama.cpp from the pinned "
        f"llama-cpp-python {data['llama_cpp_python']} source archive for every system; {THREADS} threads, greedy "
        "sampling, one process per (system, model, workload). Ratios are to the row named in the header.",
        "",
    ]
    find = finder(data["results"])

    out += single_table(data, find)
    out += next_turn_table(data, find)
    out += session_tables(data, find)
    if data.get("chart"):
        out += [f"![per-turn time to first token]({Path(data['chart']).name})", ""]
    out += targets(data, find)
    out += notes(data)
    return "\n".join(out)


def single_table(data: dict[str, Any], find: Find) -> list[str]:
    """The single-turn rates beside llama-bench's ceiling."""
    out: list[str] = []
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

    return out


def session_tables(data: dict[str, Any], find: Find) -> list[str]:
    """The agent session and the conversations taking turns, against each system's floor."""
    out: list[str] = []
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
    return out


def upstream_floor(data: dict[str, Any], model: str, size: str) -> dict[str, Any] | None:
    """The better (faster) of plain llama.cpp's two floors at this depth, flash attention on or off:
    what a user who dropped pyshim for llama.cpp itself would wait for, at best."""
    here = data.get("floors", {}).get(model, {}).get(size, {})
    both = [f for k, f in here.items() if k.startswith("upstream-")]
    return min(both, key=lambda f: f["ms"]) if both else None


def next_turn_table(data: dict[str, Any], find: Find) -> list[str]:
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
    cells = [next_turn_row(data, find, m, size, s, r) for m, size, s, r in rows]
    out += [row for row, _ in cells]
    other = any(marked for _, marked in cells)
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


def next_turn_row(data: dict[str, Any], find: Find, m: str, size: str, s: str, r: dict[str, Any]) -> tuple[str, bool]:
    """One system's row of the next-turn table, and whether it did other work than pyshim's."""
    floor = data.get("floors", {}).get(m, {}).get(size, {}).get(attention(r))
    mine = find(m, "pyshim", f"overhead-{size}")
    ratio = f"{r['wall_ms'] / mine['wall_ms']:.3f}" if mine else ""
    n_eval = "n/a" if r.get("n_evaluated") is None else f"{r['n_evaluated']:.0f}"
    walls = r.get("wall_range_ms", [r["wall_ms"]] * 2)
    # a system whose chat format renders another conversation does other work: marked
    mark = " †" if mine and abs(r["n_prompt"] - mine["n_prompt"]) > 0.1 * mine["n_prompt"] else ""
    if floor:
        above = [x - floor["ms"] for x in p10_p90([x["wall_ms"] for x in r["rows"]])]
        f_cell = f"{floor['ms']:.1f} ms ({floor['n_new']} tokens at depth {floor['depth']}, fa {floor['flash_attn']})"
        a_cell = f"**{r['wall_ms'] - floor['ms']:.1f} ms** ({ms_span(above)}){mark}"
    else:
        f_cell, a_cell = "not measured", "not measured" + mark
    up = upstream_floor(data, m, size)
    u_cell, u_ratio = (
        (f"{up['ms']:.1f} ms (fa {up['flash_attn']})", f"**{r['wall_ms'] / up['ms']:.2f}×**")
        if up
        else ("not measured", "")
    )
    row = (
        f"| {m} | ~{size} | {s} | {r['n_prompt']} | {n_eval} | {r['wall_ms']:.1f} ms ({ms_span(walls)}) "
        f"| {ratio} | {f_cell} | {a_cell} | {u_cell} | {u_ratio} |"
    )
    return row, bool(mark)


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
