"""A model's own sampling (config/models.yaml `sampling:`) where llm_node's is left at its
defaults: greedy for the bundled base model, the seed's defaults kept for Bolt E4B."""

from __future__ import annotations

import dataclasses

import pytest

from bolt_agent.core.llm.types import SamplingParams
from bolt_agent.core.models import (
    SAMPLING_KEYS,
    load_specs,
    model_sampling,
    resolve_model,
    with_model_sampling,
)
from bolt_agent.nodes.llm_params import LlmParams

DEFAULTS = dataclasses.asdict(LlmParams())
SEED = {k: DEFAULTS[k] for k in SAMPLING_KEYS}


def test_the_node_defaults_are_the_seeds_and_every_key_is_a_sampling_field():
    seed = SamplingParams()
    assert SEED == {"temperature": 1.0, "top_p": 0.95, "top_k": 64, "min_p": 0.0}
    assert all(getattr(seed, k) == v for k, v in SEED.items())
    assert DEFAULTS["model_sampling"] is True


def test_the_bundled_base_model_is_greedy_by_name_default_or_path():
    gguf = str(resolve_model("", kind="llm"))
    for name in ("", "gemma3-270m", gguf):
        assert model_sampling(name) == {"temperature": 0.0}, name
        assert with_model_sampling(name, SEED, DEFAULTS) == {**SEED, "temperature": 0.0}


def test_bolt_e4b_keeps_the_seed_defaults_and_a_value_set_on_purpose_wins():
    specs, _ = load_specs()
    assert specs["bolt-e4b-q4km"].sampling == {}
    assert with_model_sampling("bolt-e4b-q4km", SEED, DEFAULTS) == SEED
    chosen = {**SEED, "temperature": 0.7}
    assert with_model_sampling("gemma3-270m", chosen, DEFAULTS) == chosen
    assert model_sampling("/no/such/file.gguf") == {}


def test_an_unknown_sampling_key_is_a_clear_error(tmp_path):
    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  m: {kind: llm, path: /x.gguf, sampling: {temprature: 0}}\n")
    with pytest.raises(ValueError, match="temprature"):
        load_specs(bad)
