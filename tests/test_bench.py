"""A tiny run of the benchmark harness, so that it cannot rot (benchmarks themselves are not tests)."""

from __future__ import annotations

from conftest import SMOL

import pyshim
from bench.agent_session import conversation, markdown, replay
from bench.peers import WORKLOADS, run_workload
from bench.peers_report import floor_s, report
from pyshim import models


def test_agent_session_harness_smoke(smol: pyshim.Model) -> None:
    prompts = conversation(3)
    assert [len(p) for p in prompts] == [4, 8, 12]
    assert all(prompts[i] == prompts[i + 1][: len(prompts[i])] for i in range(2))  # each turn extends the last
    on = replay(smol, prompts, reuse=True)
    off = replay(smol, prompts, reuse=False)
    assert [r["turn"] for r in on] == [1, 2, 3]
    assert on[2]["n_reused"] > 0 and off[2]["n_reused"] == 0
    assert on[2]["n_prompt"] == off[2]["n_prompt"]
    table = markdown("smol", on, off)
    assert table.count("\n| ") == 4 and "faster" in table


def test_peer_benchmark_harness_smoke() -> None:
    """Every pyshim workload of bench.peers, tiny, then the report and its floor arithmetic.
    The peers themselves (llama-bench, llama-server, llama-cpp-python) are built by `make
    bench`, not by `make test`."""
    results = {}
    for workload in WORKLOADS:
        r = run_workload("pyshim", models.path(SMOL), workload, reps=1, quick=True)
        r["model"] = "smol"
        results[workload] = r
    single, agent = results["single"], results["agent"]
    inter2, inter4 = results["interleaved-2"], results["interleaved-4"]
    assert single["n_prompt"] > 50 and single["prefill_tps"] > 0 and single["decode_tps"] > 0
    for size in ("1k", "4k", "16k"):
        over = results[f"overhead-{size}"]
        assert over["wall_range_ms"][0] <= over["wall_ms"] <= over["wall_range_ms"][1]
        assert 0 < over["n_evaluated"] < over["n_prompt"]  # the conversation is cached
        assert 0 < over["own_model_ms"] < over["wall_ms"]  # kept as detail only
        assert 0 < over["template_ms"] <= over["prepare_ms"] < over["wall_ms"] - over["own_model_ms"]
        assert 0 <= over["tokenize_ms"] <= over["prepare_ms"] and 0 <= over["sampler_ms"] <= over["prepare_ms"]
    assert len(agent["turns"]) == 3 and agent["turns"][2]["n_evaluated"] < agent["turns"][2]["n_prompt"]
    assert [(t["conversation"], t["turn"]) for t in inter2["turns"]] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert len(inter4["turns"]) == 8 and all(t["n_gen"] >= 1 for t in inter4["turns"])
    # The floor counts each conversation's tokens once: its first prompt, then what each turn adds.
    ceiling = {"pp512": 100.0, "tg128": 10.0}
    rows = [
        {"conversation": 0, "n_prompt": 100, "n_gen": 1},
        {"conversation": 1, "n_prompt": 50, "n_gen": 1},
        {"conversation": 0, "n_prompt": 130, "n_gen": 1},
    ]
    assert abs(floor_s(rows, ceiling, "conversation") - (1.8 + 0.3)) < 1e-9
    ceil = {"pp512": 1000.0, "pp512_sd": 1.0, "tg128": 100.0, "tg128_sd": 1.0}
    text = report(
        {
            "command": "test",
            "machine": "here",
            "when": "now",
            "llama_cpp_python": "0.3.36",
            "models": ["smol"],
            "systems": ["pyshim"],
            "reps": 1,
            "ceiling": {"smol": ceil},
            "results": list(results.values()),
            "floors": {"smol": {"4k": {"auto": {"n_new": 20, "depth": 100, "flash_attn": "auto", "ms": 0.5}}}},
        }
    )
    assert "| smol | pyshim |" in text and "model-time floor" in text and "next turn, by the wall" in text
    assert "outside the model" not in text  # no system's own split is a yardstick
    # the yardstick: the wall per call, and above the floor llama-bench measured for the same tokens
    four = results["overhead-4k"]
    row = next(line for line in text.splitlines() if line.startswith("| smol | ~4k | pyshim |"))
    assert f"{four['wall_ms']:.1f} ms" in row and f"**{four['wall_ms'] - 0.5:.1f} ms**" in row
    assert "| smol | ~16k | pyshim |" in text and "not measured" in text


def test_determinism_benchmark_smoke() -> None:
    """bench.determinism end to end, tiny: both modes measured and the report's ratio written."""
    from bench.determinism import markdown, measure

    r = measure(SMOL, reps=1)
    assert all(
        len(r[mode][what]) == 1 and r[mode][what][0] > 0 for mode in ("off", "on") for what in ("prefill", "decode")
    )
    assert "| smollm2-135m-instruct |" in markdown({SMOL: r}, 1, "0.0")


