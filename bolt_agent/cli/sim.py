"""`bolt-agent sim SCENARIO.yaml`: run the live stack against a scripted user, record a bag of the
run, check the scenario's expectations; `bolt-agent sim --replay BAG`: feed a recorded run's
audio back through the ASR and compare the transcripts with the ones recorded."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import rclpy
from rclpy.parameter import Parameter
from rich.console import Console

from bolt_agent.core.sim.bag_io import BagError, BagReader
from bolt_agent.core.sim.scenario import Scenario, ScenarioError, TurnLog, evaluate, load_scenario
from bolt_agent.nodes.bag_transport import BagPlayer, BagRecorder
from bolt_agent.nodes.console_monitor import ConsoleMonitor
from bolt_agent.nodes.scripted_user import ScriptedUser
from bolt_agent.stack.session import StackSession
from bolt_agent.stack.spec import StackSpec

RECORDED = (
    "audio/input",
    "asr/transcript",
    "asr/voice_activity",
    "llm/end_of_turn",
    "speech/say",
    "tts/state",
    "llm/tool_events",
    "bolt/turn_metrics",
    "perception/scene",
    "animation/events",
)


def run_scenario(scenario: Scenario, out_dir: Path, console: Console) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / "bag").exists():
        raise RuntimeError(f"{out_dir / 'bag'} exists already: choose another --out")
    spec = StackSpec(profile=scenario.profile, sim=True, overrides=dict(scenario.overrides))
    if scenario.video:
        spec.nodes = [*spec.node_names(), "perception_node"]
        spec.overrides.setdefault("perception_node", {}).update(camera=scenario.video, loop=True)
    with StackSession(spec) as session:
        session.build()
        monitor, user = ConsoleMonitor(printer=console.print), ScriptedUser()
        rec_node = rclpy.create_node("sim_recorder")
        session.add(monitor, user, rec_node)
        recorder = BagRecorder(rec_node, out_dir / "bag", topics=list(RECORDED))
        # bring up before spinning: rclpy's ActionClient joins the node's waitables before it is
        # fully built, and an executor iterating them meanwhile dies (llm_node's tool clients)
        failed = session.bring_up(progress=lambda m: console.print(f"[dim]{m}[/]"))
        session.start()
        if failed:
            raise RuntimeError(f"nodes failed to start: {', '.join(failed)}")
        user.load()
        session.wait_ready()  # the system prompt prefilled: the first turn like the others
        llm = session.node("llm_node")
        default_choice = llm.get_parameter("tool_choice").value if llm else "auto"
        turns: list[TurnLog] = []
        for text, choice in zip(scenario.turns, scenario.tool_choices):
            if llm is not None:  # a turn may ask for a specific tool (small models need it)
                llm.set_parameters([Parameter("tool_choice", value=choice or default_choice)])
            console.print(f"[dim]user speaks:[/] “{text}”")
            said = user.say(text)
            record = monitor.record(said.utterance_id) if said.utterance_id else TurnLog(said="")
            record.said, record.error = text, said.error
            record.completed = said.ok
            turns.append(record)
        bag = recorder.stop()
    verdicts = evaluate(scenario, turns)
    report = {
        "scenario": scenario.name,
        "profile": scenario.profile,
        "bag": str(bag),
        "passed": all(v.passed for v in verdicts),
        "turns": [asdict(t) for t in turns],
        "expectations": [
            {"expectation": v.expectation.describe(), "passed": v.passed, "detail": v.detail}
            for v in verdicts
        ],
    }
    (out_dir / "report.json").write_text(json.dumps(report, indent=2))
    return report


def replay_transcripts(bag: Path, console: Console, timeout_s: float = 120.0) -> dict:
    """Play a run's audio/input into a fresh ASR node; compare its finals with the recorded."""
    with BagReader(bag) as reader:
        from rclpy.serialization import deserialize_message

        from bolt_agent_interfaces.msg import Transcript

        recorded = [
            m.text
            for m in (
                deserialize_message(bytes(x.data), Transcript)
                for x in reader.messages(["/asr/transcript"])
            )
            if m.is_final
        ]
    with StackSession(StackSpec(sim=True, nodes=["asr_node"])) as session:
        session.build()
        monitor, play_node = ConsoleMonitor(printer=console.print), rclpy.create_node("replayer")
        session.add(monitor, play_node)
        failed = session.bring_up(progress=lambda m: console.print(f"[dim]{m}[/]"))
        session.start()  # after the bring-up, as above
        if failed:
            raise RuntimeError("asr_node failed to start")
        player = BagPlayer(play_node, bag, topics=["/audio/input"])
        player.start()
        player.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            finals = [r.transcript for r in monitor.records.values() if r.transcript]
            if len(finals) >= len(recorded):
                break
            player.done.wait(0.1)
        player.destroy()
    replayed = [r.transcript for r in monitor.records.values() if r.transcript]
    return {
        "bag": str(bag),
        "recorded": recorded,
        "replayed": replayed,
        "same": recorded == replayed,
    }


def _print_report(report: dict, console: Console) -> None:
    for e in report["expectations"]:
        mark = "[green]PASS[/]" if e["passed"] else "[red]FAIL[/]"
        console.print(f"{mark} {e['expectation']}  [dim]{e['detail']}[/]")
    console.print(
        f"[bold]{report['scenario']}: {'passed' if report['passed'] else 'FAILED'}[/] "
        f"(bag: {report['bag']})"
    )


def main(args) -> int:
    console = Console(highlight=False)
    try:
        if args.replay:
            result = replay_transcripts(Path(args.replay), console)
            console.print(json.dumps(result, indent=2))
            return 0 if result["same"] else 1
        if not args.scenario:
            console.print("[red]error:[/] give a SCENARIO.yaml or --replay BAG")
            return 2
        scenario = load_scenario(args.scenario)
        out = Path(args.out or f"sim_runs/{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        report = run_scenario(scenario, out, console)
    except (ScenarioError, BagError, RuntimeError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    _print_report(report, console)
    return 0 if report["passed"] else 1


def add_parser(sub) -> None:
    p = sub.add_parser("sim", help="run a scenario against the live stack, or replay a run")
    p.add_argument("scenario", nargs="?", help="scenario YAML (see config/scenarios/)")
    p.add_argument("--out", help="output folder (bag + report.json)")
    p.add_argument("--replay", help="a run's bag: replay its audio, compare transcripts")
    p.set_defaults(func=main)
