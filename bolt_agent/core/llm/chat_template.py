"""Prompt rendering with Jinja2: the GGUF's own chat template, else the bundled Bolt template.

The three request knobs are passed to the template as variables (what Bolt E4B's template reads).
If a template ignores a knob, the renderer injects the seed's exact instruction into the system
message itself, so every request honours the knobs whatever template the model ships.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

from jinja2 import TemplateError, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bolt_agent.core.llm import gemma4_syntax
from bolt_agent.core.llm.markers import THINK_OPEN  # noqa: F401  (part of this module's API)

BUDGET_INSTRUCTION = (
    "Ensure that your thinking process is concise and does not exceed {budget} tokens"
)
BREVITY_INSTRUCTION = (
    "Keep responses brief, natural, and easy to understand in conversation. Focus on the most "
    "relevant points and avoid unnecessary detail unless asked."
)


class ChatTemplateError(ValueError):
    """The chat template failed to render."""


@dataclass(frozen=True)
class Knobs:
    """Per-request controls from the Bolt E4B chat template."""

    enable_thinking: bool = True
    thinking_token_budget: int | None = None
    conversational_mode: bool = False

    def template_vars(self) -> dict[str, Any]:
        return {
            "enable_thinking": self.enable_thinking,
            "thinking_token_budget": self.thinking_token_budget,
            "conversational_mode": self.conversational_mode,
        }


def bundled_template_source() -> str:
    return (
        resources.files("bolt_agent.core.llm").joinpath("templates/bolt_gemma4.jinja").read_text()
    )


class ChatTemplate:
    """A compiled chat template plus the special-token strings it needs."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", name: str = ""):
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, undefined=Undefined
        )  # lenient: real templates probe optional fields such as message.reasoning_content
        env.filters["gemma4_declaration"] = gemma4_syntax.format_declaration
        env.filters["gemma4_call"] = lambda c: gemma4_syntax.format_call(
            c["function"]["name"] if "function" in c else c["name"],
            _args(c["function"]["arguments"] if "function" in c else c["arguments"]),
        )
        env.filters["gemma4_response"] = lambda r: gemma4_syntax.format_response(
            r.get("name", "unknown"), r.get("response")
        )
        env.filters["tojson"] = lambda v, indent=None: json.dumps(v, indent=indent)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template {name!r} does not compile: {exc}") from exc
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.name = name or "custom"

    @classmethod
    def bundled(cls, bos_token: str = "<bos>") -> ChatTemplate:
        return cls(bundled_template_source(), bos_token=bos_token, name="bolt_gemma4 (bundled)")

    @classmethod
    def for_gguf(cls, llm: Any, override: str = "") -> ChatTemplate:
        """The template a loaded GGUF (a ``llama_cpp.Llama``, weights or vocabulary only) is
        rendered with: ``override``, else the GGUF's own, else the bundled Bolt template; its
        BOS/EOS strings from the vocabulary. One rule for the local and the remote engine."""
        bos, eos = _token_text(llm, llm.token_bos()), _token_text(llm, llm.token_eos())
        source = override or llm.metadata.get("tokenizer.chat_template", "")
        if source:
            return cls(source, bos_token=bos, eos_token=eos, name="gguf")
        return cls.bundled(bos_token=bos)

    @property
    def is_bundled(self) -> bool:
        return self.name.endswith("(bundled)")

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        knobs: Knobs = Knobs(),
        add_generation_prompt: bool = True,
    ) -> str:
        text = self._render(messages, tools, knobs, add_generation_prompt)
        missing = []
        if knobs.thinking_token_budget is not None and knobs.thinking_token_budget >= 0:
            budget = BUDGET_INSTRUCTION.format(budget=knobs.thinking_token_budget)
            if budget not in text:
                missing.append(budget + ".")
        if knobs.conversational_mode and BREVITY_INSTRUCTION not in text:
            missing.append(BREVITY_INSTRUCTION)
        if missing:  # the template ignores a knob: inject its instruction ourselves
            messages = _with_system_suffix(messages, "\n\n".join(missing))
            text = self._render(messages, tools, knobs, add_generation_prompt)
        return text

    def _render(self, messages, tools, knobs: Knobs, add_generation_prompt: bool) -> str:
        try:
            return self._template.render(
                messages=messages,
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **knobs.template_vars(),
            )
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template {self.name!r} failed: {exc}") from exc


def _with_system_suffix(messages: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = (first.get("content") or "").rstrip() + "\n\n" + suffix
        return [first, *messages[1:]]
    return [{"role": "system", "content": suffix}, *messages]


def _args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return {"raw": arguments}
    return arguments if isinstance(arguments, dict) else {"value": arguments}


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


def _token_text(llm: Any, token: int) -> str:
    if token < 0:
        return ""
    return llm.detokenize([token], special=True).decode("utf-8", errors="replace")
