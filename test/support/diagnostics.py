"""Reading /diagnostics from node processes: each node's latest DiagnosticStatus by name."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from bolt_agent.nodes import qos
from support.ros_helpers import spin_until

FAST = "diagnostics_period_s:=0.2"
LEVEL = {
    DiagnosticStatus.OK: "OK",
    DiagnosticStatus.WARN: "WARN",
    DiagnosticStatus.ERROR: "ERROR",
    DiagnosticStatus.STALE: "STALE",
}


def start(node_process, module: str, ns: str, *params: str):
    args = ["-m", f"bolt_agent.nodes.{module}", "--ros-args", "-r", f"__ns:={ns}"]
    for p in (FAST, *params):
        args += ["-p", p]
    return node_process(*args, name=module)


class Diagnostics:
    """The latest DiagnosticStatus of each node under ``ns``, from /diagnostics."""

    def __init__(self, node, ns: str) -> None:
        self.ns, self.latest, self.count = ns, {}, 0
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on, qos.DIAGNOSTICS)

    def _on(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith(self.ns + "/"):
                self.latest[status.name.removeprefix(self.ns + "/")] = status
                self.count += 1

    def get(self, name: str) -> tuple[str, str, dict[str, str]] | None:
        """(level, message, values) of node ``name``, or None before its first report."""
        status = self.latest.get(name)
        if status is None:
            return None
        return LEVEL[status.level], status.message, {kv.key: kv.value for kv in status.values}

    def wait(self, ex, name: str, predicate, timeout: float, procs=()) -> tuple:
        """Spin until node ``name``'s report satisfies ``predicate(level, message, values)``."""

        def ok() -> bool:
            report = self.get(name)
            return report is not None and predicate(*report)

        try:
            spin_until(ex, ok, timeout, f"{name} on /diagnostics")
        except AssertionError as exc:
            logs = "\n".join(p.log() for p in procs)
            raise AssertionError(f"{exc}; last report: {self.get(name)}\n{logs}") from None
        return self.get(name)


class ActiveStatus(dict):
    """Node name → its latest message on /diagnostics, for nodes (under ``ns``) that report OK:
    active and running. Empty until then; ``len()`` counts the nodes that are up."""

    def __init__(self, node, ns: str, names: tuple[str, ...]) -> None:
        super().__init__()
        self._names = {f"{ns}/{n}": n for n in names}
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on, qos.DIAGNOSTICS)

    def _on(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            name = self._names.get(status.name)
            if name is not None and status.level == DiagnosticStatus.OK:
                self[name] = status.message


class History(list):
    """Every report of one node on /diagnostics, in order, as ``{"level", "message", **values}``
    dicts (what the node's ``status()`` set, its extras and counters included)."""

    def __init__(self, node, ns: str, name: str) -> None:
        super().__init__()
        self._name = f"{ns}/{name}"
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on, qos.DIAGNOSTICS)

    def _on(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == self._name:
                values = {kv.key: kv.value for kv in status.values}
                self.append({**values, "level": LEVEL[status.level], "message": status.message})

    def last(self) -> dict:
        return self[-1] if self else {}
