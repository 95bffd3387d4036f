"""The benchmark's stack host answers ``diagnostics`` with every node's values, and says which
node could not give them instead of failing the whole answer."""

from __future__ import annotations

import json

from bolt_agent.benchmarks.stack_host import answer


class _Node:
    def __init__(self, values: dict | None) -> None:
        self._values = values

    def diagnostic_values(self) -> dict:
        if self._values is None:
            raise RuntimeError("destroyed")
        return self._values


def test_diagnostics_by_node_and_a_failing_node_named():
    nodes = {"tts_node": _Node({"output_underflows": 3}), "asr_node": _Node(None)}
    reply = answer("diagnostics", nodes, tracer=None)  # type: ignore[arg-type]
    assert reply is not None and reply["event"] == "diagnostics"
    assert reply["diagnostics"]["tts_node"] == {"output_underflows": 3}
    assert "destroyed" in reply["diagnostics"]["asr_node"]["error"]
    json.dumps(reply)  # one JSON line on the host's stdout
