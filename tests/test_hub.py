"""Models named by Hugging Face repo and file, downloaded by huggingface_hub from a local server that
serves the hub's file layout (``HF_ENDPOINT``): never the network. The file it serves is a real
catalogue GGUF, so the model that comes back answers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

import pytest
from conftest import ROOT, SMOL

from pyshim import models

pytest.importorskip("huggingface_hub")

REPO = "tiny-org/SmolLM2-135M-Instruct-GGUF"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub(BaseHTTPRequestHandler):
    """The two routes huggingface_hub's downloads use: a repo's file tree and a file's bytes."""

    protocol_version = "HTTP/1.1"
    files: ClassVar[dict[str, Path]] = {}
    requests: ClassVar[list[str]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        path = urlparse(self.path).path
        self.requests.append(f"{self.command} {path}")
        if path.startswith(f"/api/models/{REPO}/tree/"):
            tree = [{"type": "file", "path": n, "size": p.stat().st_size, "oid": n} for n, p in self.files.items()]
            return self._send(200, json.dumps(tree).encode(), "application/json", body)
        name = path.removeprefix(f"/{REPO}/resolve/main/")
        if name in self.files:
            data = self.files[name].read_bytes()
            etag = '"' + hashlib.sha256(data).hexdigest() + '"'
            return self._send(200, data, "application/octet-stream", body, {"X-Repo-Commit": COMMIT, "ETag": etag})
        self._send(404, b"{}", "application/json", body, {"X-Error-Code": "EntryNotFound"})

    def _send(self, code: int, data: bytes, kind: str, body: bool, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in {"Content-Type": kind, "Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(data)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The local hub, and the environment that points huggingface_hub at it (read when it is
    imported: so each check runs in a process of its own, as a user's program would)."""
    readme = tmp_path / "README.md"
    readme.write_text("a model card")
    Hub.files = {"smollm2-135m-instruct-q8_0.gguf": models.path(SMOL), "README.md": readme}
    Hub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(ROOT)}  # fmt: skip
    try:
        yield env
    finally:
        server.shutdown()


def _run(env: dict[str, str], code: str) -> dict[str, Any]:
    """``code`` in a new Python process with the hub's environment; the JSON it printed last."""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_hub_name_downloads_into_the_hubs_cache_and_answers(hub: dict[str, str], tmp_path: Path) -> None:
    got = _run(
        hub,
        f"""
import json, pyshim
from pyshim import models
with pyshim.Model({REPO!r}, filename="*q8_0.gguf", n_ctx=512, temperature=0) as m:
    r = m.generate("Say OK.", max_tokens=3)
    by_url = models.path("hf://{REPO}/smollm2-135m-instruct-q8_0.gguf")
with pyshim.Model.from_pretrained({REPO!r}, "smollm2-*.gguf", n_ctx=256) as again:
    print(json.dumps({{"path": str(m.path), "n": r["n_decoded"], "by_url": str(by_url), "again": str(again.path)}}))
""",
    )
    path = Path(got["path"])
    assert path.is_relative_to(tmp_path / "hf") and path.name == "smollm2-135m-instruct-q8_0.gguf"
    assert path.read_bytes()[:4] == b"GGUF" and path.stat().st_size == models.path(SMOL).stat().st_size
    assert got["n"] >= 1  # the model it names answers
    # the same file by its URL and by llama-cpp-python's spelling: from huggingface_hub's cache
    assert got["by_url"] == got["again"] == got["path"]
    assert Hub.requests.count(f"GET /{REPO}/resolve/main/smollm2-135m-instruct-q8_0.gguf") == 1


def test_hub_names_that_cannot_resolve_say_why(hub: dict[str, str]) -> None:
    got = _run(
        hub,
        f"""
import json, pyshim
from pyshim import models
said = []
for name, filename in [({REPO!r}, "*q4_0.gguf"), ("hf://tiny-org/missing/model.gguf", None),
                       ("hf://{REPO}/a.gguf", "b.gguf")]:
    try:
        models.path(name, filename=filename)
    except pyshim.ShimError as e:
        said.append([type(e).__name__, str(e)])
print(json.dumps(said))
""",
    )
    (none, _), (missing, _), (both, _) = got
    assert none == "UnknownModel" and "no .gguf file matching '*q4_0.gguf'" in got[0][1]
    assert "smollm2-135m-instruct-q8_0.gguf" in got[0][1]  # what there is
    assert missing == "ModelFetchError" and "tiny-org/missing" in got[1][1]
    assert both == "UnknownModel" and "give one" in got[2][1]
