"""The LLM eval through the real llm_node: a profile's request set on the Converse action.

The embedded stack (``StackSession``) runs llm_node with the profile's own tool servers
(animation_node, game_state_node), so tool results are real and the model continues the turn as
it would on the robot. A probe node sends each request as a Converse goal and observes what
leaves the node: ``speech/say`` (what the TTS would read), the goals the turn sent (the Converse
result's ``tool_calls``) and llm_node's ``bolt/turn_metrics`` (``first_speech`` and
``first_tool_goal``, stamped where the sentence is published and where the goal is sent).
Scoring: ``core.llm.evaluation``.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

#: tool servers per profile (llm_node is started last, after them)
SERVERS = {
    "reachy_mini": ["animation_node"],
    "blacksmith_npc": ["game_state_node", "animation_node"],
}
#: the eval's own llm_node settings: the whole 2-core machine is the LLM's here (no ASR/TTS)
EVAL_PARAMS: dict[str, Any] = {"n_threads": 2, "prefill_on_partial": False}
TURN_TIMEOUT_S = 180.0


def _stamp(t) -> float:
    return t.sec + t.nanosec * 1e-9


def run_profile(eval_set, log: Callable[[str], None] = print, limit: int = 0) -> dict[str, Any]:
    """Run every request of ``eval_set`` and score it. The requests go in conversations of
    ``SESSION_TURNS`` turns (``llm/reset`` before each): long enough to see a line said twice,
    short enough that one wrong reply copied by the next turns is not counted over the whole
    set; the cached prefix (system prompt, examples) stays warm across conversations."""
    # a DDS domain of our own: nobody else's stack or test hears our turns (as `bolt-agent bench`)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(102, 200))
    from rclpy.action import ActionClient
    from rclpy.node import Node
    from std_srvs.srv import Trigger

    from bolt_agent.core.llm.evaluation import SESSION_TURNS, TurnRecord, score
    from bolt_agent.nodes.qos import RELIABLE
    from bolt_agent.stack.session import StackSession
    from bolt_agent.stack.spec import StackSpec
    from bolt_agent_interfaces.action import Converse
    from bolt_agent_interfaces.msg import SpokenText, TurnMetrics

    requests = eval_set.requests[:limit] if limit else eval_set.requests
    params = {**EVAL_PARAMS, **eval_set.params}
    nodes = [*SERVERS.get(eval_set.profile, []), "llm_node"]
    spec = StackSpec(
        profile=eval_set.profile, sim=True, nodes=nodes, overrides={"llm_node": params}
    )
    lock = threading.Lock()
    said: dict[str, list[str]] = {}
    metrics: dict[str, TurnMetrics] = {}
    done = threading.Condition(lock)

    def on_say(msg: SpokenText) -> None:
        if msg.text:
            with lock:
                said.setdefault(msg.turn_id, []).append(msg.text)

    def on_metrics(msg: TurnMetrics) -> None:
        if msg.source == "llm":
            with done:
                metrics[msg.turn_id] = msg
                done.notify_all()

    records: list[TurnRecord] = []
    t0 = time.monotonic()
    with StackSession(spec) as session:
        session.build()
        probe = Node("llm_eval_probe")
        probe.create_subscription(SpokenText, "speech/say", on_say, RELIABLE)
        probe.create_subscription(TurnMetrics, "bolt/turn_metrics", on_metrics, RELIABLE)
        client = ActionClient(probe, Converse, "llm/converse")
        reset = probe.create_client(Trigger, "llm/reset")
        session.add(probe)
        failed = session.bring_up(progress=log)
        session.start()
        if failed or not client.wait_for_server(timeout_sec=30):
            raise RuntimeError(f"the stack did not come up: {failed or 'no llm/converse server'}")
        if not reset.wait_for_service(timeout_sec=30):
            raise RuntimeError("no llm/reset service")
        load_s = time.monotonic() - t0
        for i, request in enumerate(requests):
            if i % SESSION_TURNS == 0:
                answer = _wait(reset.call_async(Trigger.Request()), 30)
                if answer is None or not answer.success:
                    raise RuntimeError(f"llm/reset failed: {answer and answer.message}")
            records.append(_one_turn(client, Converse, request, said, metrics, done))
            r = records[-1]
            r.session = i // SESSION_TURNS
            log(f"[{i + 1}/{len(requests)}] {request.text!r} -> {r.sentences} {r.calls} {r.error}")
    result = score(requests, records)
    result.update(
        profile=eval_set.profile,
        split=eval_set.split,
        llm_node_params=params,
        load_s=load_s,
        run_s=time.monotonic() - t0,
    )
    return result


def _one_turn(client, Converse, request, said, metrics, done):
    from bolt_agent.core.llm.evaluation import TurnRecord

    record = TurnRecord(request=request.text)
    goal = Converse.Goal(prompt=request.text, use_defaults=True)
    accepted = _wait(client.send_goal_async(goal), 30)
    if accepted is None or not accepted.accepted:
        record.error = "goal not accepted"
        return record
    turn_id = "converse-" + bytes(accepted.goal_id.uuid).hex()[:8]
    response = _wait(accepted.get_result_async(), TURN_TIMEOUT_S)
    if response is None:
        record.error = "no result in time"
        return record
    with done:  # the turn's metrics (and with them its last speech) arrive after the result
        done.wait_for(lambda: turn_id in metrics, timeout=10)
        m = metrics.get(turn_id)
        record.sentences = list(said.get(turn_id, []))
    for call in response.result.tool_calls:  # the goals sent, in order
        record.calls.append({"name": call.name, "arguments": json.loads(call.arguments_json)})
    record.completion_tokens = response.result.completion_tokens
    if m is not None and _stamp(m.first_tool_goal) > 0:
        speech = _stamp(m.first_speech)
        record.speech_before_goal = 0 < speech <= _stamp(m.first_tool_goal)
    return record


def _wait(future, timeout: float):
    event = threading.Event()
    future.add_done_callback(lambda _f: event.set())
    if not event.wait(timeout):
        return None
    return future.result()
