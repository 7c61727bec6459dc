"""Same messages, same logits: with "deterministic" a handle's output does not depend on what it
ran before. Random call sequences (the reuse test's operations, three conversations on two slots
so that conversations are evicted to host memory and restored, a failed call, a streamed call
whose prompt is evaluated in chunks, and the handle closed and opened again on the same disk tier,
so that the next call starts from a file: issue 54) on a handle with an odd n_batch, each call compared with a
fresh handle evaluating the same messages in one go: every generated token and its top log
probabilities must be equal bit for bit. The same sequence without the option finds differences,
so the comparison can fail."""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from conftest import GEMMA, QWEN, SMOL, WEATHER_TOOL, model_path, needs_patch, user
from oracle import GREEDY, change, largest_difference, text

import pyshim

# (name, model, words per filler message): long enough that prompts pass gemma's 512-token window.
CASES = [
    ("qwen", QWEN, 25),
    ("smollm2", SMOL, 40),
    ("gemma", GEMMA, 110),
    ("mamba", "tiny:mamba", 40),
    ("hybrid", "tiny:hybrid", 40),
    ("gemma4", "tiny:gemma4", 20),  # interleaved sliding window (32 tokens) and global layers
    ("qwen35", "tiny:qwen35", 20),  # Gated DeltaNet and attention layers
    ("lfm2", "tiny:lfm2", 20),  # short convolutions and attention layers
]
OPS = ["append", "tool", "append", "reopen", "edit", "stream", "append", "drop", "fail", "reopen", "append", "tool"]


def call(m: pyshim.Model, conv: list[dict[str, Any]], max_tokens: int, **options: Any) -> dict[str, Any]:
    return m.generate(conv, [WEATHER_TOOL], max_tokens=max_tokens, **GREEDY, **options)


def run_sequence(spec: str, words: int, deterministic: bool, seed: str) -> list[tuple[int, str, float, int, bool]]:
    """(step, op, largest difference against a fresh handle, tokens reused, restored from disk)
    for each call."""
    path = model_path(spec)
    rng = random.Random(seed)
    config = {"n_ctx": 2048, "temperature": 0, "deterministic": deterministic}
    disk_dir = tempfile.TemporaryDirectory(prefix="determinism-disk-")  # removed after the handle closes
    disk = disk_dir.name
    handle = pyshim.Model(path, n_seq=2, n_batch=61, cache_dir=disk, **config)
    with (
        disk_dir,
        contextlib.closing(_Closer(lambda: handle)),
        pyshim.Model(path, cache_dir=None, **config) as fresh,
    ):
        convs = [
            [{"role": "system", "content": f"Conversation {i}. " + text(rng, words)}, *user(text(rng, words))]
            for i in range(3)
        ]
        out: list[tuple[int, str, float, int, bool]] = []
        for step, op in enumerate(OPS):
            i = rng.randrange(3)  # three conversations on two slots: evictions and host restores
            if op == "reopen":  # what the slots held goes to disk; the next call restores it
                handle.close()
                handle = pyshim.Model(path, n_seq=2, n_batch=61, cache_dir=disk, **config)
            conv = change(rng, convs[i], op, step, words)
            if op == "fail":
                with pytest.raises(pyshim.ShimError, match="test hook"):
                    handle.generate(conv, max_tokens=2, _test={"fail_after_prefill": True})
            n = rng.randint(2, 8)
            if op == "stream":  # a streamed prompt is evaluated in n_batch chunks as it goes
                with handle.stream(conv, [WEATHER_TOOL], max_tokens=n, **GREEDY) as s:
                    for _ in s:
                        pass
                r = s.result
            else:
                r = call(handle, conv, n)
            f = call(fresh, conv, n, cache_prompt=False)
            assert r is not None and f["n_reused"] == 0
            out.append((step, op, largest_difference(f, r), r["n_reused"], r["restored_from_disk"]))
            convs[i] = [*conv, r["message"], *user(text(rng, words // 2))]
        return out


class _Closer:
    """Closes whatever handle the sequence holds when it ends (it is replaced on "reopen")."""

    def __init__(self, current: Callable[[], pyshim.Model]) -> None:
        self.current = current

    def close(self) -> None:
        self.current().close()


# Without ggml-cpu-use-ref-no-sgemm "deterministic" is refused for every model here (test_patches
# checks the refusal); the rest of this file runs against the unpatched library too.
@needs_patch("ggml-cpu-use-ref-no-sgemm")
@pytest.mark.parametrize(("name", "spec", "words"), CASES, ids=[c[0] for c in CASES])
def test_deterministic_calls_equal_a_fresh_handle_bit_for_bit(name: str, spec: str, words: int) -> None:
    steps = run_sequence(spec, words, deterministic=True, seed=f"determinism-{name}")
    differing = [s for s in steps if s[2] != 0.0]
    assert not differing, f"{name}: (step, op, max |Δlogprob|, n_reused) that differ: {differing}"
    assert sum(s[3] for s in steps) > 0, "the sequence must reuse cached prefixes to prove anything"
    assert any(s[4] and s[3] > 0 for s in steps), f"{name}: no call started from the disk tier: {steps}"


def test_without_the_option_the_same_sequence_differs() -> None:
    """The comparison can fail: default kernels round differently for other batch shapes."""
    steps = run_sequence(SMOL, 40, deterministic=False, seed="determinism-smollm2")
    assert any(s[2] != 0.0 for s in steps), steps


@needs_patch("ggml-cpu-use-ref-no-sgemm")
def test_deterministic_settles_what_it_needs_and_refuses_what_breaks_it() -> None:
    path = model_path(GEMMA)
    with pyshim.Model(path, n_ctx=512, deterministic=True) as m:
        stats = m.stats()
        assert (stats["deterministic"], stats["flash_attn_in_use"], stats["swa_full"]) == (True, True, True)
    for bad, why in [
        ({"flash_attn": "off"}, "needs flash attention"),
        ({"swa_full": False}, 'needs "swa_full": true'),
        ({"n_gpu_layers": 1}, "only kept on the CPU"),
        ({"rpc": ["127.0.0.1:1"]}, "only kept on the CPU"),
    ]:
        with pytest.raises(pyshim.ModelLoadError, match=why):
            pyshim.Model(path, n_ctx=512, deterministic=True, **bad)
