"""``/v1/chat/completions`` for servers that only speak chat (NIM, hosted APIs).

The server renders the prompt with its own template, so the runner's rendered string cannot be
sent: ``ChatRequestTemplate`` renders it as usual (token counting, and the text the local
fallback continues from) but returns a ``ChatPrompt`` that also carries the messages, tools and
knobs. Streamed deltas are turned back into the text the output parser reads: reasoning between
the thinking markers, content as speech as it arrives, and the tool calls (streamed in
fragments) as ``<tool_call>{json}</tool_call>`` once the stream ends, so they are dispatched after
the speech. The knobs go as ``chat_template_kwargs`` (as in the seed's client); a thinking budget
that runs out closes the stream and asks again with thinking off.
"""

from __future__ import annotations

import json
from typing import Any

from bolt_agent.core.llm.chat_template import ChatTemplate, Knobs
from bolt_agent.core.llm.markers import THINK_CLOSE, THINK_OPEN
from bolt_agent.core.llm.remote.session import StreamSession
from bolt_agent.core.llm.types import SamplingParams, Token


class ChatPrompt(str):
    """A rendered prompt that remembers what it was rendered from."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    knobs: Knobs


class ChatRequestTemplate(ChatTemplate):
    """Our template for counting and fallback; the server's for generation."""

    def __init__(self, inner: ChatTemplate):
        super().__init__(
            inner.source, inner.bos_token, inner.eos_token, name=f"server ({inner.name})"
        )

    def render(self, messages, tools=None, knobs: Knobs | None = None, add_generation_prompt=True):
        knobs = knobs or Knobs()
        prompt = ChatPrompt(super().render(messages, tools, knobs, add_generation_prompt))
        prompt.messages, prompt.tools, prompt.knobs = list(messages), tools, knobs
        return prompt


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dialogue messages (Gemma-style ``tool_responses`` on the assistant turn) → OpenAI's
    (assistant ``tool_calls`` with ids, then one ``tool`` message per response)."""
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant" or not msg.get("tool_calls"):
            out.append({"role": msg["role"], "content": msg.get("content", "")})
            continue
        calls = []
        for j, call in enumerate(msg["tool_calls"]):
            fn = call.get("function", call)
            args = fn.get("arguments", {})
            calls.append(
                {
                    "id": f"call_{i}_{j}",
                    "type": "function",
                    "function": {
                        "name": fn["name"],
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
            )
        out.append({"role": "assistant", "content": msg.get("content") or "", "tool_calls": calls})
        for j, response in enumerate(msg.get("tool_responses", [])):
            content = json.dumps(response.get("response"), default=str)
            out.append({"role": "tool", "tool_call_id": f"call_{i}_{j}", "content": content})
    return out


class ChatSession(StreamSession):
    endpoint = "chat/completions"

    def __init__(self, engine, prompt: str):
        super().__init__(engine, prompt)
        if not isinstance(prompt, ChatPrompt):
            raise TypeError("chat api: render the prompt with the engine's chat_template")
        self._thinking_off = not prompt.knobs.enable_thinking
        self._in_thought = False
        self._calls: dict[int, dict[str, str]] = {}

    def request(self, sampling: SamplingParams, grammar: str | None) -> dict[str, Any]:
        p: ChatPrompt = self.prompt  # type: ignore[assignment]
        body = self._engine.body(sampling, None)  # the server's template structures the output
        body["messages"] = openai_messages(p.messages)
        if p.tools:
            body["tools"] = p.tools
        knobs = p.knobs.template_vars()
        if self._thinking_off:
            knobs["enable_thinking"] = False
        body["chat_template_kwargs"] = knobs
        return body

    def tokens(self, event: dict[str, Any]) -> list[Token]:
        choices = event.get("choices") or [{}]
        delta = choices[0].get("delta") or {}
        out: list[Token] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and not self._thinking_off:
            if not self._in_thought:
                self._in_thought = True
                out.append(Token(id=-1, text=THINK_OPEN))
            out.append(Token(id=-1, text=reasoning))
        content = delta.get("content")
        if content:
            out.extend(self._close_thought())
            out.append(Token(id=-1, text=content))
        for call in delta.get("tool_calls") or []:
            slot = self._calls.setdefault(int(call.get("index", 0)), {"name": "", "arguments": ""})
            fn = call.get("function") or {}
            slot["name"] += fn.get("name") or ""
            slot["arguments"] += fn.get("arguments") or ""
        if choices[0].get("finish_reason") is not None:
            out.extend(self.finish())
        return out

    def _close_thought(self) -> list[Token]:
        if not self._in_thought:
            return []
        self._in_thought = False
        return [Token(id=-1, text=THINK_CLOSE)]

    def finish(self) -> list[Token]:
        out = self._close_thought()
        for index in sorted(self._calls):
            call = self._calls[index]
            try:
                args = json.loads(call["arguments"] or "{}")
            except ValueError:
                args = call["arguments"]  # the parser reports it as an invalid call
            body = json.dumps({"name": call["name"], "arguments": args})
            out.append(Token(id=-1, text=f"<tool_call>{body}</tool_call>"))
        self._calls.clear()
        out.append(Token(id=-1, text="", is_eog=True))
        return out

    def force(self, text: str) -> list[Token]:
        """The end-of-thinking marker: ask again with thinking off (a chat request cannot
        continue a half-written answer). Anything else forced is the server's business."""
        if self._in_thought:
            self.close_stream()
            self._pending.clear()
            self._in_thought = False
            self._thinking_off = True
            self._calls.clear()
            self.text += text
            return [Token(id=-1, text=text)]
        return []
