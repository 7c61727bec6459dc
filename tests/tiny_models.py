"""Tiny random-weight GGUF models for architectures that no catalogue package ships.

Models are written with ``gguf`` (the writer that matches the pinned llama.cpp):

* ``mamba``: a pure recurrent Mamba-1 model (llama.cpp arch ``mamba``), 2 blocks.
* ``hybrid``: a Jamba model (llama.cpp arch ``jamba``), 3 blocks: Mamba, attention, Mamba.
  Jamba reuses the Mamba-1 layer, so the hybrid exercises a conv state, an SSM state and a
  KV cache in the same model; a layer is recurrent exactly when its ``head_count_kv`` is 0.

All copy the whole ``tokenizer.*`` block (vocabulary, merges, token types, special ids and
chat template) from the SmolLM2 catalogue model, so real chat templating and tokenization
apply and prompts look like they do on a real model. The output head is tied to
``token_embd``; that ~49k x 64 float32 matrix is most of each file (about 13 MB).

Three more follow architectures whose caches behave differently again:

* ``gemma4``: Gemma 4 (arch ``gemma4``), 4 blocks alternating sliding-window and global
  attention (window 32 tokens, smaller than a typical test prompt, so the sliding-window
  cache is trimmed and its checkpoints are used), with Gemma 4's per-kind head sizes,
  proportional RoPE on the global layers, Q/K/V norms, post-norms and layer scalars.
* ``qwen35``: Qwen3.5 (arch ``qwen35``), 4 blocks alternating Gated DeltaNet linear
  attention (conv state + matrix-valued recurrent state) and gated full attention (IMRoPE).
* ``lfm2``: Liquid LFM2 (arch ``lfm2``), 4 blocks alternating gated short convolutions
  (a width-3 causal conv whose last 2 inputs are the recurrent state) and grouped-query
  attention with Q/K norms and RoPE; llama.cpp runs it as a hybrid (conv state + KV cache),
  a layer being a short convolution exactly when its ``head_count_kv`` is 0.

These three carry their real chat templates, read from the pinned llama.cpp sdist that
``scripts/fetch_llama.py`` downloads and verifies (nothing of the templates is committed
here), and add the templates' marker tokens (``<|turn>``, ``<turn|>``, ... for Gemma 4;
``<think>``, ``<tool_call>``, ... for Qwen3.5; ``<|startoftext|>`` and the tool-call markers
for LFM2) to the borrowed vocabulary, so the markers tokenize as single tokens and
end-of-turn detection works as on the real models.

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

import functools
import importlib.util
import os
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import gguf
import numpy as np

from pyshim import models

__all__ = [
    "KINDS",
    "sdist_template",
    "tiny_model",
    "write_gemma4",
    "write_hybrid",
    "write_lfm2",
    "write_mamba",
    "write_qwen35",
]

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
# gemma4 only
GEMMA4_SWA_PATTERN = (True, False, True, False)  # True: sliding-window layer; False: global
GEMMA4_HEAD_COUNT_KV = (2, 1, 2, 1)  # grouped-query attention, fewer KV heads on global layers
GEMMA4_SLIDING_WINDOW = 32  # tokens; smaller than the prompts the tests send
GEMMA4_HEAD_DIM_SWA = 16
GEMMA4_HEAD_DIM_FULL = 32  # Gemma 4's global layers have wider heads than its local ones
GEMMA4_ROPE_PARTIAL = 0.25  # share of the global heads' rotary pairs that rotate ("proportional" RoPE)
# Gemma 4 scales the input embedding by sqrt(n_embd) (8 here) and RMS-norms each mixer's
# output before adding it. With post-norm weights near 1 the current token's embedding
# dominates the residual and, the head being tied, the model mostly predicts the token it
# just read whatever the context; weights near 3 let the layers outweigh it.
GEMMA4_POST_NORM = 3.0
# qwen35 only
QWEN35_FULL_ATTENTION_INTERVAL = 2  # every 2nd block is full attention: DeltaNet, attention, DeltaNet, attention
QWEN35_N_LAYER = 4
QWEN35_HEAD_COUNT_KV = 2
QWEN35_HEAD_DIM = 16
QWEN35_ROPE_DIMS = 8  # partial rotary, as in Qwen3.5 (a quarter there, half here)
QWEN35_ROPE_SECTIONS = (2, 1, 1, 0)  # IMRoPE sections; they sum to QWEN35_ROPE_DIMS / 2
QWEN35_K_HEADS = 2  # DeltaNet key heads (ssm.group_count)
QWEN35_V_HEADS = 4  # DeltaNet value heads (ssm.time_step_rank); a multiple of the key heads
QWEN35_HEAD_K_DIM = 16  # DeltaNet head size (ssm.state_size), keys and values alike
# lfm2 only
LFM2_HEAD_COUNT_KV = (0, 2, 0, 2)  # 0 marks a short-convolution layer: conv, attention, conv, attention
LFM2_L_CACHE = 3  # shortconv.l_cache: the conv width, as in the released LFM2 models (state: 2 inputs)
# The short conv multiplies three projections of its input (C * conv(B * x)), so its output
# grows with the cube of their scale: at SCALE it swamps the attention layers and the model
# predicts from the last 3 tokens alone; at 0.2 the context reaching attention moves the prediction.
LFM2_IN_PROJ_SCALE = 0.2

#: The templates inside the pinned llama.cpp sdist (``scripts/fetch_llama.py``).
GEMMA4_TEMPLATE = "models/templates/google-gemma-4-31B-it.jinja"
QWEN35_TEMPLATE = "models/templates/Qwen3.5-4B.jinja"
LFM2_TEMPLATE = "models/templates/LFM2.5-Instruct.jinja"  # the dense (arch lfm2) LFM2.5 instruct models

_CONTROL = int(gguf.TokenType.CONTROL)
_USER_DEFINED = int(gguf.TokenType.USER_DEFINED)  # matched as one token in plain text, printed as text

#: Gemma 4's marker tokens. Control tokens, except the string quote, which tool-call
#: arguments contain and which must therefore survive detokenization as text.
GEMMA4_TOKENS: tuple[tuple[str, int], ...] = (
    *((t, _CONTROL) for t in ("<pad>", "<eos>", "<bos>")),
    *((t, _CONTROL) for t in ("<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>")),
    *(
        (t, _CONTROL)
        for t in ("<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>")
    ),
    *((t, _CONTROL) for t in ("<|image|>", "<|audio|>", "<|video|>")),
    ('<|"|>', _USER_DEFINED),
)
GEMMA4_SPECIAL_IDS = {"bos": "<bos>", "eos": "<eos>", "padding": "<pad>"}

#: Qwen3.5's text markers (user-defined, as its converted GGUFs have them); ``<|im_start|>``
#: and ``<|im_end|>`` are already in SmolLM2's vocabulary, which uses the same ChatML turns.
QWEN35_TOKENS: tuple[tuple[str, int], ...] = tuple(
    (t, _USER_DEFINED)
    for t in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
)

#: LFM2's markers. The template opens with ``bos_token``; SmolLM2's BOS is ``<|im_start|>``,
#: which would open every prompt with two turn markers, so LFM2's own BOS is added. The
#: ChatML turn markers are already in SmolLM2's vocabulary.
LFM2_TOKENS: tuple[tuple[str, int], ...] = tuple(
    (t, _CONTROL) for t in ("<|startoftext|>", "<|tool_call_start|>", "<|tool_call_end|>")
)
LFM2_SPECIAL_IDS = {"bos": "<|startoftext|>"}


def _copy_tokenizer(
    writer: gguf.GGUFWriter,
    *,
    chat_template: str | None = None,
    extra_tokens: Sequence[tuple[str, int]] = (),
    special_ids: Mapping[str, str] | None = None,
) -> int:
    """Copy every ``tokenizer.*`` key, with its GGUF type, from the source model; return the vocab size.

    ``extra_tokens`` (text, token type) are appended to the vocabulary unless already in it
    (SmolLM2's BPE merges stay valid: an added token is matched whole before merging);
    ``special_ids`` maps a special role (``bos``, ``eos``, ...) to the text of its new token;
    ``chat_template`` replaces the borrowed template.
    """
    reader = gguf.GGUFReader(models.path(TOKENIZER_SOURCE, log=False))
    fields = {name: field for name, field in reader.fields.items() if name.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in fields:
        raise RuntimeError(f"{TOKENIZER_SOURCE}: no tokenizer.ggml.tokens in the source GGUF")
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    types = list(fields["tokenizer.ggml.token_type"].contents())
    ids = {t: i for i, t in enumerate(tokens)}
    for text, ttype in extra_tokens:
        if text not in ids:
            ids[text] = len(tokens)
            tokens.append(text)
            types.append(ttype)
    overrides: dict[str, object] = {}
    if extra_tokens:
        overrides = {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}
    for role, text in (special_ids or {}).items():
        overrides[f"tokenizer.ggml.{role}_token_id"] = ids[text]
    if chat_template is not None:
        overrides["tokenizer.chat_template"] = chat_template
    for name, field in fields.items():
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, overrides.pop(name, field.contents()), vtype, sub_type)
    for name, value in overrides.items():  # a special id the source model does not set
        writer.add_uint32(name, int(value))  # type: ignore[call-overload]
    return len(tokens)


@functools.cache
def sdist_template(member: str) -> str:
    """The text of ``member`` (e.g. ``models/templates/Qwen3.5-4B.jinja``) in llama.cpp's tree
    inside the pinned, sha256-verified llama-cpp-python sdist (downloaded on first use)."""
    spec = importlib.util.spec_from_file_location(
        "_pyshim_fetch_llama", Path(__file__).resolve().parent.parent / "scripts" / "fetch_llama.py"
    )
    assert spec is not None and spec.loader is not None
    fetch_llama = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_llama)
    with tarfile.open(fetch_llama.fetch()) as tar:
        f = tar.extractfile(fetch_llama.PREFIX + member)
        if f is None:
            raise RuntimeError(f"{member}: not a regular file in {fetch_llama.ARCHIVE}")
        return f.read().decode("utf-8")


class _Weights:
    """Deterministic float32 tensors; shapes are numpy order, i.e. ggml's ``ne`` reversed."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def normal(self, *shape: int, scale: float = SCALE) -> np.ndarray:
        return self.rng.normal(0.0, scale, size=shape).astype(np.float32)

    def norm(self, n: int, mean: float = 1.0) -> np.ndarray:
        """An RMS-norm weight: about ``mean``, slightly perturbed."""
        return (mean + self.rng.normal(0.0, 0.1, size=n)).astype(np.float32)


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


def _add_attention(
    writer: gguf.GGUFWriter, w: _Weights, p: str, head_dim: int, n_head_kv: int, q_rows: int = 0, norms: bool = True
) -> None:
    """A block's attention projections (``q_rows``: the query's, when it holds more than the
    heads, as Qwen3.5's query and gate do), with per-head Q/K norms where the model has them."""
    writer.add_tensor(f"{p}.attn_q.weight", w.normal(q_rows or N_HEAD * head_dim, N_EMBD))
    writer.add_tensor(f"{p}.attn_k.weight", w.normal(n_head_kv * head_dim, N_EMBD))
    writer.add_tensor(f"{p}.attn_v.weight", w.normal(n_head_kv * head_dim, N_EMBD))
    writer.add_tensor(f"{p}.attn_output.weight", w.normal(N_EMBD, N_HEAD * head_dim))
    if norms:
        writer.add_tensor(f"{p}.attn_q_norm.weight", w.norm(head_dim))
        writer.add_tensor(f"{p}.attn_k_norm.weight", w.norm(head_dim))


def _add_swiglu(writer: gguf.GGUFWriter, w: _Weights, p: str) -> None:
    """A block's SwiGLU feed-forward."""
    writer.add_tensor(f"{p}.ffn_gate.weight", w.normal(N_FF, N_EMBD))
    writer.add_tensor(f"{p}.ffn_up.weight", w.normal(N_FF, N_EMBD))
    writer.add_tensor(f"{p}.ffn_down.weight", w.normal(N_EMBD, N_FF))


def _write(
    path: Path,
    arch: str,
    add_hparams: _AddHParams,
    add_tensors: _AddTensors,
    *,
    chat_template: str | None = None,
    extra_tokens: Sequence[tuple[str, int]] = (),
    special_ids: Mapping[str, str] | None = None,
    output_norm: str = "output_norm.weight",
) -> Path:
    """Write a GGUF atomically (a temporary file renamed into place), so readers never see a partial one.

    ``output_norm`` names the final norm's tensor (LFM2 calls it ``token_embd_norm.weight``);
    the other keyword arguments go to ``_copy_tokenizer``."""
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
        n_vocab = _copy_tokenizer(
            writer, chat_template=chat_template, extra_tokens=extra_tokens, special_ids=special_ids
        )
        w = _Weights(SEED)
        # No output.weight: every arch here falls back to token_embd (tied head), halving the file.
        writer.add_tensor("token_embd.weight", w.normal(n_vocab, N_EMBD))
        writer.add_tensor(output_norm, w.norm(N_EMBD))
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
                _add_attention(writer, w, p, head_dim, n_head_kv, norms=False)
            writer.add_tensor(f"{p}.ffn_norm.weight", w.norm(N_EMBD))
            _add_swiglu(writer, w, p)

    return _write(path, "jamba", hparams, tensors)


def write_gemma4(path: Path) -> Path:
    """Write a 4-block random-weight Gemma 4 GGUF (llama.cpp arch ``gemma4``) to ``path``; return it.

    Blocks alternate sliding-window (window ``GEMMA4_SLIDING_WINDOW``, 4 query and 2 KV heads
    of size 16, RoPE base 1e4) and global attention (4 query and 1 KV head of size 32, RoPE
    base 1e6 on the first quarter of the rotary pairs only, through ``rope_freqs``). As in
    Gemma 4: the input embedding is scaled by sqrt(n_embd), Q and K are RMS-normed per head
    (V without a weight), attention is unscaled, attention and GELU feed-forward outputs
    are RMS-normed before their residual adds, each block ends with a learned scalar, and
    the logits are soft-capped at 30. No per-layer embeddings, KV sharing or MoE.
    """
    n_layer = len(GEMMA4_SWA_PATTERN)

    def hparams(writer: gguf.GGUFWriter) -> None:
        writer.add_block_count(n_layer)
        writer.add_feed_forward_length(N_FF)
        writer.add_head_count(N_HEAD)
        writer.add_head_count_kv(list(GEMMA4_HEAD_COUNT_KV))
        writer.add_key_length(GEMMA4_HEAD_DIM_FULL)
        writer.add_value_length(GEMMA4_HEAD_DIM_FULL)
        writer.add_key_length_swa(GEMMA4_HEAD_DIM_SWA)
        writer.add_value_length_swa(GEMMA4_HEAD_DIM_SWA)
        writer.add_rope_dimension_count(GEMMA4_HEAD_DIM_FULL)
        writer.add_rope_dimension_count_swa(GEMMA4_HEAD_DIM_SWA)
        writer.add_rope_freq_base(1_000_000.0)
        writer.add_rope_freq_base_swa(10_000.0)
        writer.add_sliding_window(GEMMA4_SLIDING_WINDOW)
        writer.add_sliding_window_pattern(list(GEMMA4_SWA_PATTERN))
        writer.add_embedding_length_per_layer_input(0)  # required key; 0: no per-layer embeddings
        writer.add_final_logit_softcapping(30.0)

    def tensors(writer: gguf.GGUFWriter, w: _Weights) -> None:
        # Proportional RoPE: pairs past the rotated share get a huge frequency divisor, i.e. no rotation.
        n_pairs = GEMMA4_HEAD_DIM_FULL // 2
        n_rotated = int(n_pairs * GEMMA4_ROPE_PARTIAL)
        freqs = np.array([1.0] * n_rotated + [1e30] * (n_pairs - n_rotated), dtype=np.float32)
        writer.add_tensor("rope_freqs.weight", freqs)  # shared by every global layer
        for i, (swa, n_head_kv) in enumerate(zip(GEMMA4_SWA_PATTERN, GEMMA4_HEAD_COUNT_KV, strict=True)):
            p = f"blk.{i}"
            head_dim = GEMMA4_HEAD_DIM_SWA if swa else GEMMA4_HEAD_DIM_FULL
            writer.add_tensor(f"{p}.attn_norm.weight", w.norm(N_EMBD))
            _add_attention(writer, w, p, head_dim, n_head_kv)
            writer.add_tensor(f"{p}.post_attention_norm.weight", w.norm(N_EMBD, GEMMA4_POST_NORM))
            writer.add_tensor(f"{p}.ffn_norm.weight", w.norm(N_EMBD))
            _add_swiglu(writer, w, p)
            writer.add_tensor(f"{p}.post_ffw_norm.weight", w.norm(N_EMBD, GEMMA4_POST_NORM))
            writer.add_tensor(f"{p}.layer_output_scale.weight", w.norm(1))

    return _write(
        path,
        "gemma4",
        hparams,
        tensors,
        chat_template=sdist_template(GEMMA4_TEMPLATE),
        extra_tokens=GEMMA4_TOKENS,
        special_ids=GEMMA4_SPECIAL_IDS,
    )


def write_qwen35(path: Path) -> Path:
    """Write a 4-block random-weight Qwen3.5 GGUF (llama.cpp arch ``qwen35``) to ``path``; return it.

    Blocks alternate Gated DeltaNet linear attention (2 key heads and 4 value heads of size
    16, a width-4 causal conv over Q/K/V, a 16x16 state per value head, a SiLU-gated RMS
    norm on the output) and gated full attention (4 query and 2 KV heads of size 16, Q/K
    RMS norms, a sigmoid output gate from the doubled Q projection, IMRoPE on 8 of the 16
    dims). Every block has a SwiGLU feed-forward after a post-attention norm.
    """
    value_dim = QWEN35_HEAD_K_DIM * QWEN35_V_HEADS  # ssm.inner_size
    key_dim = QWEN35_HEAD_K_DIM * QWEN35_K_HEADS
    conv_dim = 2 * key_dim + value_dim

    def hparams(writer: gguf.GGUFWriter) -> None:
        writer.add_block_count(QWEN35_N_LAYER)
        writer.add_feed_forward_length(N_FF)
        writer.add_head_count(N_HEAD)
        writer.add_head_count_kv(QWEN35_HEAD_COUNT_KV)
        writer.add_key_length(QWEN35_HEAD_DIM)
        writer.add_value_length(QWEN35_HEAD_DIM)
        writer.add_rope_dimension_count(QWEN35_ROPE_DIMS)
        writer.add_rope_dimension_sections(list(QWEN35_ROPE_SECTIONS))
        writer.add_rope_freq_base(10_000_000.0)
        writer.add_full_attention_interval(QWEN35_FULL_ATTENTION_INTERVAL)
        writer.add_ssm_conv_kernel(D_CONV)
        writer.add_ssm_inner_size(value_dim)
        writer.add_ssm_state_size(QWEN35_HEAD_K_DIM)
        writer.add_ssm_time_step_rank(QWEN35_V_HEADS)
        writer.add_ssm_group_count(QWEN35_K_HEADS)

    def tensors(writer: gguf.GGUFWriter, w: _Weights) -> None:
        for i in range(QWEN35_N_LAYER):
            p = f"blk.{i}"
            writer.add_tensor(f"{p}.attn_norm.weight", w.norm(N_EMBD))
            if (i + 1) % QWEN35_FULL_ATTENTION_INTERVAL != 0:  # Gated DeltaNet
                writer.add_tensor(f"{p}.attn_qkv.weight", w.normal(conv_dim, N_EMBD))
                writer.add_tensor(f"{p}.attn_gate.weight", w.normal(value_dim, N_EMBD))
                writer.add_tensor(f"{p}.ssm_conv1d.weight", w.normal(conv_dim, D_CONV))
                # Decay per step is exp(-a * softplus(alpha + dt_bias)); as for Mamba above, dt
                # spread log-uniformly over [0.001, 0.1] and rates over [0.01, 2] leave some
                # heads with a long memory.
                dt = np.exp(w.rng.uniform(np.log(1e-3), np.log(1e-1), size=QWEN35_V_HEADS))
                writer.add_tensor(f"{p}.ssm_dt.bias", np.log(np.expm1(dt)).astype(np.float32))
                a = -np.exp(w.rng.uniform(np.log(0.01), np.log(2.0), size=QWEN35_V_HEADS))
                writer.add_tensor(f"{p}.ssm_a", a.astype(np.float32))
                writer.add_tensor(f"{p}.ssm_beta.weight", w.normal(QWEN35_V_HEADS, N_EMBD))
                writer.add_tensor(f"{p}.ssm_alpha.weight", w.normal(QWEN35_V_HEADS, N_EMBD))
                writer.add_tensor(f"{p}.ssm_norm.weight", w.norm(QWEN35_HEAD_K_DIM))
                writer.add_tensor(f"{p}.ssm_out.weight", w.normal(N_EMBD, value_dim))
            else:  # gated full attention; attn_q holds the query and the gate, per head
                q_rows = 2 * N_HEAD * QWEN35_HEAD_DIM
                _add_attention(writer, w, p, QWEN35_HEAD_DIM, QWEN35_HEAD_COUNT_KV, q_rows=q_rows)
            writer.add_tensor(f"{p}.post_attention_norm.weight", w.norm(N_EMBD))
            _add_swiglu(writer, w, p)

    return _write(
        path,
        "qwen35",
        hparams,
        tensors,
        chat_template=sdist_template(QWEN35_TEMPLATE),
        extra_tokens=QWEN35_TOKENS,
    )


def write_lfm2(path: Path) -> Path:
    """Write a 4-block random-weight LFM2 GGUF (llama.cpp arch ``lfm2``) to ``path``; return it.

    Blocks alternate LFM2's gated short convolution (``in_proj`` to B, C and x; C * conv(B * x)
    with a width-``LFM2_L_CACHE`` depthwise causal kernel; ``out_proj``) and attention (4 query
    and 2 KV heads of size 16, per-head Q/K RMS norms, NEOX RoPE with base 1e6). Every block
    has a SwiGLU feed-forward; the final norm is ``token_embd_norm`` as in LFM2's GGUFs.
    """
    head_dim = N_EMBD // N_HEAD

    def hparams(writer: gguf.GGUFWriter) -> None:
        writer.add_block_count(len(LFM2_HEAD_COUNT_KV))
        writer.add_feed_forward_length(N_FF)
        writer.add_head_count(N_HEAD)
        writer.add_head_count_kv(list(LFM2_HEAD_COUNT_KV))
        writer.add_rope_freq_base(1_000_000.0)
        writer.add_shortconv_l_cache(LFM2_L_CACHE)

    def tensors(writer: gguf.GGUFWriter, w: _Weights) -> None:
        for i, n_head_kv in enumerate(LFM2_HEAD_COUNT_KV):
            p = f"blk.{i}"
            writer.add_tensor(f"{p}.attn_norm.weight", w.norm(N_EMBD))  # LFM2's operator_norm
            if n_head_kv == 0:
                in_proj = w.normal(3 * N_EMBD, N_EMBD, scale=LFM2_IN_PROJ_SCALE)  # B, C and x
                writer.add_tensor(f"{p}.shortconv.in_proj.weight", in_proj)
                writer.add_tensor(f"{p}.shortconv.conv.weight", w.normal(N_EMBD, LFM2_L_CACHE))
                writer.add_tensor(f"{p}.shortconv.out_proj.weight", w.normal(N_EMBD, N_EMBD))
            else:
                _add_attention(writer, w, p, head_dim, n_head_kv)
            writer.add_tensor(f"{p}.ffn_norm.weight", w.norm(N_EMBD))
            _add_swiglu(writer, w, p)

    return _write(
        path,
        "lfm2",
        hparams,
        tensors,
        chat_template=sdist_template(LFM2_TEMPLATE),
        extra_tokens=LFM2_TOKENS,
        special_ids=LFM2_SPECIAL_IDS,
        output_norm="token_embd_norm.weight",
    )


KINDS: dict[str, Callable[[Path], Path]] = {
    "mamba": write_mamba,
    "hybrid": write_hybrid,
    "gemma4": write_gemma4,
    "qwen35": write_qwen35,
    "lfm2": write_lfm2,
}


def tiny_model(kind: str, cache_dir: Path | None = None) -> Path:
    """Path of the tiny ``kind`` model (one of ``KINDS``), written on first use.

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
