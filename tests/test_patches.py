"""Every patch to llama.cpp is optional (native/patches/, docs/patches.md).

The build applies each patch that applies and says which did not; one that does not apply (say,
upstream changed the lines it edits) costs itself and the patches written on top of it, never
the build. The library says what it was built with (``el_build_info``), and without a patch that
changes behaviour rather than speed it refuses the feature that patch makes safe, with an error
that names the patch. ``make test-nopatch`` runs this file, the render and tokenizer exactness
suites and the tool-grammar suite against a library built with no patch at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SMOL, has_patch, model_path

import pyshim

PATCHES = sorted(p.name.removesuffix(".patch") for p in (ROOT / "native" / "patches").glob("*.patch"))
FETCH = ROOT / "scripts" / "fetch_llama.py"


def test_the_library_says_which_patches_it_was_built_with() -> None:
    info = pyshim.build_info()
    assert info["abi_version"] == pyshim.version().split()[0]
    assert sorted(info["patches"] + info["patches_missing"]) == PATCHES
    if not os.environ.get("PYSHIM_LIB"):  # the default build: the pinned tree takes every patch
        assert info["patches_missing"] == [], info
        assert info["llama_cpp"] == "0c1e570"
        assert info["losses"] == {}
    for name in ("ggml-rpc-no-abort", "ggml-cpu-use-ref-no-sgemm"):
        assert (name in info["losses"]) == (name in info["patches_missing"])


def break_first_removed_line(patch: Path, tree: Path) -> Path:
    """Change, in `tree`, the first line the patch removes (a removed line must match exactly,
    where context may fuzz): the smallest realistic upstream drift. Returns the file changed."""
    target = None
    for line in patch.read_text().splitlines():
        if line.startswith("+++ "):
            target = tree / line[4:].split("\t")[0].split("/", 1)[1]
        elif line.startswith("-") and not line.startswith("---") and line[1:].strip() and target is not None:
            text = target.read_text()
            assert line[1:] in text
            target.write_text(text.replace(line[1:], line[1:] + " /* upstream moved on */", 1))
            return target
    raise AssertionError(f"{patch.name} removes no line")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned tree with no patch: build-nopatch's when it was built, else unpacked afresh."""
    built = ROOT / "build-nopatch" / "vendor" / "llama.cpp"
    if (built / ".pyshim-patches").exists() and not (built / ".pyshim-patches").read_text().strip():
        return built
    dest = tmp_path_factory.mktemp("pristine") / "llama.cpp"
    subprocess.run([sys.executable, str(FETCH), "--dest", str(dest), "--patches", "none"], check=True)
    return dest


def test_a_patch_that_does_not_apply_costs_itself_and_what_is_built_on_it(pristine: Path, tmp_path: Path) -> None:
    """Upstream drift under two patches: the first patch of the render chain and the RPC one.
    The rest apply; the render chain's later patches are skipped (written on top of it); the
    files of the refused patches are left exactly as the source had them; the run succeeds."""
    source = tmp_path / "upstream"
    shutil.copytree(pristine, source, symlinks=True)
    rpc = break_first_removed_line(ROOT / "native" / "patches" / "ggml-rpc-no-abort.patch", source)
    break_first_removed_line(ROOT / "native" / "patches" / "common-chat-analyse-once.patch", source)
    drifted = rpc.read_text()
    dest = tmp_path / "tree"
    r = subprocess.run(
        [sys.executable, str(FETCH), "--source", str(source), "--dest", str(dest)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    applied = set((dest / ".pyshim-patches").read_text().split())
    refused = {line.split(": ")[2].removesuffix(".patch") for line in r.stderr.splitlines() if "not applied:" in line}
    chain = {"common-chat-analyse-once", "common-render-faster", "common-render-memo-loops"}
    chain |= {"common-return-parser-object"}
    assert chain | {"ggml-rpc-no-abort"} <= refused, r.stderr
    assert {
        "ggml-cpu-fa-blocked-decode",
        "ggml-cpu-use-ref-no-sgemm",
        "llama-vocab-special-prefilter",
        "common-sampling-grammar-cache",
        "common-chat-date-localtime-r",
    } <= applied
    assert applied | refused == set(PATCHES) and not applied & refused
    assert "needs common-chat-analyse-once.patch" in r.stderr  # why the chain's next one was skipped
    assert (dest / "ggml" / "src" / "ggml-rpc" / "ggml-rpc.cpp").read_text() == drifted  # nothing half-applied
    assert f"{len(applied)} of {len(PATCHES)} patches applied" in r.stdout


@pytest.mark.skipif(has_patch("ggml-rpc-no-abort"), reason="the library carries ggml-rpc-no-abort")
def test_without_the_rpc_patch_rpc_is_refused_not_an_abort_waiting_to_happen() -> None:
    with pytest.raises(pyshim.ShimError, match="ggml-rpc-no-abort patch"):
        pyshim.Model(model_path(SMOL), rpc=["127.0.0.1:1"])


@pytest.mark.skipif(has_patch("ggml-cpu-use-ref-no-sgemm"), reason="the library carries ggml-cpu-use-ref-no-sgemm")
def test_without_the_sgemm_patch_deterministic_is_refused_naming_the_type() -> None:
    with pytest.raises(pyshim.ShimError, match=r"ggml-cpu-use-ref-no-sgemm patch for this model.*(Q8_0|F32|F16)"):
        pyshim.Model(model_path(SMOL), deterministic=True)
