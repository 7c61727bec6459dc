"""The host a benchmark runs on: how reports name the machine, llama.cpp's own llama-bench (the
engine alone, the floor every system is held to), and a benchmark step in a process of its own.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common.provenance import ROOT
from bench.common.systems import PEERS, THREADS


def machine() -> str:
    """The machine, as the reports name it."""
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.platform()}"


def llama_bench(model: Path, reps: int, *args: str, peers: Path = PEERS) -> list[dict[str, Any]]:
    cmd = [str(peers / "llama-bench"), "-m", str(model), "-t", str(THREADS), "-r", str(reps), "-o", "json", *args]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def batch_ms(row: dict[str, Any]) -> list[float]:
    """One llama-bench result's samples as milliseconds per batch of its prompt tokens, ascending."""
    return sorted(1000 * row["n_prompt"] / ts for ts in row["samples_ts"])


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
