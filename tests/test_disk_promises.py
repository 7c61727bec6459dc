"""The disk tier keeps el_shim.h's promises (issue 54): a conversation restored turn by turn from
files computes what a fresh handle does on every memory layout (Gemma 4's window of 32 among
them: a restored state holds only the window, so trimming it back was silently wrong); what
forget, forget_scope and reset name is gone from disk too; another model file, at the same size
and mtime, never reads the entries; an existing directory keeps its mode; and a write past
RLIMIT_FSIZE neither kills the process nor leaves a file.

Each test fails on the library before the change: the turn-by-turn test on gemma4 (a token
differs from the fourth turn on), the forget tests (the next call restored 478 of 486 tokens),
the model-identity test (the entries were read), the mode test (1777 became 0700), the RLIMIT
test (the process died of SIGXFSZ, exit 153).
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import GEMMA, ROOT, SMOL, model_path, needs_patch, user
from oracle import GREEDY, KL_BOUND, divergence, largest_difference, text

import pyshim

# Every memory layout docs/reuse.md lists, on deterministic handles (the exact oracle).
LAYOUTS = [
    ("smollm2", SMOL, 30),
    ("gemma", GEMMA, 40),
    ("gemma4", "tiny:gemma4", 15),
    ("mamba", "tiny:mamba", 20),
    ("hybrid", "tiny:hybrid", 20),
    ("qwen35", "tiny:qwen35", 15),
    ("lfm2", "tiny:lfm2", 15),
]
EXACT = {"n_ctx": 2048, "temperature": 0, "deterministic": True}


def entries(d: Path) -> list[Path]:
    return sorted(d.glob("*/*.elpc"))


@needs_patch("ggml-cpu-use-ref-no-sgemm")
@pytest.mark.parametrize(("name", "spec", "words"), LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_a_conversation_restored_from_disk_turn_by_turn_equals_a_fresh_handle(
    name: str, spec: str, words: int, tmp_path: Path
) -> None:
    """The issue's scenario: a conversation grows on one handle; after each call a second handle
    of the same file and settings answers the same messages, starting from what the one before it
    left on disk, and a third, with no disk tier, answers them fresh."""
    path = model_path(spec)
    rng = random.Random(f"disk-turns-{name}")
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse. " + text(rng, words * 2)}]
    restored = []
    with pyshim.Model(path, cache_dir=str(tmp_path), **EXACT) as live:
        for turn in range(4):
            msgs.extend(user(text(rng, words)))
            mine = live.generate(msgs, max_tokens=4, **GREEDY)
            with pyshim.Model(path, cache_dir=str(tmp_path), **EXACT) as later:
                got = later.generate(msgs, max_tokens=4, **GREEDY)
            with pyshim.Model(path, cache_dir=None, **EXACT) as fresh:
                want = fresh.generate(msgs, max_tokens=4, **GREEDY)
            assert largest_difference(want, mine) == 0, f"{name} turn {turn}: the live handle differs"
            assert largest_difference(want, got) == 0, (
                f"{name} turn {turn}: restored from disk ({got['n_reused']} tokens) differs from fresh"
            )
            restored.append(got["restored_from_disk"] and got["n_reused"] > 0)
            msgs.append({"role": "assistant", "content": mine["content"] or "ok"})
    assert sum(restored) >= 2, f"{name}: the later handles did not start from the disk tier: {restored}"


# The windowed sliding-window caches (swa_full false), where "deterministic" is refused: the
# same scenario under the KL oracle (docs/reuse.md), which sees gross damage such as a window
# that lost what the next position attends to.
WINDOWED = [("gemma-swa", GEMMA, 60), ("gemma4-swa", "tiny:gemma4", 15)]


@pytest.mark.parametrize(("name", "spec", "words"), WINDOWED, ids=[c[0] for c in WINDOWED])
def test_a_windowed_conversation_restored_from_disk_stays_within_the_kl_bound(
    name: str, spec: str, words: int, tmp_path: Path
) -> None:
    path = model_path(spec)
    config = {"n_ctx": 2048, "temperature": 0, "swa_full": False}
    rng = random.Random(f"disk-windowed-{name}")
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse. " + text(rng, words * 2)}]
    restored = []
    with pyshim.Model(path, cache_dir=None, **config) as fresh:
        for turn in range(4):
            msgs.extend(user(text(rng, words)))
            with pyshim.Model(path, cache_dir=str(tmp_path), **config) as later:
                d, got = divergence(later, fresh, msgs, max_tokens=4)
            assert d < KL_BOUND, f"{name} turn {turn}: KL {d:.4f} (n_reused {got['n_reused']}/{got['n_prompt']})"
            restored.append(got["restored_from_disk"] and got["n_reused"] > 0)
            msgs.append({"role": "assistant", "content": got["content"] or "ok"})
    assert sum(restored) >= 2, f"{name}: the later handles did not start from the disk tier: {restored}"


def _conversation(words: int = 60) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random("disk-forget")
    system = {"role": "system", "content": "You are a terse assistant. " + text(rng, words)}
    return [system, *user(text(rng, words))], [system, *user(text(rng, words))]


FORGETS = {
    "reset": lambda m: m.reset(),
    "forget": lambda m: m.forget("s1"),
    "forget_scope session": lambda m: m.forget("s1", scope="t"),
    "forget_scope whole": lambda m: m.forget(scope="t"),
}


@pytest.mark.parametrize("how", list(FORGETS))
def test_what_forget_and_reset_name_is_gone_from_disk(how: str, tmp_path: Path) -> None:
    first, second = _conversation()
    scoped = how.startswith("forget_scope")
    opts: dict[str, Any] = {"session": "s1", **({"scope": "t"} if scoped else {})}
    # The neighbour is in another scope, except for the whole scope's forget: within a scope a
    # session may start from another's prefix, which would hide whether its own file went.
    other: dict[str, Any] = {"session": "s2", "scope": "t" if how == "forget_scope whole" else "u"}
    path = model_path(SMOL)
    with pyshim.Model(path, cache_dir=str(tmp_path), n_seq=2, temperature=0) as m:
        m.generate(first, max_tokens=2, **opts)
        m.generate(first, max_tokens=2, **other)
    assert len(entries(tmp_path)) == 2
    with pyshim.Model(path, cache_dir=str(tmp_path), n_seq=2, temperature=0) as m:
        FORGETS[how](m)
        got = m.generate(second, max_tokens=2, **opts)
        assert not got["restored_from_disk"] and got["n_reused"] == 0, got
        kept = m.generate(second, max_tokens=2, **other)
    # a session's own forget leaves its neighbour's file; reset and a whole scope take both
    assert kept["restored_from_disk"] == (how in ("forget", "forget_scope session")), kept


def _flip_weights(src: Path, dst: Path) -> None:
    """A copy of the model with three bytes of its last tensor data changed: the same size,
    and (set below) the same mtime."""
    raw = bytearray(src.read_bytes())
    for k in (1, 2, 3):
        raw[-4096 * k] ^= 0x40
    dst.write_bytes(bytes(raw))
    st = src.stat()
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_another_model_file_never_reads_the_entries(tmp_path: Path) -> None:
    path = model_path("tiny:gemma4")
    first, second = _conversation(15)
    with pyshim.Model(path, cache_dir=str(tmp_path / "c"), temperature=0) as m:
        m.generate(first, max_tokens=2)
    assert len(entries(tmp_path / "c")) == 1
    same = tmp_path / "same.gguf"
    shutil.copy2(path, same)  # the same bytes elsewhere: the same model
    with pyshim.Model(same, cache_dir=str(tmp_path / "c"), temperature=0) as m:
        assert m.generate(second, max_tokens=2)["restored_from_disk"]
    edited = tmp_path / "edited.gguf"
    _flip_weights(path, edited)
    assert edited.stat().st_size == path.stat().st_size and edited.stat().st_mtime_ns == path.stat().st_mtime_ns
    with pyshim.Model(edited, cache_dir=str(tmp_path / "c"), temperature=0) as m:
        got = m.generate(second, max_tokens=2)
    assert not got["restored_from_disk"], "a model with other weights restored the original's prefix"
    # the edit in place of a file whose digest was remembered: its ctime moved, so it is digested again
    raw = bytearray(same.read_bytes())
    raw[-4096] ^= 0x40
    st = same.stat()
    same.write_bytes(bytes(raw))
    os.utime(same, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pyshim.Model(same, cache_dir=str(tmp_path / "c"), temperature=0) as m:
        assert not m.generate(second, max_tokens=2)["restored_from_disk"]


@pytest.mark.parametrize("mode", [0o1777, 0o2775, 0o755])
def test_an_existing_directory_keeps_its_mode_and_a_new_one_is_private(mode: int, tmp_path: Path) -> None:
    first, _ = _conversation()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with pyshim.Model(model_path(SMOL), cache_dir=str(shared), temperature=0) as m:
        m.generate(first, max_tokens=2)
    assert stat.S_IMODE(shared.stat().st_mode) == mode
    (entry,) = entries(shared)
    assert entry.parent.stat().st_mode & 0o077 == 0  # created by the tier: private (setgid may be inherited)
    fresh = tmp_path / "a" / "b"
    with pyshim.Model(model_path(SMOL), cache_dir=str(fresh), temperature=0) as m:
        m.generate(first, max_tokens=2)
    assert fresh.stat().st_mode & 0o077 == 0


def test_a_write_past_the_file_size_limit_leaves_nothing_and_kills_nobody(tmp_path: Path) -> None:
    """RLIMIT_FSIZE below an entry's size: the write fails with EFBIG instead of SIGXFSZ ending
    the process in el_close; no file and no temporary file is left, and the caller's own
    handling of the signal is untouched (it still has the default disposition afterwards)."""
    first, _ = _conversation()
    script = (
        "import resource, signal, sys, pyshim\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # as in a C program (Python ignores it)\n"
        "m = pyshim.Model(sys.argv[1], cache_dir=sys.argv[2], temperature=0)\n"
        f"m.generate({first!r}, max_tokens=2)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))\n"
        "m.close()\n"
        "assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_DFL\n"
        "print('closed')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(model_path(SMOL)), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "closed" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
    assert not entries(tmp_path) and not list(tmp_path.glob("*/*.tmp*"))
