#!/usr/bin/env python3
"""`make bench-status`: every report in docs/ with the commit it came from and how many library
commits (native/, pyshim/, bench/) it is behind HEAD. A report is read from its provenance line
(bench/common/provenance.py); one without it is "undated", aged from the commit that last wrote it.
Exit status 1 when a report the README cites is more than LIMIT library commits behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ["native", "pyshim", "bench"]
LIMIT = 20


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def behind(commit: str) -> int:
    return int(git("rev-list", "--count", f"{commit}..HEAD", "--", *LIBRARY))


def main() -> int:
    readme = (ROOT / "README.md").read_text()
    stale_cited = []
    print(f"{'report':32} {'from':14} {'behind':>6}  cited")
    for report in sorted((ROOT / "docs").glob("bench-*.md")):
        first = report.read_text().split("\n", 1)[0]
        m = re.search(r"commit=([0-9a-f]+)(\+dirty)?", first)
        if m:
            commit, how = m.group(1), "+dirty" if m.group(2) else ""
        else:
            commit, how = git("log", "-1", "--format=%h", "--", str(report.relative_to(ROOT))) or "HEAD", " undated"
        n = behind(commit)
        cited = f"docs/{report.name}" in readme
        print(f"{report.name:32} {commit[:12] + how:14} {n:>6}  {'yes' if cited else ''}")
        if cited and n > LIMIT and "stale" not in readme.split(f"docs/{report.name}", 1)[1][:400]:
            stale_cited.append(report.name)
    if stale_cited:
        print(
            f"bench-status: the README cites {', '.join(stale_cited)} without saying it is stale "
            f"(more than {LIMIT} library commits behind)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
