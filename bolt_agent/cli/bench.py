"""`bolt-agent bench`: voice-to-voice latency over real audio devices, overheads, LLM, memory.

    bolt-agent bench [--turns 20] [--out bench_out/bench.json] [--quick] [--no-peer]
    bolt-agent bench --soak-turns 100 [--soak-only] [--set llm_node.max_new_tokens=48]

Writes the JSON (seconds, ratios, MB), a markdown table (.md) and two plots (_stages.png,
_cdf.png). Parts, in order, so they never compete for the 2 cores: the acoustic voice loop
(``benchmarks.voice_loop``: finished and pause utterances), the pipecat peer on the same
utterances and devices (``benchmarks.pipecat_peer``; ``--no-peer`` skips it), the memory soak
when asked for (``benchmarks.soak``: N text turns through the whole stack, RSS after each), the
same utterances on the raw libraries, the LLM and speech benchmarks (``benchmarks.offline``,
own process, no ROS), the Jetson memory prediction (``benchmarks.jetson_memory``). See
docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bolt_agent.benchmarks.run_inputs import model_bytes, parse_overrides

MB = 1e6


def jetson(result: dict[str, Any]) -> dict[str, Any]:
    from bolt_agent.benchmarks import jetson_memory as jm
    from bolt_agent.benchmarks.jetson_plan import build_plan
    from bolt_agent.core.models import resolve_model

    pred = jm.predict(jm.load_profile())
    gemma = jm.shape_from_gguf(resolve_model("", kind="llm"))
    check = {
        "model": "gemma-3-270m Q4_K_M (bundled)",
        "n_ctx": 4096,
        "n_ubatch": 256,
        "predicted_kv_swa_full_mib": gemma.kv_bytes(4096, 256, True)["total"] / 2**20,
        "predicted_kv_mib": gemma.kv_bytes(4096, 256, False)["total"] / 2**20,
        "predicted_compute_mib": gemma.compute_bytes(256) / 2**20,
        "weights_mib": gemma.weight_bytes / 2**20,
    }
    result["jetson_predicted_gb_4k"] = pred["profiles"]["4k"]["total_gb"]
    result["jetson_predicted_gb_36k"] = pred["profiles"]["36k"]["total_gb"]
    result["jetson_target_only_gb_4k"] = pred["profiles"]["4k"]["target_gb"]
    result["jetson_target_only_gb_36k"] = pred["profiles"]["36k"]["target_gb"]
    # the resident-memory plan (bolt-agent jetson-plan): mmap'ed embeddings count only the rows
    # in use; the figures above count every weight resident (an upper bound)
    plan = build_plan()
    for key in ("llm_side_gb_4k", "llm_side_gb_36k", "robot_total_gb_4k", "robot_total_gb_36k"):
        result[f"jetson_plan_{key}"] = plan[key]
    return {
        "prediction": pred,
        "calculator_check": check,
        "seed_reported_gb": jm.load_profile()["seed_reported_gb"],
    }


def run_bench(args) -> int:
    # a DDS domain of our own: nobody else's stack or test hears our turns (and vice versa);
    # BOLT_BENCH_DOMAIN_ID picks it (e.g. a range kept for one user)
    os.environ["ROS_DOMAIN_ID"] = os.environ.get("BOLT_BENCH_DOMAIN_ID") or str(
        random.SystemRandom().randint(102, 200)
    )
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    from bolt_agent.benchmarks.voice_loop import loop_figures, run_voice_loop

    out = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="bolt-bench-"))
    t_start = time.time()
    result: dict[str, Any] = {
        "turns_requested": args.turns,
        "quick": args.quick,
        "work_dir": str(work),
    }
    overrides = parse_overrides(args.set)
    if args.quick:  # smoke run: one model step per turn (first audio comes before any tool call)
        overrides.setdefault("llm_node", {}).setdefault("max_steps", 1)
        overrides["llm_node"].setdefault("max_new_tokens", 48)
    result["overrides"] = overrides
    host = {"switch_interval": args.switch_interval} if args.switch_interval else {}
    result["host"] = host
    if args.soak_only:
        if not args.soak_turns:
            raise SystemExit("--soak-only needs --soak-turns N")
        ok = run_soak_part(args, result, work, overrides, host)
        return _finish(result, out, t_start, ok)
    print(f"voice loop: {args.turns} turns over PulseAudio null sinks (work dir {work})")
    loop = run_voice_loop(
        work, args.turns, overrides=overrides, log=lambda m: print(m, flush=True), host=host
    )
    turns = [asdict(t) for t in loop["turns"]]
    v2v = [t["v2v_s"] for t in turns if t["v2v_s"] is not None]
    result["turns"] = turns
    result["turns_ok"] = len(v2v)
    # voice-to-voice (turns not split), false endpoints, endpoint delay, preemptive starts
    result.update(loop_figures(turns))
    stages = {}
    for stage in (
        "vad_end",
        "asr_final",
        "llm_first_token",
        "first_speech",
        "first_audio",
        "audible",
    ):
        vals = [t["stages_s"][stage] for t in turns if stage in t["stages_s"] and not t["split_by"]]
        if vals:
            stages[stage] = statistics.median(vals)
            result[f"median_{stage}_s"] = stages[stage]
    result["stage_median_s"] = stages
    tok = [t["counters"].get("decode_tok_s") for t in turns if t["counters"].get("decode_tok_s")]
    result["stack_decode_tok_s_median"] = statistics.median(tok) if tok else None
    # the nodes' /diagnostics values at the end of the loop (device xruns, caches, turn ends)
    result["stack_diagnostics"] = loop.get("diagnostics", {})
    tts_diag = result["stack_diagnostics"].get("tts_node", {})
    asr_diag = result["stack_diagnostics"].get("asr_node", {})
    result["output_underflows"] = tts_diag.get("output_underflows")
    result["output_underflows_playing"] = tts_diag.get("output_underflows_playing")
    result["input_errors"] = asr_diag.get("input_errors")

    # memory of the embedded stack (RSS per node = RSS growth during its configure + activate)
    mb = model_bytes()
    rss = loop["rss_ready"]
    result["memory"] = {
        "rss_ready": rss,
        "rss_end": loop["rss_end"],
        "smaps_ready": loop["smaps_ready"],
        "smaps_end": loop["smaps_end"],
        "trim_end": loop["trim_end"],
        "model_bytes": mb,
        "page_cache": loop["page_cache"],
    }
    # between the nodes' activation and the first turn (llm_node's prefill of the prompt); the
    # "ready" RSS is taken after it
    result["startup_work_s"] = loop.get("startup_work_s")
    result["stack_rss_mb"] = loop["rss_end"]["VmRSS"] * 1.048576
    result["model_weights_mb"] = sum(mb.values()) / MB
    result["stack_rss_overhead_mb"] = result["stack_rss_mb"] - result["model_weights_mb"]
    peer_ok = run_peer_part(args, result, work, overrides) if not args.no_peer else True
    soak_ok = run_soak_part(args, result, work, overrides, host) if args.soak_turns else True

    if args.loop_only:
        return _finish(result, out, t_start, bool(v2v) and soak_ok and peer_ok)
    # the same utterances through the raw libraries + LLM + speech benches (own process, no ROS)
    from bolt_agent.stack.spec import StackSpec, effective_params

    spec = StackSpec(sim=False, overrides=overrides)
    cfg = {
        # the raw pipeline does the same work with the same settings as the stack just did
        "voice": {n: effective_params(spec, n) for n in ("llm_node", "asr_node", "tts_node")},
        "wavs": [str(p) for p in sorted(work.glob("utt*.wav"))][: max(2, len(v2v))],
        "parts": ["raw", "llm"] if args.quick else ["raw", "llm", "speech"],
        # node ÷ raw decode: the median of 7 interleaved runs a side (3 moved the ratio by ±0.05
        # between runs of the same code on this machine)
        "llm_runs": 1 if args.quick else 7,
        "llm_tokens": 16 if args.quick else 64,
        "history_tokens": 1000 if args.quick else 4000,
        "knob_runs": 1,
        "quick": args.quick,
    }
    if args.quick:
        cfg["wavs"] = cfg["wavs"][:1]
    (work / "offline_in.json").write_text(json.dumps(cfg))
    print("raw libraries, LLM and speech benchmarks (no ROS)…")
    with open(work / "offline.log", "w") as log:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bolt_agent.benchmarks.offline",
                str(work / "offline_in.json"),
                str(work / "offline_out.json"),
            ],
            check=True,
            stderr=log,
        )
    off = json.loads((work / "offline_out.json").read_text())
    result.update({"raw": off["raw"], "llm": off["llm"], "speech": off.get("speech")})
    raw_med = off["raw"]["median_eos_to_first_audio_s"]
    result["raw_eos_to_first_audio_p50_s"] = raw_med
    result["overhead_ratio"] = result["voice_to_voice_p50_s"] / raw_med if v2v else None
    result["llm_tok_s_ratio"] = off["llm"]["tok_s_ratio"]
    result["llm_ttft_ratio"] = off["llm"]["ttft_ratio"]
    result["prefix_reuse_ttft_ratio"] = off["llm"]["prefix_reuse"]["ratio"]
    if off.get("speech"):
        sp = off["speech"]
        result["asr_rtf"] = sp["asr"]["rtf"]["ours"]
        result["tts_rtf"] = sp["tts_rtf"]
        result["tts_first_audio_s"] = sp["tts"]["first_audio_s"]["ours"]
    from bolt_agent.benchmarks import reachy_latency

    print("Reachy Mini's control path against Pollen's simulated robot…")
    robot = reachy_latency.run(seconds=5.0 if args.quick else 20.0)
    print(reachy_latency.table(robot))
    result["reachy_mini"] = robot
    result.update(run_voices_part(args))
    spec = Path("speculative_bench.json")
    for cand in (spec, out.parent / "speculative_bench.json", Path("bench/speculative_bench.json")):
        if cand.exists():
            result["speculative"] = json.loads(cand.read_text())
            break
    return _finish(result, out, t_start, bool(v2v) and soak_ok and peer_ok)


#: the peer's figures in the bench JSON: peer_<field> (the same definitions as ours)
PEER_FIELDS = (
    "voice_to_voice_p50_s",
    "voice_to_voice_p90_s",
    "voice_to_voice_turns",
    "voice_to_voice_all_p50_s",
    "finished_voice_to_voice_p50_s",
    "pause_voice_to_voice_p50_s",
    "pause_turns",
    "pause_split_turns",
    "false_endpoint_rate",
    "finished_split_turns",
    "endpoint_delay_p50_s",
    "turns_ok",
)


def run_peer_part(args, result: dict[str, Any], work: Path, overrides: dict) -> bool:
    """The pipecat peer (``benchmarks.pipecat_peer``) on the same utterances and devices, after
    our loop (never at the same time): ``peer_*`` fields and ``voice_to_voice_vs_peer`` (ours ÷
    pipecat, p50). True when it measured at least one turn."""
    from bolt_agent.benchmarks.pipecat_peer import run_peer_loop

    turns = args.peer_turns or args.turns
    print(f"pipecat peer: {turns} turns on the same utterances (work dir {work / 'peer'})")
    try:
        peer = run_peer_loop(
            work / "peer",
            turns,
            log=lambda m: print(f"peer {m}", flush=True),
            max_tokens=args.peer_max_tokens,
            overrides=overrides,
        )
    except Exception as exc:  # our loop's figures are still reported (the run fails)
        result["peer_error"] = repr(exc)
        print(f"pipecat peer failed: {exc!r} (see {work / 'peer'})", flush=True)
        return False
    peer["turns"] = [asdict(t) for t in peer["turns"]]
    result["peer"] = peer
    for key in PEER_FIELDS:
        result[f"peer_{key}"] = peer.get(key)
    ours, theirs = result.get("voice_to_voice_p50_s"), peer.get("voice_to_voice_p50_s")
    result["voice_to_voice_vs_peer"] = ours / theirs if ours and theirs else None
    return bool(peer["turns_ok"])


def run_voices_part(args) -> dict[str, Any]:
    """The end of turn across voices (``benchmarks.voices_bench``: Piper's joe and espeak-ng
    voices, asr_node's defaults, in silence): ``voices`` per voice, and the ``voices_*``
    figures the goals are read from, on the test split (``--quick``: 2 voices, 3 + 3
    utterances a split)."""
    from bolt_agent.benchmarks import voices_bench

    print("end of turn across voices (Piper's joe and espeak-ng voices)…")
    voices = voices_bench.run(quick=args.quick, log=lambda m: print(m, flush=True))
    table = voices_bench.table(voices)
    print(table)
    test, dev = voices["test"], voices["dev"]  # the goals are read on the held-out split
    raw = test["wer_raw_whisper"]
    return {
        "voices": voices,
        "voices_table": table,
        "voices_paused_kept_whole": test["paused_kept_whole"],
        "voices_paused_kept_whole_dev": dev["paused_kept_whole"],
        "voices_end_of_turn_p50_s": test["end_of_turn_p50_s_median_of_voices"],
        "voices_end_of_turn_p50_s_dev": dev["end_of_turn_p50_s_median_of_voices"],
        "voices_false_endpoints": test["false_endpoints"],
        "voices_wer": test["wer"],
        "voices_wer_vs_raw_whisper": test["wer"] / raw if raw else None,
    }


def run_soak_part(args, result: dict[str, Any], work: Path, overrides: dict, host: dict) -> bool:
    """The memory soak (``benchmarks.soak``): its fields into ``result``; True when every turn
    finished and the growth is a number."""
    from bolt_agent.benchmarks.soak import finite, run_soak

    print(f"memory soak: {args.soak_turns} text turns through the stack (work dir {work})")
    soak = run_soak(
        work / "soak",
        args.soak_turns,
        overrides=overrides,
        log=lambda m: print(m, flush=True),
        host=host,
    )
    result.update(soak)
    if "model_weights_mb" not in result:
        result["model_weights_mb"] = sum(model_bytes().values()) / MB
    ready = soak["soak"].get("rss_ready", {}).get("total", {})
    if ready:  # the soak's stack right after bring-up, and after its last turn
        result["soak_rss_ready_beyond_weights_mb"] = (
            ready["VmRSS"] * 1.048576 - result["model_weights_mb"]
        )
    series = soak["soak_rss_series_mb"]
    if series and series[-1] is not None:
        result["soak_rss_end_beyond_weights_mb"] = series[-1] - result["model_weights_mb"]
    return soak["soak_failed_turns"] == 0 and finite(soak)


def _finish(result: dict[str, Any], out: Path, t_start: float, ok: bool) -> int:
    from bolt_agent.benchmarks.report import markdown, write_report

    result["jetson"] = jetson(result)
    result["load_average"] = os.getloadavg()
    result["bench_s"] = time.time() - t_start
    files = write_report(result, out)
    print(markdown(result))
    print(f"wrote {files['json']}, {files['markdown']}, {files['stages']}, {files['cdf']}")
    return 0 if ok else 1


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="voice-to-voice latency, overheads, LLM and memory benchmark")
    p.add_argument("--turns", type=int, default=20, help="acoustic voice turns (>= 20 for p90)")
    p.add_argument("--out", default="bench_out/bench.json", help="JSON output (.md/.png next)")
    p.add_argument(
        "--quick", action="store_true", help="smoke run: short LLM/prefix benches, no speech bench"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE.PARAM=VALUE",
        help="parameter override for the stack (repeatable), e.g. asr_node.partial_interval_s=0",
    )
    p.add_argument(
        "--loop-only",
        action="store_true",
        help="only the voice loop (+ the peer unless --no-peer, + memory): for comparing "
        "parameter variants",
    )
    p.add_argument(
        "--switch-interval",
        type=float,
        default=0.0,
        metavar="S",
        help="experiment: sys.setswitchinterval in the stack process (GIL hand-over)",
    )
    p.add_argument(
        "--soak-turns",
        type=int,
        default=0,
        metavar="N",
        help="memory soak: N text turns through the whole stack, RSS after each "
        "(soak_rss_growth_mb = growth from turn N/4 to N; llm_node.max_new_tokens 48 unless set)",
    )
    p.add_argument(
        "--soak-only", action="store_true", help="only the memory soak (needs --soak-turns)"
    )
    p.add_argument(
        "--no-peer",
        action="store_true",
        help="skip the pipecat peer (same utterances through pipecat, after our loop)",
    )
    p.add_argument(
        "--peer-turns", type=int, default=0, metavar="N", help="the peer's turns (default --turns)"
    )
    p.add_argument(
        "--peer-max-tokens",
        type=int,
        default=48,
        metavar="N",
        help="the peer's max_tokens per answer (its answers' length, not its latency)",
    )
    p.set_defaults(func=run_bench)