def test_door_benchmark_smoke() -> None:
    """bench.door end to end, tiny: a real server, two turns, one token each."""
    from bench.door import markdown, run, summary

    rows = run(SMOL, turns=2, max_tokens=1)
    assert [r["turn"] for r in rows] == [1, 2]
    assert all(r["door_wall"] > 0 and r["direct_wall"] > 0 and r["door_ttft"] > 0 for r in rows)
    s = summary(rows)
    assert set(s) == {"wall", "ttft", "outside", "raw", "min", "min_ttft"} and s["outside"]["door_ms"] > 0
    assert all(r["door_raw_outside"] > 0 and r["door_min_outside"] > 0 for r in rows)
    assert all(r["door_min_handler"] is not None for r in rows)  # the door's Server-Timing header
    assert markdown(SMOL, 2, 1, s).count("\n| ") == 7


def test_concurrent_benchmark_harness_smoke() -> None:
    """bench.concurrent's pyshim modes, tiny, in this process, then its report: a row per mode
    and the pyshim ratios. Its llama-server mode needs `make peers`, not `make test`."""
    from bench.concurrent import PYSHIM_MODES, report, run_mode

    results = [
        {**run_mode(mode, "agent", models.path(SMOL), rep=0, quick=True), "model": "smol"} for mode in PYSHIM_MODES
    ]
    results.append({**run_mode("pyshim-concurrent", "answers", models.path(SMOL), rep=0, quick=True), "model": "smol"})
    assert all(t["n_gen"] == 8 for t in results[-1]["turns"])  # answers: a fixed length, end tokens ignored
    by_mode = {r["mode"]: r for r in results if r["workload"] == "agent"}
    together, in_turn = by_mode["pyshim-concurrent"], by_mode["pyshim-serialized"]
    assert [(t["conversation"], t["turn"]) for t in in_turn["turns"]] == [(c, t) for t in (0, 1) for c in range(4)]
    assert sorted((t["conversation"], t["turn"]) for t in together["turns"]) == sorted(
        (c, t) for t in (0, 1) for c in range(4)
    )
    assert by_mode["pyshim-alone-nseq1"]["n_seq"] == 1 and by_mode["pyshim-alone-nseq4"]["n_turns"] == 2
    assert all(r["wall_s"] > 0 and r["decode_tps"] > 0 and r["n_gen"] >= r["n_turns"] for r in results)
    assert all(r["step_tps"] > 0 and r["engine"]["decode_tokens"] > 0 for r in results)  # el_stats "evaluation"
    for t in together["turns"]:  # each session kept its slot: its second turn reuses its first
        assert t["turn"] == 0 or t["n_evaluated"] < t["n_prompt"]
    text = report(
        {
            "command": "test",
            "machine": "here",
            "when": "now",
            "threads": 2,
            "models": ["smol"],
            "modes": PYSHIM_MODES,
            "reps": 1,
            "n_sessions": 4,
            "workloads": {"agent": (4, False), "answers": (8, True)},
            "n_ctx": 4096,
            "results": results,
        }
    )
    assert all(f"| smol | agent | {mode} |" in text for mode in PYSHIM_MODES)
    assert "| smol | answers | pyshim-concurrent |" in text
    assert "| smol | agent | pyshim-concurrent / pyshim-serialized |" in text
    assert "| smol | agent | pyshim-alone-nseq4 / pyshim-alone-nseq1 |" in text and "llama-server-np4 /" not in text


def test_decode_bench_measures_every_mode() -> None:
    """bench.decode's pyshim side, one repetition on the smallest model, and its report (the tg128
    figure given here is only what the report divides by; make bench-decode measures it)."""
    from bench.decode import MODES, TWO_HANDLES, measure, report

    res = measure(SMOL, 1)
    assert set(res["rates"]) == {*MODES, TWO_HANDLES} and all(r[0] > 0 for r in res["rates"].values())
    res["tg128"] = {"mean": 100.0, "range": [99.0, 101.0]}
    text = report({"command": "python -m bench.decode", "machine": "here", "reps": 1, "models": {SMOL: res}})
    assert text.count("| pyshim, ") == len(MODES) + 1 and "llama-bench tg128" in text


def test_patches_benchmark_smoke() -> None:
    """bench.patches' worker and report on the library under test (the run itself compares two builds)."""
    from bench.patches import section, worker

    one = worker(SMOL, turns=2, calls=2)
    assert len(one["next turn"]) == 2 and len(one["decode"]) == 3
    assert all(s["wall"] >= s["ms_prepare"] > 0 for s in one["next turn"])
    text = "\n".join(section(SMOL, {"patched": one, "unpatched": one}))
    assert "| wall |" in text and "1.00×" in text
