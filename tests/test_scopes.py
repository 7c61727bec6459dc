"""Sharing within a trust scope (issue 39, item 1): a new conversation starts from the longest
prefix another conversation of its scope holds, copied into its own slot, and exactly as if it
had evaluated it; across scopes nothing is shared, and nothing a call observes depends on another
scope's prompts.

The exact oracle (tests/oracle.py's largest_difference, deterministic handles) compares a call
that started from a shared copy with a fresh evaluation bit for bit, on a dense, a sliding-window
(full cache), a recurrent, a hybrid and a Gated DeltaNet model; it is shown to fail on each by the
smallest realistic fault, one stale token planted in the shared prefix (the ``corrupt`` hook).
The isolation probe fails when scopes are ignored: with ``Owner::shares_with`` comparing only
that both owners are scoped (not their scope), ``test_nothing_crosses_scopes`` failed on the
guessed codename: another scope saw 96 tokens of its prompt shared, as it should.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import GEMMA, SMOL, model_path, user
from oracle import GREEDY, largest_difference, text

import pyshim
from pyshim import models

# (name, model, words per message): one per memory layout that shares through its state.
CASES = [
    ("smollm2", SMOL, 40),
    ("gemma", GEMMA, 110),  # sliding window with a full-size cache ("deterministic" needs it)
    ("mamba", "tiny:mamba", 40),
    ("hybrid", "tiny:hybrid", 40),
    ("qwen35", "tiny:qwen35", 20),
    ("gemma4", "tiny:gemma4", 20),  # a full-size window whose copy holds only the window (issue 54)
    ("lfm2", "tiny:lfm2", 20),
]
STALE = {"kind": "stale", "at": 30}  # one wrong token inside the shared prefix


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def exact(request: pytest.FixtureRequest) -> Iterator[tuple[str, pyshim.Model, pyshim.Model, int]]:
    name, spec, words = request.param
    config = {"n_ctx": 4096, "n_seq": 2, "temperature": 0, "deterministic": True}
    with pyshim.Model(model_path(spec), **config) as shared, pyshim.Model(model_path(spec), **config) as fresh:
        yield name, shared, fresh, words


def test_a_shared_prefix_computes_what_a_fresh_evaluation_does(exact) -> None:
    name, shared, fresh, words = exact
    rng = random.Random(f"scope-{name}")
    system = {"role": "system", "content": "You are a terse assistant. " + text(rng, words)}
    first = [system, {"role": "user", "content": text(rng, words)}]
    second = [system, {"role": "user", "content": text(rng, words)}]

    def second_call(test: dict[str, Any]) -> dict[str, Any]:
        shared.reset()
        shared.generate(first, max_tokens=2, session="A")
        return shared.generate(second, max_tokens=3, session="B", **GREEDY, _test=test)

    good = second_call({})
    assert good["shared_prefix"] and good["slot"] == 1, good
    assert good["n_reused"] > 30, good["n_reused"]
    f = fresh.generate(second, max_tokens=3, **GREEDY, session="F", cache_prompt=False)
    assert not f["shared_prefix"] and f["n_reused"] == 0
    assert largest_difference(f, good) == 0, f"{name}: a shared prefix differs from a fresh evaluation"
    bad = second_call({"corrupt": STALE})
    assert bad["shared_prefix"]
    assert largest_difference(f, bad) > 0, f"{name}: a stale token in the shared prefix changed nothing"


def secret(codename: str) -> list[dict[str, Any]]:
    filler = text(random.Random("scopes"), 60)
    return [{"role": "system", "content": f"Secret project codename is {codename}. {filler}"}, *user("Hello.")]


@pytest.fixture(scope="module")
def smol() -> Iterator[pyshim.Model]:
    with pyshim.Model(models.path(SMOL), n_ctx=2048, n_seq=2, temperature=0) as m:
        yield m


def test_nothing_crosses_scopes(smol: pyshim.Model) -> None:
    """Tenant B guesses tenant A's system prompt: what B observes is the same whether the guess
    is right or wrong, in a session of its own or in its pool. Within A's scope the right guess
    does show (the probe can see sharing)."""
    seen: dict[tuple[str, str, str | None], tuple[int, bool]] = {}
    for guess in ("BLUEBIRD", "REDFOX"):
        for scope in ("tenant-b", "tenant-a"):
            for session in ("B", None):
                smol.reset()
                smol.generate(secret("BLUEBIRD"), max_tokens=2, session="A", scope="tenant-a")
                opts = {"session": session} if session else {}
                r = smol.generate(secret(guess), max_tokens=1, scope=scope, **opts)
                seen[guess, scope, session] = r["n_reused"], r["shared_prefix"]
    other = {k: v for k, v in seen.items() if k[1] == "tenant-b"}
    assert set(other.values()) == {(0, False)}, other
    assert seen["BLUEBIRD", "tenant-a", "B"][1] and seen["BLUEBIRD", "tenant-a", None][1], seen
    assert seen["BLUEBIRD", "tenant-a", "B"][0] > seen["REDFOX", "tenant-a", "B"][0], seen


def test_the_source_is_only_read(smol: pyshim.Model) -> None:
    """Sharing copies: the conversation shared from keeps all of its cache, in its slot and in
    host memory, and a scope's sessions still never take each other's slots."""
    smol.reset()
    a = secret("BLUEBIRD")
    first = smol.generate(a, max_tokens=4, session="A")
    b = smol.generate(secret("BLUEBIRD")[:1] + user("Something else entirely."), max_tokens=2, session="B")
    assert b["shared_prefix"] and b["slot"] != first["slot"], b
    again = smol.generate([*a, first["message"], *user("And then?")], max_tokens=1, session="A")
    assert again["slot"] == first["slot"] and not again["shared_prefix"]
    assert again["n_reused"] >= first["n_prompt"], (again["n_reused"], first["n_prompt"])


def test_a_host_memory_entry_is_shared_by_copy() -> None:
    with pyshim.Model(models.path(SMOL), n_ctx=2048, n_seq=1, temperature=0) as m:
        a = secret("BLUEBIRD")
        first = m.generate(a, max_tokens=2, session="A")
        b = m.generate(a[:1] + user("Another question."), max_tokens=2, session="B")  # A goes to host memory
        assert b["shared_prefix"] and b["n_reused"] > 0.8 * first["n_prompt"] - 20, b
        back = m.generate(a, max_tokens=1, session="A")
        assert back["restored_from_host"] and back["n_reused"] > 0.9 * back["n_prompt"], back
        assert m.stats()["cache"]["n_shared"] == 1


def test_forgetting_a_scope_and_a_handle_without_one(smol: pyshim.Model) -> None:
    smol.reset()
    smol.generate(secret("BLUEBIRD"), max_tokens=2, session="A", scope="t")
    smol.forget(scope="t")
    r = smol.generate(secret("BLUEBIRD"), max_tokens=1, session="B", scope="t")
    assert not r["shared_prefix"] and r["n_reused"] == 0, r
    smol.forget("B", scope="t")
    assert all(s["n_tokens"] == 0 for s in smol.stats()["cache"]["slots"] if s["scope"] == "t")
    with pyshim.Model(models.path(SMOL), n_ctx=2048, n_seq=2, temperature=0, scope=None) as alone:
        alone.generate(secret("BLUEBIRD"), max_tokens=2, session="A")
        r = alone.generate(secret("BLUEBIRD"), max_tokens=1, session="B")
        assert not r["shared_prefix"] and r["n_reused"] == 0, r  # sessions share nothing, as in ABI 1.10
        shared = alone.generate(secret("BLUEBIRD"), max_tokens=1, session="C", scope="named")
        assert not shared["shared_prefix"]  # another scope than the unscoped sessions'


def test_bad_scopes_are_refused(smol: pyshim.Model) -> None:
    with pytest.raises(pyshim.InvalidRequest, match="scope"):
        smol.generate(user("Hi"), max_tokens=1, scope=3)
    with pytest.raises(pyshim.InvalidRequest, match="256"):
        smol.generate(user("Hi"), max_tokens=1, scope="x" * 257)
    with pytest.raises(pyshim.ModelLoadError, match="scope"):
        pyshim.Model(models.path(SMOL), scope=["a"])
    assert smol.generate(user("Hi"), max_tokens=1)["finish_reason"] == "length"


def test_the_door_gives_each_api_key_its_own_scope(start_server, tmp_path) -> None:
    """Through a real server and the official clients: a key's second conversation starts from
    the system prompt its first evaluated (``cached_tokens``), another key's never does, a key
    from --api-key-file is taken, and one that is not gets 401."""
    import anthropic
    import openai

    keys = tmp_path / "keys"
    keys.write_text("# tenants\nkey-b\n")
    url = start_server(SMOL, "--n-seq", "2", "--api-key", "key-a", "--api-key-file", str(keys))
    system = secret("BLUEBIRD")[0]

    def chat(key: str, session: str, question: str) -> int:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
        r = c.chat.completions.create(
            model=SMOL, messages=[system, *user(question)], max_tokens=1, temperature=0, extra_body={"session": session}
        )
        return r.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]

    assert chat("key-a", "one", "Hello.") == 0
    assert chat("key-a", "two", "Good morning.") > 50  # copied from session one's slot
    assert chat("key-b", "two", "Good morning.") == 0  # the same session name, another tenant
    a = anthropic.Anthropic(base_url=url, api_key="key-b", max_retries=0, timeout=120)
    m = a.messages.create(model=SMOL, system=system["content"], messages=[*user("Hi there.")], max_tokens=1)
    assert m.usage.cache_read_input_tokens and m.usage.cache_read_input_tokens > 50, m.usage
    with pytest.raises(openai.AuthenticationError):
        chat("key-c", "one", "Hello.")
