"""The disk tier (issue 39, items 2 and 3): what a handle's slots held when it closed is restored
by the next handle of the same model file and settings, in this process or another, instead of
evaluated, bit for bit as a fresh evaluation computes it (deterministic handles, the exact
oracle); and a file that is not exactly what this handle would have written is never believed.

Faults: a truncated file, one flipped byte (the CRC), a file of another model (its fingerprint),
of other settings (another directory), of another scope, and a token missing from the file's
token list (the state then holds one more position than the tokens say) are all refused, and the
call computes what a fresh one does. A state computed from a prompt one digit different, filed
under the true prompt's tokens with the CRC made to match (what only a bug in the writer could
produce), is believed, and the exact oracle then sees the difference: it can fail on every
architecture here.
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import GEMMA, ROOT, SMOL, model_path, user
from oracle import GREEDY, largest_difference, text

import pyshim

CASES = [
    ("smollm2", SMOL, 60),
    ("gemma", GEMMA, 110),
    ("mamba", "tiny:mamba", 40),
    ("hybrid", "tiny:hybrid", 40),
    ("qwen35", "tiny:qwen35", 20),
    ("gemma4", "tiny:gemma4", 20),
    ("lfm2", "tiny:lfm2", 20),
]
EXACT = {"n_ctx": 2048, "temperature": 0, "deterministic": True}


def conversation(name: str, words: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A first prompt, and a second that starts with its system message."""
    rng = random.Random(f"disk-{name}")
    system = {"role": "system", "content": "You are a terse assistant, case 1234. " + text(rng, words)}
    return [system, *user(text(rng, words))], [system, *user(text(rng, words))]


def entries(d: Path) -> list[Path]:
    return sorted(d.glob("*/*.elpc"))


def write_first(path: Path, d: Path, first: list[dict[str, Any]], **config: Any) -> None:
    with pyshim.Model(path, cache_dir=str(d), **config) as m:
        m.generate(first, max_tokens=2)


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def case(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path, int, dict[str, Any]]]:
    name, spec, words = request.param
    path = model_path(spec)
    _, second = conversation(name, words)
    with pyshim.Model(path, **EXACT) as fresh:
        yield name, path, words, fresh.generate(second, max_tokens=3, **GREEDY)


def test_a_restored_prefix_computes_what_a_fresh_evaluation_does(case, tmp_path: Path) -> None:
    name, path, words, want = case
    first, second = conversation(name, words)
    write_first(path, tmp_path, first, **EXACT)
    assert len(entries(tmp_path)) == 1
    with pyshim.Model(path, cache_dir=str(tmp_path), **EXACT) as m:
        got = m.generate(second, max_tokens=3, **GREEDY)
    assert got["restored_from_disk"] and got["n_reused"] > 20, got
    assert largest_difference(want, got) == 0, f"{name}: a restored prefix differs from a fresh evaluation"


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = 0x82F63B78 ^ (c >> 1) if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the tier's check; a header is a few KB, so byte by byte will do."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def rewrite(entry: Path, edit) -> None:
    """Apply ``edit`` to the file's token list and make the header's CRC match again (format 4,
    native/disk_cache.cpp: the header ends with the places of the checkpoints, a (length, CRC)
    pair for the state and for each checkpoint, and its own CRC; the sections follow)."""
    raw = entry.read_bytes()
    at = 8
    (n,) = struct.unpack_from("<I", raw, at)  # fingerprint
    at += 4 + n + 1
    for _ in range(2):  # scope, session
        (n,) = struct.unpack_from("<I", raw, at)
        at += 4 + n
    (n_tokens,) = struct.unpack_from("<Q", raw, at)
    tokens = list(struct.unpack_from(f"<{n_tokens}i", raw, at + 8))
    rest = at + 8 + 4 * n_tokens
    (m,) = struct.unpack_from("<I", raw, rest)
    end = rest + 4 + 8 * m + 12 * (m + 1)
    new = edit(tokens)
    head = raw[:at] + struct.pack("<Q", len(new)) + struct.pack(f"<{len(new)}i", *new) + raw[rest:end]
    entry.write_bytes(head + struct.pack("<I", crc32c(head[8:])) + raw[end + 4 :])


