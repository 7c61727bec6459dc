"""Models named by their Hugging Face repository: ``hf://org/repo/file.gguf``, or ``org/repo`` with a
``filename`` (a name or a glob, as llama-cpp-python's ``Llama.from_pretrained`` takes it).

The download is huggingface_hub's own (``hf_hub_download``): its cache (``HF_HOME``), its resume of
a broken download, its progress bar, its token and its endpoint (``HF_ENDPOINT``, which the tests
point at a local server). huggingface_hub is the ``hf`` extra (``pip install 'pyshim[hf]'``); without
it a hub name says so. A name is a hub name only when it is not a file: ``./org/repo`` or a path that
exists stays a path.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

from .errors import ModelFetchError, UnknownModel

__all__ = ["is_hub_name", "resolve"]

_REPO = r"[A-Za-z0-9][\w.-]*/[\w.-]+"
_HF_URL = re.compile(rf"^hf://(?P<repo>{_REPO})(?:/(?P<file>.+))?$")
_REPO_ID = re.compile(rf"^{_REPO}$")


def is_hub_name(name: str) -> bool:
    """``hf://org/repo[/file]``, or ``org/repo`` that is not a file here."""
    if _HF_URL.match(name):
        return True
    return bool(_REPO_ID.match(name)) and not name.endswith(".gguf") and not Path(name).exists()


def resolve(name: str, filename: str | None = None, revision: str | None = None) -> Path:
    """The local path of a hub model, downloaded into huggingface_hub's cache if it is not there."""
    m = _HF_URL.match(name)
    repo, in_name = (m.group("repo"), m.group("file")) if m else (name, None)
    if in_name and filename and in_name != filename:
        raise UnknownModel(f"{name!r} names the file {in_name!r}, and filename= names {filename!r}: give one")
    hub = _hub(name)
    wanted = in_name or filename
    try:
        if wanted is None or any(c in wanted for c in "*?["):
            wanted = _pick(repo, wanted, hub.list_repo_files(repo, revision=revision))
        return Path(hub.hf_hub_download(repo, wanted, revision=revision))
    except (UnknownModel, ModelFetchError):
        raise
    except Exception as e:  # huggingface_hub's own errors: no such repo or file, no network, refused
        raise ModelFetchError(f"could not fetch {wanted or '*.gguf'} from the Hugging Face repo {repo}: {e}") from e


def _pick(repo: str, pattern: str | None, files: list[str]) -> str:
    """The one .gguf file of ``files`` that ``pattern`` (a glob; None: any .gguf) names."""
    ggufs = [f for f in files if f.endswith(".gguf")]
    hits = [f for f in ggufs if fnmatch.fnmatch(f, pattern or "*.gguf") or fnmatch.fnmatch(Path(f).name, pattern or "")]
    if len(hits) == 1:
        return hits[0]
    listing = ", ".join(ggufs) or "none"
    if not hits:
        raise UnknownModel(
            f"the Hugging Face repo {repo} has no .gguf file matching {pattern!r} (its .gguf files: {listing})"
        )
    raise UnknownModel(
        f"the Hugging Face repo {repo} has {len(hits)} .gguf files matching {pattern or '*.gguf'!r}: name one with "
        f"filename= or hf://{repo}/FILE ({', '.join(hits)})"
    )


def _hub(name: str) -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ModelFetchError(
            f"{name!r} is not a file here; as a Hugging Face model name it needs huggingface_hub: "
            "pip install 'pyshim[hf]' (or huggingface_hub)"
        ) from None
    return huggingface_hub
