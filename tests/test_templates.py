"""Which chat template a model renders with, said where a user looks (el_stats, `models list`), and
what follows from it: a model with no template of its own answers without writing the fallback's
markers, and tools a template cannot show the model are a warning, never silently dropped."""

from __future__ import annotations

import warnings

import pytest
from conftest import WEATHER_TOOL, user

import pyshim
from pyshim import models


@pytest.mark.parametrize("fixture", ["qwen", "gemma", "smol"])
def test_the_catalogue_says_what_el_stats_sees(fixture: str, request: pytest.FixtureRequest) -> None:
    m: pyshim.Model = request.getfixturevalue(fixture)
    entry = models.CATALOGUE[m.path.stem]
    seen = m.stats()["chat_template"]
    assert (seen["source"], seen["supports_tools"]) == (entry.template, entry.tools)


@pytest.mark.parametrize("prompt", ["Say hello.", "What is the capital of France?", "Write one short sentence."])
def test_a_model_without_a_template_answers_without_the_fallbacks_markers(gemma: pyshim.Model, prompt: str) -> None:
    """gemma-3-270m has no template: ChatML's markers are plain text to it, which it wrote out and went
    on to invent the next turn ('Say hello.<|im_end|>\\n<|im_start|>admin...') until they ended its reply."""
    r = gemma.generate(user(prompt), max_tokens=48)
    assert "<|im_" not in (r["content"] or "") and "im_start" not in (r["content"] or ""), r["content"]


def test_tools_a_template_cannot_show_are_a_warning(smol: pyshim.Model, qwen: pyshim.Model) -> None:
    with pytest.warns(pyshim.ModelWarning, match="does not show tools to the model"):
        r = smol.generate(user("What is the weather in Paris?"), [WEATHER_TOOL], max_tokens=8)
    assert r["warnings"] and "chat template" in r["warnings"][0]
    assert "warnings" not in smol.generate(user("Hi"), max_tokens=2)  # without tools: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error", pyshim.ModelWarning)
        assert "warnings" not in qwen.generate(user("What is the weather in Paris?"), [WEATHER_TOOL], max_tokens=8)
