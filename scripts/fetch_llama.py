#!/usr/bin/env python3
"""Fill vendor/llama.cpp/ from the pinned registry artifact, verified by sha256, and apply the patches that apply.

No machine here can reach a source host, so llama.cpp's source comes from the
sdist of llama-cpp-python 0.3.36, which vendors llama.cpp at the commit in
vendor/llama.cpp/README.md. The archive is cached under ~/.cache/pyshim/downloads and only the
directories the library build needs are unpacked.

Options (also as environment variables, for `make` and `pip install`): `--source DIR`
(LLAMA_CPP_DIR) copies a llama.cpp checkout instead of the archive, never touching the
checkout; `--patches none|all|a,b` (LLAMA_PATCHES) chooses the patches; `--dest DIR` puts the
tree elsewhere (the Makefile uses $(BUILD)/llama.cpp-src for any tree but the default one, so
that an unpatched build never touches the patched tree). The tree records which patches
applied (.pyshim-patches) and what it was made from (.pyshim-source), for CMake.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
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
# file's header for what it changes and why). Every one is optional: the library detects at
# build time which applied (EL_PATCH_<NAME>, native/CMakeLists.txt) and falls back to
# upstream behaviour without it (docs/patches.md says what each buys and what is lost).
PATCHES = sorted((ROOT / "native" / "patches").glob("*.patch"))
STAMP_NAME = ".pyshim-sha256"
APPLIED_NAME = ".pyshim-patches"  # the patches that applied, one name per line (read by CMake)
SOURCE_NAME = ".pyshim-source"  # the llama.cpp commit the tree is, or what is known of it
PIN_COMMIT = "0c1e570"
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


def unpack_pinned(archive: Path, staging: Path) -> None:
    with tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(PREFIX):
                continue
            rel = m.name[len(PREFIX) :]
            if rel and rel.startswith(KEEP):
                m.name = rel
                members.append(m)
        # The "data" filter (links and modes made safe) exists from Python 3.11.4 / 3.12; Debian 12's
        # python3 is 3.11.2. The archive is sha256-pinned and its members chosen above either way.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(staging, members=members, filter="data")
        else:
            tar.extractall(staging, members=members)


def copy_tree(source: Path, staging: Path) -> None:
    """A user's llama.cpp checkout, copied (never patched in place): the same paths as from
    the archive."""
    if not (source / "include" / "llama.h").exists():
        sys.exit(f"fetch_llama: {source} is not a llama.cpp tree (no include/llama.h)")
    for keep in KEEP:
        src, dst = source / keep, staging / keep
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        elif src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def fill(dest: Path, source: Path | None, wanted: list[Path]) -> list[str]:
    """Unpack (or copy) into a staging folder beside dest, apply what applies, then swap it in."""
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    if source is None:
        unpack_pinned(fetch(), staging)
    else:
        copy_tree(source, staging)
    applied, refused = apply_patches(staging, wanted)
    (staging / APPLIED_NAME).write_text("".join(name + "\n" for name in applied))
    (staging / SOURCE_NAME).write_text(source_commit(source) + "\n")
    # Keep the committed pin files, replace everything else atomically enough for a rerun.
    for keep in ("README.md",):
        if (dest / keep).exists():
            shutil.copy2(dest / keep, staging / keep)
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return refused


def prerequisites(patch: Path) -> list[str]:
    """The patches this one is written on top of: its header's "Applied after X.patch"."""
    header = " ".join(patch.read_text().split("\ndiff ", 1)[0].split("\n--- ", 1)[0].split())
    return re.findall(r"[Aa]pplied after ([\w.-]+?\.patch)", header)


