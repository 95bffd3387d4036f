"""tts_node's parameters: one frozen dataclass, each field declared once with its description
(``param``); ``config/params/tts_node.yaml`` mirrors the defaults."""

from __future__ import annotations

from dataclasses import dataclass

from bolt_agent.nodes.params import param


@dataclass(frozen=True)
class TtsParams:
    model: str = param(
        "",
        "models.yaml name or path to a Piper .onnx voice (its .onnx.json beside it); "
        "'' = the default tts model",
        load_time=True,
    )
    cpu_threads: int = param(
        1, "onnxruntime intra-op threads for Piper", load_time=True, low=1, high=256
    )
    use_cuda: bool = param(
        False, "run Piper with onnxruntime's CUDA execution provider", load_time=True
    )
    length_scale: float = param(
        0.0,
        "speaking rate (> 1 slower, < 1 faster); 0 = the voice's default",
        load_time=True,
        low=0.0,
        high=10.0,
    )
    audio_sink: str = param(
        "device",
        "where audio goes: 'device' (a sound card) or 'topic' (audio/output paced in real "
        "time, for headless simulation)",
        load_time=True,
        choices=("device", "topic"),
    )
    device: str = param("", "output device name or index ('' = the default device)", load_time=True)
    block_ms: int = param(
        10,
        "audio block in ms: bounds how long a stop takes to silence the output and, with "
        "PortAudio's low latency (two blocks buffered), how long audio takes to be heard",
        load_time=True,
        low=1,
        high=1000,
    )
    latency_s: float = param(
        0.0,
        "output device latency in s (0 = PortAudio's low latency)",
        load_time=True,
        low=0.0,
        high=10.0,
    )
    pulse_sink: str = param(
        "",
        "PulseAudio sink the output must play on, watched with pactl: if it disappears or the "
        "stream is moved off it, the node reports, drops the current speech and reopens on it "
        "once it is back; '' = $PULSE_SINK when set, 'none' = not watched",
        load_time=True,
    )
    device_check_s: float = param(
        0.5,
        "period in s of the output device watch (stream ended, stalled, or off pulse_sink)",
        load_time=True,
        low=0.05,
        high=60.0,
    )
    output_stall_s: float = param(
        3.0,
        "no audio callback for this long means the output device is gone",
        load_time=True,
        low=0.5,
        high=60.0,
    )
    stop_on_barge_in: bool = param(True, "stop speaking when asr/voice_activity reports a barge-in")
    duck_db: float = param(
        0.0,
        "lower the voice by this many dB while asr/voice_activity reports someone speaking over "
        "it that is not (yet) a barge-in, until that voice ends (0 = never; echo_mode aec; "
        "taken when the node activates)",
        low=-60.0,
        high=0.0,
    )
    duck_max_s: float = param(
        5.0,
        "the longest duck in s (an end of voice that never came; taken when the node activates)",
        low=0.1,
        high=600.0,
    )
    retry_s: float = param(
        3.0,
        "period in s of the retries while the output device is missing or busy "
        "(taken when the node activates)",
        low=0.01,
        high=3600.0,
    )
    release_memory_after_turn: bool = param(
        True,
        "once a turn is spoken: shrink Piper's onnxruntime arena (one word's synthesis) and "
        "malloc_trim (the turn's peak working memory goes back)",
    )
    lead_silence_ms: int = param(
        10,
        "silence kept before the first audible sample (above -50 dBFS) of each turn's first "
        "audio: Piper opens 'Yes,' with 65 ms of silence, heard as latency; later sentences "
        "keep theirs (the pause between sentences); -1 = never trimmed",
        load_time=True,
        low=-1,
        high=1000,
    )
    phrase_cache_chars: int = param(
        24,
        "texts up to this many characters (an opening clause: 'Yes,', 'Sure!') are kept after "
        "their first synthesis and played from memory when said again, the same audio each "
        "time; 0 = synthesise everything (taken at configure)",
        load_time=True,
        low=0,
        high=200,
    )
    max_text_chars: int = param(
        2000,
        "longest text accepted from speech/say, teleop/say or tts/speak; a longer one is "
        "refused and counted (a flood or garbage must not queue minutes of synthesis)",
        low=1,
        high=1_000_000,
    )