def sections(entry: Path) -> tuple[list[int], list[tuple[int, int]]]:
    """The checkpoints' places and each body section's (offset, length): the state's first."""
    raw = entry.read_bytes()
    at = 8
    (n,) = struct.unpack_from("<I", raw, at)
    at += 4 + n + 1
    for _ in range(2):
        (n,) = struct.unpack_from("<I", raw, at)
        at += 4 + n
    (n_tokens,) = struct.unpack_from("<Q", raw, at)
    at += 8 + 4 * n_tokens
    (m,) = struct.unpack_from("<I", raw, at)
    places = list(struct.unpack_from(f"<{m}Q", raw, at + 4))
    at += 4 + 8 * m
    lengths = [struct.unpack_from("<Q", raw, at + 12 * i)[0] for i in range(m + 1)]
    offset = at + 12 * (m + 1) + 4
    spans = []
    for length in lengths:
        spans.append((offset, length))
        offset += length
    assert offset == len(raw)
    return places, spans


def tokens_of(entry: Path) -> list[int]:
    seen: list[int] = []
    rewrite(entry, lambda t: seen.extend(t) or t)
    return seen


def test_the_oracle_sees_a_stale_token_in_a_file_the_tier_believed(case, tmp_path: Path) -> None:
    """A file whose state was computed with one digit of the system prompt changed, under the
    token list of the true prompt: the tier cannot tell (only a writer's bug makes one), and
    the exact oracle must."""
    name, path, words, want = case
    first, second = conversation(name, words)
    write_first(path, tmp_path / "true", first, **EXACT)
    (true,) = entries(tmp_path / "true")
    truth = tokens_of(true)
    other = [{**first[0], "content": first[0]["content"].replace("1234", "1235", 1)}, *first[1:]]
    write_first(path, tmp_path / "other", other, **EXACT)
    (wrong,) = entries(tmp_path / "other")
    assert len(tokens_of(wrong)) == len(truth)  # digits are tokens of their own in these vocabularies
    rewrite(wrong, lambda t: truth)
    true.write_bytes(wrong.read_bytes())
    with pyshim.Model(path, cache_dir=str(tmp_path / "true"), **EXACT) as m:
        got = m.generate(second, max_tokens=3, **GREEDY)
    if not got["restored_from_disk"]:
        pytest.fail(f"{name}: the rewritten file was not used, so the oracle was not tried")
    assert largest_difference(want, got) > 0, f"{name}: a stale restored token changed nothing"


