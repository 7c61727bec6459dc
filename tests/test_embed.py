"""Model.embed / el_embed: pooled embeddings from the model's hidden states, beside generation.

What must hold: a vector means something (a paraphrase is nearer than an unrelated sentence, on
every catalogue model); an input's vector depends on nothing but the input (alone or in a list,
before or after generations, while another thread generates); embedding never disturbs a
generation; bad input is a clear error and the next call works."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import GEMMA, QWEN, SMOL, model_path, user

import pyshim

TEXTS = ["The cat sat on the mat.", "A kitten rested on the rug.", "Stock markets fell sharply today."]


@pytest.mark.parametrize("name", [QWEN, SMOL, GEMMA])
def test_a_paraphrase_is_nearer_than_an_unrelated_sentence(name: str) -> None:
    with pyshim.Model(model_path(name), n_ctx=512) as m:
        v = m.embed(TEXTS)
        n_embd = m.embeddings("x")["n_embd"]
    assert v.shape == (3, n_embd) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1


def test_a_vector_depends_only_on_its_input(qwen: pyshim.Model) -> None:
    """Alone or third in a list, before or after generations, and while another thread
    generates on the same handle: bit for bit the same vector (each input is one batch on a
    cleared cache); and the generation is the one it would have been without the embedding."""
    alone = qwen.embed(TEXTS[2])
    assert alone.ndim == 1
    in_list = qwen.embed(TEXTS)[2]
    qwen.generate(user("Say something about markets."), max_tokens=8, temperature=0)
    after = qwen.embed(TEXTS[2])
    assert np.array_equal(alone, in_list) and np.array_equal(alone, after)
    tokens = qwen.embeddings(TEXTS[2])["data"][0]["n_tokens"]
    assert tokens > 3

    ask = user("Count from 1 to 20, separated by commas.")
    expected = qwen.generate(ask, max_tokens=40, temperature=0)["content"]
    seen: dict[str, str] = {}

    def generate() -> None:
        seen["text"] = qwen.generate(ask, max_tokens=40, temperature=0)["content"]

    worker = threading.Thread(target=generate)
    worker.start()
    during = [qwen.embed(TEXTS) for _ in range(3)]
    worker.join()
    assert seen["text"] == expected
    assert all(np.array_equal(d[2], alone) for d in during)


def test_unnormalized_and_truncated(smol: pyshim.Model) -> None:
    raw = smol.embed(TEXTS[0], normalize=False)
    unit = smol.embed(TEXTS[0])
    assert abs(float(np.linalg.norm(raw)) - 1.0) > 1e-3
    assert np.allclose(raw / np.linalg.norm(raw), unit, atol=1e-6)
    long = "word " * 2000
    with pytest.raises(pyshim.InvalidRequest, match="embd_ctx"):
        smol.embed(long)
    result = smol.embeddings(long, truncate=True)
    assert result["data"][0]["n_tokens"] == 512 and result["data"][0]["truncated"] is True
    tokens = smol.embeddings([[1, 2, 3], [4, 5]])
    assert [d["n_tokens"] for d in tokens["data"]] == [3, 2]


@pytest.mark.parametrize("bad", ["", [], [""], ["ok", 3], [10**9], {"text": "x"}, None, [[1], "x"], [[]]], ids=repr)
def test_bad_input_is_a_clear_error_and_the_next_call_works(smol: pyshim.Model, bad: object) -> None:
    with pytest.raises(pyshim.InvalidRequest):
        smol.embeddings(bad)  # type: ignore[arg-type]
    assert smol.embed("fine").shape == (576,)


def test_options_are_checked(smol: pyshim.Model) -> None:
    with pytest.raises(pyshim.InvalidRequest, match="dimensions"):
        smol.embeddings("x", dimensions=3)
    with pytest.raises(pyshim.InvalidRequest, match="normalize"):
        smol.embeddings("x", normalize="yes")


def test_pooling_is_a_setting() -> None:
    """embd_pooling picks what is pooled (the model names none: mean by default); "last" is the
    last token's hidden state, which no other input shares, so the vectors differ."""
    smol_path = model_path(SMOL)
    with pyshim.Model(smol_path, embd_pooling="last", embd_ctx=64) as m:
        last = m.embeddings(TEXTS[0])
        with pytest.raises(pyshim.InvalidRequest, match="embd_ctx"):
            m.embed("word " * 100)
    with pyshim.Model(smol_path) as m:
        mean = m.embeddings(TEXTS[0])
    assert (last["pooling"], mean["pooling"]) == ("last", "mean")
    assert last["data"][0]["embedding"] != mean["data"][0]["embedding"]
    with pytest.raises(pyshim.ModelLoadError, match="embd_pooling"):
        pyshim.Model(smol_path, embd_pooling="max")


def test_close_and_cancel_stop_an_embed_call() -> None:
    """el_close while another thread embeds 2,000 inputs: the call ends with an error at once,
    not after the whole list; and el_cancel does the same, leaving the handle usable."""
    smol_path = model_path(SMOL)
    many = [f"sentence number {i} about nothing in particular" for i in range(2000)]
    m = pyshim.Model(smol_path)
    m.embed("warm up")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            m.embeddings(many)
        except BaseException as e:  # the test inspects it
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    threading.Event().wait(0.3)
    m.cancel()
    t.join(timeout=5)
    assert not t.is_alive() and errors and "cancel" in str(errors[0])
    assert m.embed("after").shape == (576,)
    t = threading.Thread(target=run)
    errors.clear()
    t.start()
    threading.Event().wait(0.3)
    m.close()
    t.join(timeout=5)
    assert not t.is_alive() and errors
