"""`bolt-agent doctor`: what this machine offers the stack, and what a profile is missing."""

from __future__ import annotations

import glob
import os
import platform
import sys
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _ros(table: Table, report: Report) -> None:
    try:
        import rclpy  # noqa: F401
        from rclpy.utilities import get_rmw_implementation_identifier

        from bolt_agent.nodes.distro import ros_distro

        rmw = get_rmw_implementation_identifier()
        table.add_row("rclpy", "ok", f"ROS 2 {ros_distro()}, {rmw}")
    except Exception as exc:  # import or RMW load failure: report, don't crash
        table.add_row("rclpy", "[red]missing", str(exc))
        report.problems.append(f"rclpy cannot be imported: {exc}")
    try:
        import bolt_agent_interfaces.action
        import bolt_agent_interfaces.msg  # noqa: F401

        table.add_row("bolt_agent_interfaces", "ok", "msg + action importable")
    except ImportError as exc:
        table.add_row("bolt_agent_interfaces", "[red]missing", str(exc))
        report.problems.append(f"bolt_agent_interfaces not built/installed: {exc}")
    rng = os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "(unset: SUBNET)")
    dom = os.environ.get("ROS_DOMAIN_ID", "(unset: 0)")
    prof = os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE", "(none)")
    table.add_row("discovery", "ok", f"range={rng} domain={dom} fastdds profile={prof}")
    if rng != "LOCALHOST":
        report.warnings.append("ROS_AUTOMATIC_DISCOVERY_RANGE is not LOCALHOST (fine on a robot)")


def _models(table: Table, report: Report, profile: str, llm: str) -> None:
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.models import load_specs

    specs, defaults = load_specs()
    needed = {defaults.get("asr"), defaults.get("tts"), llm or defaults.get("llm")}
    for spec in specs.values():
        path = spec.expected_path()
        present = path.exists()
        size = _size(path) if present else 0
        status = "ok" if present else ("[red]missing" if spec.name in needed else "absent")
        table.add_row(f"model {spec.name}", status, f"{path} ({size / 1e6:.0f} MB)")
        if spec.name in needed and not present:
            report.problems.append(f"model {spec.name!r} missing at {path}")
    try:
        prof = load_profile(profile)
        table.add_row(f"profile {prof.name}", "ok", f"tools: {', '.join(prof.registry.names)}")
    except (OSError, ValueError) as exc:
        table.add_row(f"profile {profile}", "[red]invalid", str(exc))
        report.problems.append(f"profile {profile!r}: {exc}")


