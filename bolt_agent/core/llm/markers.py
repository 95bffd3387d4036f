"""The marker strings of the chat formats the parser, the template and the decoders agree on.

One place, because a marker spelled differently in two modules fails silently: the parser would
speak a thought aloud, or the speculative decoder would draft across a phase change.
"""

from __future__ import annotations

#: Generation prefix that opens a thought block (Gemma 4 / Bolt syntax).
THINK_OPEN = "<|channel>thought\n"
#: End of a Gemma 4 / Bolt thought block.
THINK_CLOSE = "<channel|>"
#: (open, close) of a thinking block: Gemma 4 / Bolt, then the ``<think>`` convention.
THINK_BLOCKS = (("<|channel>thought", THINK_CLOSE), ("<think>", "</think>"))
#: (open, close, kind) of a tool call: Gemma 4 ``call:NAME{...}`` or the constrained JSON form.
CALL_BLOCKS = (("<|tool_call>", "<tool_call|>", "gemma4"), ("<tool_call>", "</tool_call>", "json"))
#: Markers that end the model's turn (Gemma 4, Gemma 3, a tool-response opening, ChatML, EOS),
#: and the openings of a next turn (a base model continuing the transcript starts the user's).
TURN_ENDS = (
    "<turn|>",
    "<end_of_turn>",
    "<|tool_response>",
    "<|im_end|>",
    "<eos>",
    "<|turn>",
    "<start_of_turn>",
)
#: Thinking open/close markers: the answer grammar starts after them.
PHASE_MARKERS = tuple(m for pair in THINK_BLOCKS for m in pair)
