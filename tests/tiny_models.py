"""Tiny random-weight GGUF models for architectures that no catalogue package ships.

Two models are written with ``gguf`` (the writer that matches the pinned llama.cpp):

* ``mamba``: a pure recurrent Mamba-1 model (llama.cpp arch ``mamba``), 2 blocks.
* ``hybrid``: a Jamba model (llama.cpp arch ``jamba``), 3 blocks: Mamba, attention, Mamba.
  Jamba reuses the Mamba-1 layer, so the hybrid exercises a conv state, an SSM state and a
  KV cache in the same model; a layer is recurrent exactly when its ``head_count_kv`` is 0.

Both copy the whole ``tokenizer.*`` block (vocabulary, merges, token types, special ids and
chat template) from the SmolLM2 catalogue model, so real chat templating and tokenization
apply and prompts look like they do on a real model. The output head is tied to
``token_embd``; that ~49k x 64 float32 matrix is most of each file (about 13 MB).

Why the weights are large: the tests that use these models compare next-token
distributions computed from a reused cache (KV cache and/or recurrent state) against a
fresh evaluation of the same prompt. With the usual N(0, 0.02) initialisation every layer
is a tiny perturbation of the residual stream, so the next-token distribution is nearly
the same whatever came before the last token, and a wrong or stale state would go
unnoticed. Weights drawn from N(0, 0.3) make each mixing layer dominate the residual, so
the prediction depends strongly on the whole context. Everything is drawn from a fixed
seed, so a given recipe always produces the same file bytes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from pyshim import models

__all__ = ["KINDS", "tiny_model", "write_hybrid", "write_mamba"]

#: Bump when a recipe changes: it is part of the cached file names, so stale files are not reused.
RECIPE_VERSION = 1

#: Catalogue model whose tokenizer (and chat template) the tiny models borrow.
TOKENIZER_SOURCE = "smollm2-135m-instruct"

SCALE = 0.3  # standard deviation of the random matrices (see the module docstring)
SEED = 20240611
N_CTX_TRAIN = 4096
N_EMBD = 64
D_INNER = 2 * N_EMBD  # llama.cpp's Mamba-1 only supports an expansion factor of 2
D_CONV = 4
D_STATE = 16
DT_RANK = 4
RMS_EPS = 1e-5
# hybrid only
N_HEAD = 4
N_FF = 128
HYBRID_HEAD_COUNT_KV = (0, N_HEAD, 0)  # 0 marks a recurrent (Mamba) layer


def _copy_tokenizer(writer: gguf.GGUFWriter) -> int:
    """Copy every ``tokenizer.*`` key, with its GGUF type, from the source model; return the vocab size."""
    reader = gguf.GGUFReader(models.path(TOKENIZER_SOURCE, log=False))
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type)
        if name == "tokenizer.ggml.tokens":
            n_vocab = len(field.data)
    if n_vocab == 0:
        raise RuntimeError(f"{TOKENIZER_SOURCE}: no tokenizer.ggml.tokens in the source GGUF")
    return n_vocab


class _Weights:
    """Deterministic float32 tensors; shapes are numpy order, i.e. ggml's ``ne`` reversed."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def normal(self, *shape: int, scale: float = SCALE) -> np.ndarray:
        return self.rng.normal(0.0, scale, size=shape).astype(np.float32)

    def norm(self, n: int) -> np.ndarray:
        """An RMS-norm weight: about 1.0, slightly perturbed."""
        return (1.0 + self.rng.normal(0.0, 0.1, size=n)).astype(np.float32)


def _add_ssm_keys(writer: gguf.GGUFWriter) -> None:
    writer.add_ssm_conv_kernel(D_CONV)
    writer.add_ssm_inner_size(D_INNER)
    writer.add_ssm_state_size(D_STATE)
    writer.add_ssm_time_step_rank(DT_RANK)


def _add_mamba_layer(writer: gguf.GGUFWriter, w: _Weights, i: int, *, jamba: bool) -> None:
    """The Mamba-1 mixer of block ``i`` (``src/models/mamba.cpp``, ``jamba.cpp``, ``mamba-base.cpp``)."""
    p = f"blk.{i}"
    writer.add_tensor(f"{p}.ssm_in.weight", w.normal(2 * D_INNER, N_EMBD))
    writer.add_tensor(f"{p}.ssm_conv1d.weight", w.normal(D_INNER, D_CONV))
    writer.add_tensor(f"{p}.ssm_conv1d.bias", w.normal(D_INNER))
    writer.add_tensor(f"{p}.ssm_x.weight", w.normal(DT_RANK + 2 * D_STATE, D_INNER))
    writer.add_tensor(f"{p}.ssm_dt.weight", w.normal(D_INNER, DT_RANK))
    # As in Mamba's own init: softplus(bias) = dt spread log-uniformly over [0.001, 0.1].
    dt = np.exp(w.rng.uniform(np.log(1e-3), np.log(1e-1), size=D_INNER))
    writer.add_tensor(f"{p}.ssm_dt.bias", np.log(np.expm1(dt)).astype(np.float32))
    # A must be negative for the state to decay. Rates spread log-uniformly over [0.01, 2]
    # leave some channels with a long memory, so tokens far back still move the prediction.
    a = -np.exp(w.rng.uniform(np.log(0.01), np.log(2.0), size=(D_INNER, D_STATE)))
    writer.add_tensor(f"{p}.ssm_a", a.astype(np.float32))
    writer.add_tensor(f"{p}.ssm_d", w.norm(D_INNER))
    writer.add_tensor(f"{p}.ssm_out.weight", w.normal(N_EMBD, D_INNER))
    if jamba:
        writer.add_tensor(f"{p}.ssm_dt_norm.weight", w.norm(DT_RANK))
        writer.add_tensor(f"{p}.ssm_b_norm.weight", w.norm(D_STATE))
        writer.add_tensor(f"{p}.ssm_c_norm.weight", w.norm(D_STATE))


