"""Where a benchmark report came from: the commit, the date, the command and the host.

Every report in docs/ opens with this line (``stamp``), so that a reader can tell how old its
figures are; ``scripts/bench_status.py`` (``make bench-status``) reads it back and counts the
library commits (native/, pyshim/, bench/) the report is behind HEAD.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- provenance:"  # the machine-readable part, first line of every report


def commit() -> str:
    """HEAD's short hash, with "+dirty" when the library's files differ from it."""

    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "native", "pyshim", "bench")
    return head + ("+dirty" if dirty else "")


def cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def stamp(command: str) -> str:
    """Two lines for the top of a report: a comment tools read, and the same said for people."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    c = commit()
    host = f"{cpu()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    return f"{MARK} commit={c} date={when} -->\n_From commit `{c}`, {when}, `{command}`, on {host}._\n\n"


def args_command(module: str) -> str:
    """The command line that produced a report, as it was run."""
    return " ".join(["python -m", module, *sys.argv[1:]])


def publish(text: str, out: str | Path | None, module: str) -> None:
    """Print a report, and write it to ``out`` (if given) under its provenance stamp."""
    print(text)
    if out:
        Path(out).write_text(stamp(args_command(module)) + text)
