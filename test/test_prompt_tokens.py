"""Incremental prompt tokenization (core/prompt_tokens) equals llama.cpp's full tokenization."""

from __future__ import annotations

import random

import pytest

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.llm.llama.prompt_tokens import PromptTokenizer

PIECES = [
    "the", " robot", " counted", " item", "number", " 42", "3", " ", "  ", "\n", "\n\n", "\t",
    ".", ",", "?", "!", ":", "{", "}", "[", "]", "<", ">", "|", '"', "'", "<bos>", "<|turn>",
    "<turn|>", "model", "user", "<|\"|>", "日本語", "é", "🤖", "ß", "--", "...", "https://x.y/z",
]  # fmt: skip


@pytest.fixture(scope="module")
def engine():
    from bolt_agent.core.models import resolve_model

    eng = LlamaEngine(LlamaConfig(str(resolve_model("", kind="llm")), n_ctx=2048)).load()
    yield eng
    eng.close()


def _full(engine, text: str) -> list[int]:
    return engine.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def _random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(n))


def test_the_bundled_vocabulary_qualifies(engine):
    assert engine._tokenizer.enabled  # SPM, no space prefix, no stripping special tokens


def test_random_extensions_tokenize_exactly(engine):
    tok = PromptTokenizer(engine.llm)
    tok._checks = 0  # trust from the start: every result is compared here instead
    rng = random.Random(1)
    text = _random_text(rng, 400)
    for _ in range(60):
        cut = rng.randrange(0, len(text) + 1)
        text = text[:cut] + _random_text(rng, rng.randrange(1, 40))
        assert tok(text) == _full(engine, text), repr(text[max(0, cut - 20) : cut + 20])
    assert tok.incremental > 40  # most went the incremental way


def test_conversation_prompts_tokenize_incrementally(engine):
    tok = PromptTokenizer(engine.llm)
    tpl, knobs = engine.chat_template, Knobs(True, 24, True)
    messages = [{"role": "system", "content": "You are Reachy, a small robot."}]
    for i in range(8):
        messages.append({"role": "user", "content": f"Question {i}: where is cup {i}?"})
        text = tpl.render(messages, None, knobs)
        assert tok(text) == _full(engine, text)
        messages.append({"role": "assistant", "content": f"Cup {i} is on shelf {i}."})
    assert tok.incremental >= 6


def test_the_same_text_is_served_from_the_last_result_as_a_copy(engine):
    text = "Hello there, robot."
    tokens = engine.tokenize(text)
    tokens.append(-1)
    assert engine.tokenize(text) == tokens[:-1]
    assert engine.count_tokens(text) == len(tokens) - 1
