"""console_monitor: follows the conversation (transcripts, speech, tools, latency) turn by turn;
prints it live when given a printer, and keeps a record per turn for scenarios and benchmarks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from rclpy.node import Node

from bolt_agent.core.sim.scenario import TurnLog
from bolt_agent.nodes.messages import tool_event_dict
from bolt_agent.nodes.metrics import STAGES
from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.msg import SpokenText, ToolEvent, Transcript, TurnMetrics

Printer = Callable[[str], None]
_SHOWN = ("speech_end", "asr_final", "llm_first_token", "first_speech", "first_audio")


def _sec(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


class ConsoleMonitor(Node):
    def __init__(self, printer: Printer | None = None, **kwargs):
        super().__init__("console_monitor", **kwargs)
        self._print = printer or (lambda _line: None)
        self._lock = threading.Lock()
        self.records: dict[str, TurnLog] = {}  # turn id → record
        self.create_subscription(Transcript, "asr/transcript", self._on_transcript, RELIABLE)
        self.create_subscription(SpokenText, "speech/say", self._on_say, RELIABLE)
        self.create_subscription(ToolEvent, "llm/tool_events", self._on_tool, RELIABLE)
        self.create_subscription(TurnMetrics, "bolt/turn_metrics", self._on_metrics, RELIABLE)

    def record(self, turn_id: str) -> TurnLog:
        with self._lock:
            return self.records.setdefault(turn_id, TurnLog(said=""))

    def _on_transcript(self, msg: Transcript) -> None:
        if msg.is_final:
            self.record(msg.utterance_id).transcript = msg.text
            self._print(
                f"[cyan]user[/]   ({msg.utterance_id}) “{msg.text}”  "
                f"[dim]conf {msg.confidence:.2f}[/]"
            )

    def _on_say(self, msg: SpokenText) -> None:
        if msg.text:
            self.record(msg.turn_id).spoken.append(msg.text)
            self._print(f"[green]robot[/]  “{msg.text}”")

    def _on_tool(self, msg: ToolEvent) -> None:
        event = tool_event_dict(msg)
        self.record(event["turn_id"]).tools.append(event)
        outcome = "[green]ok[/]" if event["ok"] else f"[red]error[/] {event['error']}"
        self._print(
            f"[magenta]tool[/]   {event['tool']} {json.dumps(event['arguments'])} → {outcome}"
        )

    def _on_metrics(self, msg: TurnMetrics) -> None:
        rec = self.record(msg.turn_id)
        for stage in STAGES:
            value = _sec(getattr(msg, stage))
            if value > 0:
                rec.stamps.setdefault(stage, value)
        if msg.source == "llm":
            rec.stamps["tok_s"] = msg.decode_tok_s
            rec.stamps["tokens"] = float(msg.completion_tokens)
        if "turn_end" in rec.stamps and "first_audio" in rec.stamps and not rec.completed:
            rec.completed = True
            self._print("[yellow]turn[/]   " + format_latencies(rec.stamps))


def format_latencies(stamps: dict[str, float]) -> str:
    """Each stage's time after the end of speech, in the order they happened (a preemptive
    answer's first token and sentence come before the final transcript), else each after the
    previous one."""
    parts = []
    origin = stamps.get("speech_end")
    if origin is not None:
        shown = sorted((stamps[s], s) for s in _SHOWN if s in stamps and s != "speech_end")
        parts += [f"{stage} +{t - origin:.2f}s" for t, stage in shown]
    else:
        prev = None
        for stage in _SHOWN:
            if stage in stamps:
                if prev is not None:
                    parts.append(f"→{stage} {stamps[stage] - stamps[prev]:.2f}s")
                prev = stage
    if "speech_end" in stamps and "first_audio" in stamps:
        parts.append(f"| voice-to-voice {stamps['first_audio'] - stamps['speech_end']:.2f}s")
    if stamps.get("tok_s"):
        parts.append(f"| {stamps['tokens']:.0f} tok @ {stamps['tok_s']:.0f} tok/s")
    return " ".join(parts)
