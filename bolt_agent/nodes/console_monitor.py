"""console_monitor: prints the conversation as it happens (transcripts, speech, tools, latency)."""

from __future__ import annotations

import json
from collections.abc import Callable

from rclpy.node import Node
from std_msgs.msg import String

from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.msg import SpokenText, Transcript, TurnMetrics

Printer = Callable[[str], None]
_STAGES = ("speech_end", "asr_final", "llm_first_token", "first_speech", "first_audio")


def _sec(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


class ConsoleMonitor(Node):
    def __init__(self, printer: Printer = print, **kwargs):
        super().__init__("console_monitor", **kwargs)
        self._print = printer
        self.stamps: dict[str, dict[str, float]] = {}
        self.turns: list[dict[str, float]] = []
        self.create_subscription(Transcript, "asr/transcript", self._on_transcript, RELIABLE)
        self.create_subscription(SpokenText, "speech/say", self._on_say, RELIABLE)
        self.create_subscription(String, "llm/tool_events", self._on_tool, RELIABLE)
        self.create_subscription(TurnMetrics, "bolt/turn_metrics", self._on_metrics, RELIABLE)

    def _on_transcript(self, msg: Transcript) -> None:
        if msg.is_final:
            self._print(f"[cyan]user[/]   ({msg.utterance_id}) “{msg.text}”  "
                        f"[dim]conf {msg.confidence:.2f}[/]")

    def _on_say(self, msg: SpokenText) -> None:
        if msg.text:
            self._print(f"[green]robot[/]  “{msg.text}”")

    def _on_tool(self, msg: String) -> None:
        e = json.loads(msg.data)
        outcome = "[green]ok[/]" if e["ok"] else f"[red]error[/] {e['error']}"
        self._print(f"[magenta]tool[/]   {e['tool']} {json.dumps(e['arguments'])} → {outcome}")

    def _on_metrics(self, msg: TurnMetrics) -> None:
        stamps = self.stamps.setdefault(msg.turn_id, {})
        for stage in (*_STAGES, "turn_end"):
            value = _sec(getattr(msg, stage))
            if value > 0:
                stamps.setdefault(stage, value)
        if msg.source == "llm":
            stamps["tok_s"] = msg.decode_tok_s
            stamps["tokens"] = msg.completion_tokens
        if "turn_end" in stamps and "first_audio" in stamps and not stamps.get("shown"):
            stamps["shown"] = 1.0
            self.turns.append(stamps)
            self._print("[yellow]turn[/]   " + format_latencies(stamps))


def format_latencies(stamps: dict[str, float]) -> str:
    parts, prev = [], None
    for stage in _STAGES:
        if stage in stamps:
            if prev is not None:
                parts.append(f"→{stage} {stamps[stage] - stamps[prev]:.2f}s")
            prev = stage
    if "speech_end" in stamps and "first_audio" in stamps:
        parts.append(f"| voice-to-voice {stamps['first_audio'] - stamps['speech_end']:.2f}s")
    if stamps.get("tok_s"):
        parts.append(f"| {stamps['tokens']:.0f} tok @ {stamps['tok_s']:.0f} tok/s")
    return " ".join(parts)
