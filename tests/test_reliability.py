"""Reliability: a lost device kills the handle cleanly, and repeated use does not leak."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from conftest import SMOL, user

import pyshim
from pyshim import models
from pyshim._lib import lib


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_device_loss_makes_the_handle_dead(qwen_path: Path) -> None:
    m = pyshim.Model(qwen_path, n_ctx=512)
    with pytest.raises(pyshim.ShimError, match="device may be lost"):
        m.generate(user("hi"), max_tokens=4, _test={"device_lost": True})
    for _ in range(2):
        with pytest.raises(pyshim.ShimError, match="handle is dead"):
            m.generate(user("hi"), max_tokens=4)
    with pytest.raises(pyshim.ShimError, match="handle is dead"):
        m.stats()
    assert lib().el_reset(m.handle) == -1
    assert lib().el_close(m.handle) == 0  # frees what it can, never touches the failed backend
    m._handle = None
    with pyshim.Model(qwen_path, n_ctx=512) as fresh:  # the process goes on working
        assert fresh.generate(user("Say OK."), max_tokens=3)["n_decoded"] >= 1


@pytest.mark.parametrize("n_calls", [600])
def test_many_generate_calls_keep_rss_flat(n_calls: int) -> None:
    with pyshim.Model(models.path(SMOL), n_ctx=512, temperature=0) as m:
        for i in range(100):  # warm up allocators and caches
            m.generate(user(f"Say {i}."), max_tokens=1)
        gc.collect()
        before = rss_bytes()
        for i in range(n_calls):
            m.generate(user(f"Say {i % 50}."), max_tokens=2, logprobs=True, top_logprobs=3)
        gc.collect()
        after = rss_bytes()
    assert (after - before) / before < 0.02, f"RSS {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB"


def test_open_close_cycles_keep_rss_flat() -> None:
    path = models.path(SMOL)
    for _ in range(3):
        pyshim.Model(path, n_ctx=256).close()
    gc.collect()
    before = rss_bytes()
    for _ in range(20):
        m = pyshim.Model(path, n_ctx=256)
        m.generate(user("hi"), max_tokens=1)
        m.close()
    gc.collect()
    after = rss_bytes()
    assert (after - before) / before < 0.02, f"RSS {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB"
