"""What a voice can say: the sentence filter between the model and the TTS.

Constrained decoding already admits only speakable characters (``tool_grammar.SPEAKABLE_REST``);
free decoding does not, and a model that half-remembers its chat format writes fragments such as
``tool_call|`` or ``|tool_response|>`` into its speech. Those fragments are dropped (and reported
so the node can log them) instead of being read aloud.
"""

from __future__ import annotations

import re

#: characters no spoken sentence contains (markup, template and code syntax)
MARKUP_CHARS = frozenset("|<>{}[]_\\*#@=~^`")
#: words of the chat formats themselves, with or without their markup
TEMPLATE_WORDS = re.compile(
    r"tool_?calls?|tool_?responses?|(?:start|end)_of_turn|\bcall:|\bresponse:|\bdeclaration:",
    re.IGNORECASE,
)


def is_speakable(sentence: str) -> bool:
    """True when the sentence has something to say and no markup or template word."""
    return (
        any(c.isalnum() for c in sentence)
        and not MARKUP_CHARS.intersection(sentence)
        and not TEMPLATE_WORDS.search(sentence)
    )


def clean_sentence(sentence: str) -> tuple[str, list[str]]:
    """(what may be spoken, the fragments dropped). Words holding markup or a template word go;
    the rest is kept when it still has a letter or digit, else nothing is spoken (bare
    punctuation is not reported: it is no markup, just nothing to say)."""
    kept: list[str] = []
    dropped: list[str] = []
    for word in sentence.split():
        if MARKUP_CHARS.intersection(word) or TEMPLATE_WORDS.search(word):
            dropped.append(word)
        else:
            kept.append(word)
    text = " ".join(kept).strip()
    if not any(c.isalnum() for c in text):
        text = ""
    return text, dropped
