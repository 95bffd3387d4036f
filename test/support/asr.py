"""asr_node in its own process."""

from __future__ import annotations


def start_asr(
    node_process, ns: str, *params: str, remaps: tuple[str, ...] = (), env: dict | None = None
):
    args = ["-m", "bolt_agent.nodes.asr_node", "--ros-args", "-r", f"__ns:={ns}"]
    for p in params:
        args += ["-p", p]
    for r in remaps:
        args += ["-r", r]
    return node_process(*args, env=env, name="asr")
