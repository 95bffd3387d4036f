"""llm_node's parameters: one frozen dataclass, each field declared once with its description
(``param``); ``config/params/llm_node.yaml`` mirrors the defaults. Kept apart from the node's
wiring because the LLM has many knobs (model, memory, sampling, remote engine, few-shot, caps)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue
from bolt_agent.core.llm.llama.engine import LlamaConfig
from bolt_agent.core.llm.profile import Profile
from bolt_agent.core.llm.reply_guard import ReplyGuard
from bolt_agent.core.llm.tool_selection import ToolSelector
from bolt_agent.core.llm.turn_runner import RunnerConfig
from bolt_agent.core.llm.types import SamplingParams
from bolt_agent.nodes.params import param


@dataclass(frozen=True)
class LlmParams:
    """llm_node parameters; config/params/llm_node.yaml mirrors the defaults."""

    model: str = param(
        "", "model name from config/models.yaml or a GGUF path ('' = default llm)", load_time=True
    )
    n_ctx: int = param(4096, "context window (up to 65536 for Bolt E4B)", load_time=True, low=128)
    n_gpu_layers: int = param(
        0, "layers offloaded to the GPU (-1 = all; Jetson)", load_time=True, low=-1
    )
    n_threads: int = param(2, "CPU threads for llama.cpp decoding", load_time=True, low=1)
    n_threads_batch: int = param(
        0, "CPU threads for prompt prefill (0 = n_threads)", load_time=True, low=0
    )
    n_batch: int = param(256, "prompt batch size", load_time=True, low=1)
    n_ubatch: int = param(
        64,
        "physical batch: compute buffer n_vocab x n_ubatch x 4 B (the attention scores of "
        "n_kv x n_ubatch are touched), SWA cache n_swa + n_ubatch cells (padded to 256)",
        load_time=True,
        low=1,
    )
    swa_full: bool = param(
        False, "full-size sliding-window KV cache (n_ctx cells per SWA layer)", load_time=True
    )
    flash_attn: str = param(
        "auto",
        "on | off | auto (on with GPU layers)",
        load_time=True,
        choices=("on", "off", "auto"),
    )
    cache_type_k: str = param(
        "auto",
        "K cache type: auto | f16 | q8_0 | q4_0 (q8_0: 34 B per 32 values, 0.53 x f16; auto: "
        "q8_0 without flash attention, else cache_type_v's type)",
        load_time=True,
        choices=("auto", "f16", "q8_0", "q4_0"),
    )
    cache_type_v: str = param(
        "f16",
        "V cache type: f16 | q8_0 | q4_0 (quantised needs flash_attn)",
        load_time=True,
        choices=("f16", "q8_0", "q4_0"),
    )
    use_mmap: bool = param(True, "map the GGUF (host tensors load on first touch)", load_time=True)
    cpu_repack: bool = param(
        False,
        "llama.cpp's repacked copy of the CPU weights (use_extra_bufts); off, they stay "
        "file-backed pages (less resident memory; docs/memory.md has the figures)",
        load_time=True,
    )
    embeddings: str = param(
        "auto",
        "embedding tables: auto (pinned host copy with a GPU) | mmap (only used rows resident)",
        load_time=True,
        choices=("auto", "mmap"),
    )
    chat_template: str = param(
        "", "Jinja chat template override ('' = GGUF's own, else bundled)", load_time=True
    )
    speculative: str = param(
        "none",
        "none | dflash | ngram | draft_model (falls back with a logged reason)",
        load_time=True,
        choices=("none", "dflash", "ngram", "draft_model"),
    )
    draft_model: str = param("", "DFlash drafter or draft GGUF: model name or path", load_time=True)
    spec_n_max: int = param(7, "draft tokens per speculative step", load_time=True, low=1, high=64)
    spec_p_min: float = param(
        0.0, "stop a draft below this drafter probability", load_time=True, low=0.0, high=1.0
    )
    engine: str = param(
        "local",
        "local (llama.cpp in this process) | openai (an OpenAI-compatible server, docs/remote.md)",
        load_time=True,
        choices=("local", "openai"),
    )
    base_url: str = param(
        "http://127.0.0.1:8080/v1", "openai: the server's /v1 URL", load_time=True
    )
    api_key_env: str = param(
        "", "openai: NAME of the environment variable holding the key ('' = none)", load_time=True
    )
    remote_model: str = param(
        "", "openai: the server's model name ('' = its default)", load_time=True
    )
    remote_api: str = param(
        "completions",
        "completions (raw prompt, our template, grammar) | chat (server template, tools)",
        load_time=True,
        choices=("completions", "chat"),
    )
    remote_grammar_field: str = param(
        "grammar",
        "completions: grammar (llama.cpp) | guided_grammar / structured_outputs (vLLM) | none",
        load_time=True,
        choices=("grammar", "guided_grammar", "structured_outputs", "none"),
    )
    remote_timeout_s: float = param(
        10.0, "openai: refused, dropped or silent this long = failed", load_time=True, low=0.1
    )
    remote_fallback: str = param(
        "none",
        "openai: none | local (a failed turn is answered by the local engine)",
        load_time=True,
        choices=("none", "local"),
    )
    remote_fallback_warm: bool = param(
        True, "local fallback loaded at configure (false: on the first failure)", load_time=True
    )
    profile: str = param(
        "reachy_mini", "persona + tools: config/profiles/<name>.yaml", load_time=True
    )
    temperature: float = param(
        1.0, "sampling temperature (seed default 1.0)", load_time=True, low=0.0
    )
    top_p: float = param(
        0.95, "nucleus sampling (seed default 0.95)", load_time=True, low=0.0, high=1.0
    )
    top_k: int = param(64, "top-k sampling (seed default 64)", load_time=True, low=0)
    min_p: float = param(0.0, "min-p sampling (0 = off)", load_time=True, low=0.0, high=1.0)
    seed: int = param(-1, "sampling seed (-1 = random)", load_time=True)
    model_sampling: bool = param(
        True,
        "local engine: the model's own sampling from config/models.yaml (its sampling:, e.g. "
        "greedy for the bundled base model) for temperature/top_p/top_k/min_p left at their "
        "defaults; false: the parameters as they are",
        load_time=True,
    )
    enable_thinking: bool = param(True, "default for requests: reason before answering")
    thinking_token_budget: int = param(-1, "default thinking budget in tokens (-1 = unset)", low=-1)
    conversational_mode: bool = param(False, "default: inject the brevity instruction")
    tool_choice: str = param("auto", "auto | none | required | <tool name> (first step of a turn)")
    constrained: str = param(
        "auto",
        "GBNF output: on | off | auto (on when the GGUF has no template)",
        load_time=True,
        choices=("on", "off", "auto"),
    )
    few_shot: str = param(
        "auto",
        "profile's example turns before the history: on | off | auto (on in constrained mode)",
        load_time=True,
        choices=("on", "off", "auto"),
    )
    few_shot_nearest: int = param(
        1,
        "with few_shot: the N profile examples most like the request, rendered right before it "
        "(retrieval few-shot, not stored in the history; 0 = off; each costs ~75 tokens of "
        "prefill per turn, ~110 in full)",
        load_time=True,
        low=0,
        high=8,
    )
    few_shot_nearest_min_score: float = param(
        3.0,
        "an example is near enough when its IDF-weighted word overlap with the request reaches "
        "this, or a shared word names a tool or an enum value ('wave'); 0 = any shared word "
        "(chit-chat then gets an example for sharing 'your' or 'like')",
        load_time=True,
        low=0.0,
        high=100.0,
    )
    few_shot_nearest_short: bool = param(
        True,
        "the nearest examples as request, reply and calls only (no tool results, no closing "
        "words): ~75 instead of ~110 tokens prefilled after the user's words are known",
        load_time=True,
    )
    tool_selection: str = param(
        "greedy",
        "how a turn's first call is chosen: greedy (the grammar's decoding) | score (the "
        "profile's selection options, each by the model's likelihood of the request given its "
        "description; 'no tool' is one: right far more often, but 0.7-1.6 s before the first "
        "token on 2 CPU cores). score needs a local engine and constrained mode",
        load_time=True,
        choices=("score", "greedy"),
    )
    reply_guard: bool = param(
        True,
        "keep back a sentence that copies reply_copy_limit of the user's words or repeats one "
        "of the last 12 turns (a first sentence is sampled again, a later one left out), and "
        "steer a turn's first token away from the openers those turns began with",
        load_time=True,
    )
    reply_copy_limit: float = param(
        0.6,
        "share of the user's words (requests of 3 words or more) a reply may not repeat",
        load_time=True,
        low=0.1,
        high=1.0,
    )
    max_steps: int = param(
        3, "model steps per turn (tool results → continuation)", load_time=True, low=1
    )
    max_new_tokens: int = param(192, "tokens per step", load_time=True, low=1)
    max_thinking_tokens: int = param(
        512, "safety cap on thinking when no budget is set", load_time=True, low=0
    )
    max_speech_chars: int = param(
        160, "constrained mode: characters of speech per step", load_time=True, low=1
    )
    max_calls_per_step: int = param(
        1, "constrained mode: tool calls per step", load_time=True, low=0
    )
    first_clause_chars: int = param(
        0,
        "> 0: the first sentence of a turn may end at a clause (', ; :') this long, for TTS",
        load_time=True,
        low=0,
    )
    cancel_tools_on_cancel: bool = param(
        True, "cancel a turn's tool goals when the turn is cancelled"
    )
    failure_reply: str = param(
        "",
        "said when a turn fails (the model raised, the decoder broke); '' = end the turn "
        "silently. Either way the failure is logged, counted and the turn ends in TurnMetrics",
        load_time=True,
    )
    max_prompt_chars: int = param(
        4000,
        "longest user text (transcript, teleop/prompt, llm/converse) taken as a turn; a longer "
        "one is refused and counted",
        low=1,
    )
    barge_in_cancels: bool = param(True, "a barge-in cancels generation and speech")
    prefill_on_partial: bool = param(
        True,
        "prefill the prompt at start-up, speech start and partial transcripts (KV prefix reuse)",
    )
    preemptive: bool = param(
        True,
        "start the answer from the early transcript when the user goes quiet: sentences "
        "are synthesised but held, tool goals wait; the final transcript with the same words "
        "releases them, anything else discards them unheard (no history entry)",
    )
    end_of_turn_hints: bool = param(
        True,
        "publish llm/end_of_turn for each early transcript: the model's probability that "
        "the user's message ends there (one decode step on the cached prompt; asr_node ends a "
        "complete turn early)",
    )
    end_of_turn_probe_nearest: bool = param(
        False,
        "the end-of-turn probe's prompt carries the few-shot exchange the words pick, as the "
        "turn's does: a request that gets one pays its prefill in the probe (a later hint) "
        "instead of after it (a later first token)",
    )
    prefill_after_pause: bool = param(
        False,
        "when the user goes on after a pause, prefill the history with the few-shot exchange "
        "their words so far pick (with prefill_on_partial): the probe at the next pause carries "
        "an exchange the cache holds, and a motion request's turn starts without its prefill "
        "(off: in 20-turn loops it served no motion request and gained nothing)",
    )
    preemptive_hold_s: float = param(
        5.0,
        "longest wait in s for the final transcript of a preemptive turn; then it is discarded",
        low=0.1,
        high=60.0,
    )
    tool_server_wait_s: float = param(
        2.0, "how long to wait for a tool's action server", load_time=True, low=0.0
    )
    release_memory_after_turn: bool = param(
        True, "malloc_trim after each turn (returns freed heap pages; ~10-20 ms, after the turn)"
    )

    # --- the core objects these parameters configure (llm_node, the benchmarks) -------------
    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LlmParams:
        """Parameters from a name -> value mapping (other names, e.g. other nodes', ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    def constrained_mode(self, template_is_bundled: bool) -> bool:
        """``constrained``: on, off, or auto (on when the model is rendered with the bundled
        template, i.e. its GGUF has none of its own)."""
        return {"on": True, "off": False}.get(self.constrained, template_is_bundled)

    def knobs(self) -> Knobs:
        """The per-request knobs a turn gets unless its request sets its own."""
        budget = self.thinking_token_budget
        return Knobs(
            enable_thinking=self.enable_thinking,
            thinking_token_budget=budget if budget >= 0 else None,
            conversational_mode=self.conversational_mode,
        )

    def llama_config(self, model_path: str, draft_path: str = "") -> LlamaConfig:
        return LlamaConfig(
            model_path=model_path,
            n_ctx=self.n_ctx,
            n_gpu_layers=self.n_gpu_layers,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads_batch,
            n_batch=self.n_batch,
            n_ubatch=self.n_ubatch,
            swa_full=self.swa_full,
            flash_attn=self.flash_attn,
            cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v,
            use_mmap=self.use_mmap,
            cpu_repack=self.cpu_repack,
            embeddings=self.embeddings,
            chat_template=self.chat_template,
            speculative=self.speculative,
            draft_model=draft_path,
            spec_n_max=self.spec_n_max,
            spec_p_min=self.spec_p_min,
        )

    def runner_config(self, constrained: bool, profile: Profile) -> RunnerConfig:
        """The turn runner's configuration; a local model's own sampling (``model_sampling``)
        replaces the sampling parameters left at their defaults."""
        sampling = dict(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p
        )
        if self.model_sampling and self.engine == "local":  # models.yaml's, where left at defaults
            from bolt_agent.core.models import with_model_sampling

            sampling = with_model_sampling(self.model, sampling, vars(LlmParams()))
        return RunnerConfig(
            sampling=SamplingParams(**sampling, seed=self.seed),
            constrained=constrained,
            max_new_tokens=self.max_new_tokens,
            max_steps=self.max_steps,
            max_thinking_tokens=self.max_thinking_tokens,
            max_speech_chars=self.max_speech_chars,
            max_calls_per_step=self.max_calls_per_step,
            first_clause_chars=self.first_clause_chars,
            filler_sentence=profile.filler,
        )

    def choosers(self, profile: Profile, engine) -> tuple[ToolSelector | None, ReplyGuard | None]:
        """The turn runner's tool selector and reply guard, as the parameters ask."""
        selector = None
        if self.tool_selection == "score" and profile.selection is not None:
            selector = ToolSelector(profile.selection, engine.channel_scores)
        guard = ReplyGuard(self.reply_copy_limit) if self.reply_guard else None
        return selector, guard

    def dialogue(self, profile: Profile, constrained: bool) -> Dialogue:
        """The conversation: the profile's persona, and with ``few_shot`` (auto: in constrained
        mode) its examples and the nearest ones before each request."""
        few_shot = {"on": True, "off": False}.get(self.few_shot, constrained)
        if not few_shot:
            return Dialogue(profile.persona, [], None)
        nearest = profile.nearest(
            self.few_shot_nearest, self.few_shot_nearest_short, self.few_shot_nearest_min_score
        )
        return Dialogue(profile.persona, profile.example_messages(), nearest)
