"""On a GPU: generate, and prompt reuse against fresh evaluation, with every layer offloaded.

Runs only where the library was built with a GPU backend (README: "On a GPU") and sees a
device; skipped otherwise. The reuse check is test_reuse's differential sequence, on GPU
handles (reused and fresh alike, so both compute with the same kernels).
"""

from __future__ import annotations

import pytest
from conftest import GEMMA, QWEN, user
from test_reuse import test_random_call_sequences_match_a_fresh_context as reuse_sequence

import pyshim
from pyshim import models


def gpu_devices() -> list[str]:
    with pyshim.Model(models.path("smollm2-135m-instruct"), n_ctx=256) as m:
        return m.stats()["devices"]


pytestmark = pytest.mark.skipif(not gpu_devices(), reason="no GPU: the library has no GPU backend or sees no device")


def test_generate_on_the_gpu() -> None:
    with pyshim.Model(QWEN, n_ctx=2048, temperature=0, n_gpu_layers=-1) as gpu:
        r = gpu.generate(user("What is the capital of France? One word."), max_tokens=8)
        assert "paris" in r["content"].lower()
        assert gpu.stats()["n_gpu_layers"] == -1


@pytest.mark.parametrize(("name", "spec", "words"), [("qwen", QWEN, 25), ("gemma-swa", GEMMA, 110)])
def test_reuse_on_the_gpu_matches_fresh_evaluation(name: str, spec: str, words: int) -> None:
    path = models.path(spec)
    with (
        pyshim.Model(path, n_ctx=4096, temperature=0, n_gpu_layers=-1) as reused,
        pyshim.Model(path, n_ctx=4096, temperature=0, n_gpu_layers=-1) as fresh,
    ):
        reuse_sequence((f"{name}-gpu", reused, fresh, words))
