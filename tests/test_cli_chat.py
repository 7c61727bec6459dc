"""``pyshim chat`` as a person uses it (issue 57, item 8): commands are not sent to the model,
the way out is said, a cut reply is marked, and a full context drops the oldest turns, saying
so, instead of ending the session."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, SMOL


def chat(stdin: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyshim", "chat", "--model", SMOL, "--temperature", "0", *flags],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_commands_the_exit_hint_and_the_cut_marker() -> None:
    p = chat("/help\nSay hello.\n/clear\n/frobnicate\nSay hello.\n/exit\nnever sent\n", "--max-tokens", "2")
    assert p.returncode == 0, p.stderr
    assert "Ctrl-D or /exit to quit" in p.stderr and "/clear" in p.stderr
    assert "[conversation cleared]" in p.stderr and "unknown command /frobnicate" in p.stderr
    assert p.stderr.count("[cut at --max-tokens 2]") == 2
    assert "never sent" not in p.stdout


def test_a_full_context_drops_the_oldest_turns_and_goes_on() -> None:
    turns = "".join(f"Please repeat these words back to me: {'alpha beta gamma delta ' * 12}\n" for _ in range(10))
    p = chat(turns + "/exit\n", "--n-ctx", "384", "--max-tokens", "8")
    assert p.returncode == 0, p.stderr
    assert "oldest turn was dropped" in p.stderr or "older turns go" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