def apply_one(tree: Path, patch: Path) -> str:
    """Apply one patch if all of it applies cleanly (a dry run first, so that a patch that
    fails leaves nothing half-applied), then prove every hunk is in place by reverse-applying
    it in a dry run. Returns why not, or "" when applied."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = ["patch", "-p1", "--batch", "--silent", "--no-backup-if-mismatch", *args]
        return subprocess.run([*cmd, "-d", str(tree), "-i", str(patch)], capture_output=True, text=True)

    trial = run("--forward", "--dry-run")
    if trial.returncode != 0:
        said = (trial.stdout + trial.stderr).strip().splitlines()
        return f"does not apply ({said[0]})" if said else "does not apply"
    done = run("--forward")
    if done.returncode != 0:
        sys.exit(f"fetch_llama: {patch.name} passed its dry run but failed to apply:\n{done.stdout}")
    check = run("--reverse", "--dry-run")
    if check.returncode != 0:
        sys.exit(f"fetch_llama: {patch.name} applied but does not reverse cleanly:\n{check.stdout}")
    return ""


def apply_patches(tree: Path, wanted: list[Path]) -> tuple[list[str], list[str]]:
    """Apply each wanted patch that applies, in name order; one whose prerequisite did not
    apply is skipped (it was written on top of it). Returns (applied, refused with why)."""
    applied: list[str] = []
    refused: list[str] = []
    for p in wanted:
        missing = [q for q in prerequisites(p) if q.removesuffix(".patch") not in applied]
        why = f"needs {', '.join(missing)}" if missing else apply_one(tree, p)
        if why:
            refused.append(f"{p.name}: {why}")
        else:
            applied.append(p.name.removesuffix(".patch"))
    return applied, refused


def source_commit(source: Path | None) -> str:
    if source is None:
        return PIN_COMMIT
    r = subprocess.run(["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else f"tree at {source}"


def source_identity(source: Path | None) -> str:
    """What the tree is made from: the verified archive, or a checkout's commit and the hash of
    its uncommitted changes (so that editing the checkout copies it again)."""
    if source is None:
        return SHA256
    dirty = subprocess.run(["git", "-C", str(source), "diff", "HEAD"], capture_output=True)
    head = source_commit(source)
    return f"{source.resolve()}@{head}+{hashlib.sha256(dirty.stdout).hexdigest()[:12]}"


def select(spec: str) -> list[Path]:
    """LLAMA_PATCHES: "all" (default), "none", or a comma-separated list of patch names."""
    if spec in ("", "all"):
        return PATCHES
    if spec == "none":
        return []
    names = {n.strip().removesuffix(".patch") for n in spec.split(",") if n.strip()}
    known = {p.name.removesuffix(".patch") for p in PATCHES}
    if names - known:
        sys.exit(f"fetch_llama: unknown patches {sorted(names - known)}; known: {sorted(known)}")
    return [p for p in PATCHES if p.name.removesuffix(".patch") in names]


def stamp(source: Path | None, wanted: list[Path]) -> str:
    """What the unpacked tree was made from: the source, the list of paths taken from it and
    the patches wanted, so that changing any of them unpacks afresh."""
    patches = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in wanted)).hexdigest()[:16]
    return f"{source_identity(source)} {hashlib.sha256(repr(KEEP).encode()).hexdigest()[:16]} {patches}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archive", action="store_true", help="print the verified source archive's path and stop")
    ap.add_argument("--dest", type=Path, default=DEST, help="where the tree goes (default vendor/llama.cpp)")
    ap.add_argument(
        "--source",
        type=Path,
        default=os.environ.get("LLAMA_CPP_DIR") or None,
        help="a llama.cpp checkout to build against instead of the pinned archive (env LLAMA_CPP_DIR)",
    )
    ap.add_argument(
        "--patches",
        default=os.environ.get("LLAMA_PATCHES", "all"),
        help='"all", "none" or a comma-separated list of names (env LLAMA_PATCHES)',
    )
    args = ap.parse_args()
    if args.archive:  # the verified source archive, for installing llama-cpp-python from it
        print(fetch())
        return
    dest: Path = args.dest.resolve()
    wanted = select(args.patches)
    want = stamp(args.source, wanted)
    stamped = dest / STAMP_NAME
    if stamped.exists() and stamped.read_text() == want and (dest / "include" / "llama.h").exists():
        return
    refused = fill(dest, args.source, wanted)
    (dest / STAMP_NAME).write_text(want)
    what = f"{args.source} (copied)" if args.source else f"{ARCHIVE} (sha256 verified)"
    print(f"fetch_llama: {dest} filled from {what}: {len(wanted) - len(refused)} of {len(PATCHES)} patches applied")
    for line in refused:
        # a patch that does not apply costs speed (or a feature, docs/patches.md), never the build
        print(f"fetch_llama: not applied: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
