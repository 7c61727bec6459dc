#!/usr/bin/env python3
"""Fill vendor/llama.cpp/ from the pinned registry artifact, verified by sha256.

No machine here can reach a source host, so llama.cpp's source comes from the
sdist of llama-cpp-python 0.3.36, which vendors llama.cpp at the commit in
vendor/PIN. The archive is cached under ~/.cache/pyshim/downloads and only the
directories the library build needs are unpacked.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

PACKAGE = "llama-cpp-python==0.3.36"
ARCHIVE = "llama_cpp_python-0.3.36.tar.gz"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
# Enough to build ggml, llama, common and the tools the benchmark runs; the rest (models,
# tests, docs) is 150 MB we never read.
KEEP = (
    "CMakeLists.txt",
    "cmake/",
    "ggml/",
    "src/",
    "include/",
    "common/",
    "vendor/",
    "LICENSE",
    "tools/",  # llama-bench and llama-server, for the side-by-side benchmark (bench/peers.py)
    "scripts/ui-assets.cmake",
    "licenses/",
)

ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "vendor" / "llama.cpp"
# Reviewed changes carried on top of the pinned source, applied in name order (see each
# file's header for what it changes and why).
PATCHES = sorted((ROOT / "native" / "patches").glob("*.patch"))
STAMP = DEST / ".pyshim-sha256"
CACHE = Path(os.environ.get("PYSHIM_CACHE", Path.home() / ".cache" / "pyshim")) / "downloads"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pip_command() -> list[str]:
    """How to run pip from here: this interpreter's, else one on PATH (pip's isolated build
    environment hides the interpreter's own pip unless the build requires list it)."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    sys.exit(
        f"fetch_llama: pip is needed to download {PACKAGE} but {sys.executable} cannot import it and none is on "
        "PATH; install pip (python -m ensurepip) or put the archive in " + str(CACHE)
    )


def fetch() -> Path:
    archive = CACHE / ARCHIVE
    if archive.exists() and sha256(archive) == SHA256:
        return archive
    CACHE.mkdir(parents=True, exist_ok=True)
    # --no-binary for this package alone: its build requirements still come as wheels,
    # and --no-build-isolation avoids building them at all just to read metadata.
    subprocess.run(
        [
            *pip_command(),
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
            "--no-build-isolation",
            "-d",
            str(CACHE),
            PACKAGE,
        ],
        check=True,
    )
    got = sha256(archive)
    if got != SHA256:
        archive.unlink()
        sys.exit(f"fetch_llama: {ARCHIVE} has sha256 {got}, expected {SHA256}; refusing to build")
    return archive


def unpack(archive: Path) -> None:
    staging = DEST.with_name("llama.cpp.partial")
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(PREFIX):
                continue
            rel = m.name[len(PREFIX) :]
            if rel and rel.startswith(KEEP):
                m.name = rel
                members.append(m)
        tar.extractall(staging, members=members, filter="data")
    apply_patches(staging)
    # Keep the committed pin files, replace everything else atomically enough for a rerun.
    for keep in ("README.md",):
        if (DEST / keep).exists():
            shutil.copy2(DEST / keep, staging / keep)
    shutil.rmtree(DEST, ignore_errors=True)
    staging.rename(DEST)
    STAMP.write_text(stamp())


def apply_patches(tree: Path) -> None:
    """Apply PATCHES to the freshly unpacked tree, then prove every hunk is in place by
    reverse-applying them in a dry run; any mismatch stops the build."""
    for p in PATCHES:
        for args in (["--forward"], ["--reverse", "--dry-run"]):
            r = subprocess.run(
                ["patch", "-p1", "--batch", "--silent", *args, "-d", str(tree), "-i", str(p)],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                sys.exit(f"fetch_llama: {p.name} does not apply to the pinned source ({' '.join(args)}):\n{r.stdout}")


def stamp() -> str:
    """What the unpacked tree was made from: the archive, the list of paths taken from it and
    the patches applied, so that changing any of them unpacks afresh."""
    patches = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in PATCHES)).hexdigest()[:16]
    return f"{SHA256} {hashlib.sha256(repr(KEEP).encode()).hexdigest()[:16]} {patches}\n"


def main() -> None:
    if sys.argv[1:] == ["--archive"]:  # the verified source archive, for installing llama-cpp-python from it
        print(fetch())
        return
    if STAMP.exists() and STAMP.read_text() == stamp() and (DEST / "include" / "llama.h").exists():
        return
    unpack(fetch())
    print(f"fetch_llama: vendor/llama.cpp filled from {ARCHIVE} (sha256 verified, {len(PATCHES)} patches applied)")


if __name__ == "__main__":
    main()
