"""A tiny run of the benchmark harness, so that it cannot rot (benchmarks themselves are not tests)."""

from __future__ import annotations

import pyshim
from bench.agent_session import conversation, markdown, replay


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