_AddHParams = Callable[[gguf.GGUFWriter], None]
_AddTensors = Callable[[gguf.GGUFWriter, _Weights], None]


def _write(path: Path, arch: str, add_hparams: _AddHParams, add_tensors: _AddTensors) -> Path:
    """Write a GGUF atomically (a temporary file renamed into place), so readers never see a partial one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, arch)
        writer.add_name(f"pyshim tiny {arch}")
        writer.add_context_length(N_CTX_TRAIN)
        writer.add_embedding_length(N_EMBD)
        writer.add_layer_norm_rms_eps(RMS_EPS)
        add_hparams(writer)
        n_vocab = _copy_tokenizer(writer)
        w = _Weights(SEED)
        # No output.weight: both archs fall back to token_embd (tied head), halving the file.
        writer.add_tensor("token_embd.weight", w.normal(n_vocab, N_EMBD))
        writer.add_tensor("output_norm.weight", w.norm(N_EMBD))
        add_tensors(writer, w)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def write_mamba(path: Path) -> Path:
    """Write a 2-block random-weight Mamba-1 GGUF (llama.cpp arch ``mamba``) to ``path``; return it."""
    n_layer = 2

    def hparams(writer: gguf.GGUFWriter) -> None:
        writer.add_block_count(n_layer)
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        _add_ssm_keys(writer)

    def tensors(writer: gguf.GGUFWriter, w: _Weights) -> None:
        for i in range(n_layer):
            writer.add_tensor(f"blk.{i}.attn_norm.weight", w.norm(N_EMBD))
            _add_mamba_layer(writer, w, i, jamba=False)

    return _write(path, "mamba", hparams, tensors)


def write_hybrid(path: Path) -> Path:
    """Write a 3-block random-weight Jamba GGUF (Mamba, attention, Mamba) to ``path``; return it.

    Every block has a SwiGLU feed-forward after its mixer; the attention block has no RoPE
    (Jamba relies on its Mamba layers for position) and 4 query/key/value heads of size 16.
    """
    head_dim = N_EMBD // N_HEAD

    def hparams(writer: gguf.GGUFWriter) -> None:
        writer.add_block_count(len(HYBRID_HEAD_COUNT_KV))
        writer.add_feed_forward_length(N_FF)
        writer.add_head_count(N_HEAD)
        writer.add_head_count_kv(list(HYBRID_HEAD_COUNT_KV))
        _add_ssm_keys(writer)

    def tensors(writer: gguf.GGUFWriter, w: _Weights) -> None:
        for i, n_head_kv in enumerate(HYBRID_HEAD_COUNT_KV):
            p = f"blk.{i}"
            writer.add_tensor(f"{p}.attn_norm.weight", w.norm(N_EMBD))
            if n_head_kv == 0:
                _add_mamba_layer(writer, w, i, jamba=True)
            else:
                writer.add_tensor(f"{p}.attn_q.weight", w.normal(N_EMBD, N_EMBD))
                writer.add_tensor(f"{p}.attn_k.weight", w.normal(n_head_kv * head_dim, N_EMBD))
                writer.add_tensor(f"{p}.attn_v.weight", w.normal(n_head_kv * head_dim, N_EMBD))
                writer.add_tensor(f"{p}.attn_output.weight", w.normal(N_EMBD, N_EMBD))
            writer.add_tensor(f"{p}.ffn_norm.weight", w.norm(N_EMBD))
            writer.add_tensor(f"{p}.ffn_gate.weight", w.normal(N_FF, N_EMBD))
            writer.add_tensor(f"{p}.ffn_up.weight", w.normal(N_FF, N_EMBD))
            writer.add_tensor(f"{p}.ffn_down.weight", w.normal(N_EMBD, N_FF))

    return _write(path, "jamba", hparams, tensors)


KINDS: dict[str, Callable[[Path], Path]] = {"mamba": write_mamba, "hybrid": write_hybrid}


def tiny_model(kind: str, cache_dir: Path | None = None) -> Path:
    """Path of the tiny ``kind`` model ("mamba" or "hybrid"), written on first use.

    The file lives in ``cache_dir`` (default: ``tiny/`` under pyshim's model cache,
    ``~/.cache/pyshim/models/tiny/`` unless ``PYSHIM_CACHE`` is set) and is written again
    whenever it is missing. The recipe version is part of its name.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown tiny model kind {kind!r}; expected one of {sorted(KINDS)}")
    root = Path(cache_dir) if cache_dir is not None else models.cache_dir() / "tiny"
    path = root / f"tiny-{kind}-v{RECIPE_VERSION}.gguf"
    if not path.exists():
        KINDS[kind](path)
    return path