FAULTS = ["truncated", "flipped byte", "missing token", "other model", "other settings", "other scope"]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_file_that_is_not_exactly_ours_is_never_believed(fault: str, tmp_path: Path) -> None:
    path = model_path(SMOL)
    first, second = conversation("faults", 60)
    write_first(path, tmp_path, first, temperature=0)
    (entry,) = entries(tmp_path)
    raw = entry.read_bytes()
    config: dict[str, Any] = {"temperature": 0}
    options: dict[str, Any] = {}
    if fault == "truncated":
        entry.write_bytes(raw[: len(raw) // 2])
    elif fault == "flipped byte":
        entry.write_bytes(raw[:-100] + bytes([raw[-100] ^ 1]) + raw[-99:])
    elif fault == "missing token":
        rewrite(entry, lambda t: t[:-1])
    elif fault == "other model":  # smollm2's file where gemma's handle looks, under gemma's name for it
        write_first(model_path(GEMMA), tmp_path / "g", first, temperature=0)
        (theirs,) = entries(tmp_path / "g")
        theirs.write_bytes(raw)
        path, tmp_path = model_path(GEMMA), tmp_path / "g"
    elif fault == "other settings":
        config["flash_attn"] = "off"
    else:
        options["scope"] = "another"
    with pyshim.Model(path, cache_dir=str(tmp_path), **config) as m:
        got = m.generate(second, max_tokens=3, **options)
        disk = m.stats()["cache"]["disk"]
    assert not got["restored_from_disk"], (fault, got)
    if fault in ("truncated", "flipped byte", "other model"):
        assert disk["rejected"] >= 1, disk
    with pyshim.Model(path, cache_dir=None, **config) as fresh:
        assert fresh.generate(second, max_tokens=3, **options)["message"] == got["message"]


def test_a_restore_reads_and_checks_the_state_and_the_checkpoint_it_starts_from(tmp_path: Path) -> None:
    """A recurrent model's file holds its first call's checkpoints; the next conversation of the
    scope starts from the one where the last message starts, so a flipped byte in a later
    checkpoint, which it never reads, changes nothing, while one in the checkpoint it uses, or in
    the state, makes it refuse the file and compute what a fresh evaluation does."""
    path = model_path("tiny:mamba")
    first, second = conversation("sections", 40)
    write_first(path, tmp_path / "d", first, **EXACT)
    (entry,) = entries(tmp_path / "d")
    raw = entry.read_bytes()
    places, spans = sections(entry)
    assert len(places) >= 2, places
    with pyshim.Model(path, **EXACT) as fresh:
        want = fresh.generate(second, max_tokens=3, **GREEDY)
    for i, (span, restored) in enumerate([(spans[-1], True), (spans[1], False), (spans[0], False)]):
        at = span[0] + span[1] // 2
        d = tmp_path / f"flip{i}"  # a directory each: a handle leaves its own conversation as it closes
        (d / entry.parent.name).mkdir(parents=True)
        (d / entry.parent.name / entry.name).write_bytes(raw[:at] + bytes([raw[at] ^ 0x10]) + raw[at + 1 :])
        with pyshim.Model(path, cache_dir=str(d), **EXACT) as m:
            got = m.generate(second, max_tokens=3, **GREEDY)
            rejected = m.stats()["cache"]["disk"]["rejected"]
        assert got["restored_from_disk"] == restored, (span, got)
        assert rejected == (0 if restored else 1), rejected
        assert largest_difference(want, got) == 0


def test_another_process_restores_what_this_one_left(tmp_path: Path) -> None:
    """The second process's first call starts from the first process's prefix; two processes
    writing the same directory at once leave whole files only."""
    first, second = conversation("processes", 60)
    script = (
        "import sys, pyshim\n"
        "m = pyshim.Model(sys.argv[1], cache_dir=sys.argv[2], temperature=0)\n"
        f"m.generate({first!r}, max_tokens=2)\n"
        "m.close()\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(model_path(SMOL)), str(tmp_path)], cwd=ROOT)
        for _ in range(2)
    ]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    assert len(entries(tmp_path)) == 1 and not list(tmp_path.glob("*/*.tmp*"))
    assert entries(tmp_path)[0].parent.stat().st_mode & 0o077 == 0  # the owner's alone
    with pyshim.Model(model_path(SMOL), cache_dir=str(tmp_path), temperature=0) as m:
        got = m.generate(second, max_tokens=3)
    assert got["restored_from_disk"] and got["n_reused"] > 50, got


def test_the_bound_is_kept_oldest_first(tmp_path: Path) -> None:
    path = model_path(SMOL)
    for i in range(4):
        first, _ = conversation(f"bound-{i}", 200)
        write_first(path, tmp_path, first, temperature=0)
    sizes = [e.stat().st_size for e in entries(tmp_path)]
    assert len(sizes) == 4
    limit_mib = (sum(sizes) - min(sizes) // 2) / 2**20  # room for all but about one
    first, _ = conversation("bound-4", 200)
    write_first(path, tmp_path, first, temperature=0, disk_cache_mib=max(1, int(limit_mib)))
    assert sum(e.stat().st_size for e in entries(tmp_path)) <= max(1, int(limit_mib)) * 2**20
    assert len(entries(tmp_path)) < 5