def _size(path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _audio(table: Table, report: Report) -> None:
    try:
        import sounddevice as sd

        devices = sd.query_devices()
        ins = [d["name"] for d in devices if d["max_input_channels"] > 0]
        outs = [d["name"] for d in devices if d["max_output_channels"] > 0]
        table.add_row("audio inputs", "ok" if ins else "none", ", ".join(ins) or "-")
        table.add_row("audio outputs", "ok" if outs else "none", ", ".join(outs) or "-")
        if not ins or not outs:
            report.warnings.append("no PortAudio input/output device (simulation still works)")
    except (OSError, ImportError) as exc:
        table.add_row("PortAudio", "[red]unavailable", str(exc))
        report.warnings.append(f"PortAudio unavailable: {exc}")


def _cameras(table: Table, report: Report) -> None:
    nodes = sorted(glob.glob("/dev/video*"))
    if not nodes:
        table.add_row("cameras", "none", "no /dev/video* (use a video file or --sim)")
        return
    import cv2

    ok = []
    for node in nodes[:4]:
        cap = cv2.VideoCapture(node)
        if cap.isOpened():
            ok.append(node)
        cap.release()
    table.add_row("cameras", "ok" if ok else "none", ", ".join(ok) or "none opens")


def _llama(table: Table) -> None:
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode()
        table.add_row("llama.cpp", "ok", f"{llama_cpp.__version__}: {info.strip()[:160]}")
    except Exception as exc:  # shared library load failure
        table.add_row("llama.cpp", "[red]unavailable", str(exc))


def _memory(table: Table) -> None:
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    total, avail = info.get("MemTotal", 0), info.get("MemAvailable", 0)
    table.add_row(
        "memory", "ok", f"total {total / 2**30:.1f} GiB, available {avail / 2**30:.1f} GiB"
    )


def _llm_params(params_file: str) -> dict:
    """llm_node's parameters from a ROS parameter file (``/**/llm_node``, ``llm_node`` or
    ``/**`` keys), over the installed defaults."""
    import yaml

    from bolt_agent.core.paths import config_dir

    merged: dict = {}
    for path in [str(config_dir() / "params" / "llm_node.yaml"), params_file]:
        if not path:
            continue
        with open(path) as f:
            data = yaml.safe_load(f) or {}
        for key in ("/**", "llm_node", "/llm_node", "/**/llm_node"):
            merged.update((data.get(key) or {}).get("ros__parameters", {}))
    return merged


def _remote(table: Table, report: Report, params_file: str) -> None:
    """engine: openai — the key's variable, the server's models, one streamed token."""
    import time

    from bolt_agent.core.llm.remote import RemoteConfig, RemoteEngine, api_key_from_env
    from bolt_agent.core.llm.types import EngineError, SamplingParams

    p = _llm_params(params_file)
    if p.get("engine", "local") != "openai":
        table.add_row("LLM server", "not used", "engine: local")
        return
    url = p.get("base_url", "")
    try:
        key = api_key_from_env(p.get("api_key_env", ""))
        config = RemoteConfig(
            base_url=url,
            api_key=key,
            model=p.get("remote_model", ""),
            api=p.get("remote_api", "completions"),
            timeout_s=float(p.get("remote_timeout_s", 10.0)),
        )
        engine = RemoteEngine(config)
        models = engine.models()
        if config.model and config.model not in models:
            raise EngineError(f"model {config.model!r} not served (served: {models})")
        t0 = time.monotonic()
        prompt = engine.chat_template.render([{"role": "user", "content": "Hi"}])
        session = engine.start(prompt)
        session.step(SamplingParams(temperature=0.0))
        session.close()
        ttft = time.monotonic() - t0
    except EngineError as exc:  # RemoteError: refused, http, dropped, stalled
        table.add_row("LLM server", "[red]unreachable", f"{url}: {exc}")
        report.problems.append(f"LLM server ({config_name(p)}): {exc}")
        return
    fallback = p.get("remote_fallback", "none")
    details = f"{url} {config.api}, models {models}, first token {ttft:.2f}s, fallback {fallback}"
    table.add_row("LLM server", "ok", details)


def config_name(p: dict) -> str:
    return f"{p.get('remote_api', 'completions')} {p.get('base_url', '')}"


def run_doctor(profile: str = "reachy_mini", llm: str = "", params_file: str = "") -> int:
    console = Console()
    report = Report()
    table = Table(title="bolt-agent doctor", show_lines=False)
    for col in ("check", "status", "details"):
        table.add_column(col)
    table.add_row("python", "ok", f"{platform.python_version()} ({sys.executable})")
    _ros(table, report)
    _models(table, report, profile, llm)
    _audio(table, report)
    _cameras(table, report)
    _llama(table)
    _remote(table, report, params_file)
    _memory(table)
    console.print(table)
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    for p in report.problems:
        console.print(f"[red]problem:[/] {p}")
    if not report.problems:
        console.print(f"[green]ready for profile {profile!r}")
    return 1 if report.problems else 0


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="check Python, ROS 2, models, audio, cameras, memory")
    p.add_argument("--profile", default="reachy_mini", help="profile whose needs are checked")
    p.add_argument("--llm", default="", help="LLM model name/path to check (default: config)")
    p.add_argument(
        "--params-file",
        default="",
        help="llm_node parameter YAML (engine: openai → the server is checked)",
    )
    p.set_defaults(
        func=lambda a: run_doctor(profile=a.profile, llm=a.llm, params_file=a.params_file)
    )
