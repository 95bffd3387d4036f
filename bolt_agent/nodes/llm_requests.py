"""What llm_node serves besides topics: the ``llm/converse`` action (one turn with the goal's
knobs, its speech streamed back as feedback, cancelled with the goal) and the ``llm/reset``
service (a new conversation)."""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # not builtin before 3.11
from concurrent.futures import wait as wait_futures
from typing import Any, Protocol

from std_srvs.srv import Trigger

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.turn_runner import TurnResult
from bolt_agent.nodes.llm_outputs import ConverseSink
from bolt_agent.nodes.messages import tool_call
from bolt_agent_interfaces.action import Converse


class LlmNode(Protocol):
    """What the requests need of llm_node (a protocol: llm_node imports this module)."""

    scheduler: Any

    def submit(self, turn_id: str, text: str, knobs: Knobs, sink: ConverseSink) -> Future: ...

    def default_knobs(self) -> Knobs: ...

    def cancel_current(self, why: str) -> str: ...


#: how long ``llm/reset`` waits for the worker to finish cancelling and forget the history
RESET_TIMEOUT_S = 10.0


def goal_knobs(goal: Converse.Goal, defaults: Knobs) -> Knobs:
    """The goal's knobs (a negative budget: unset), or the node's with ``use_defaults``."""
    if goal.use_defaults:
        return defaults
    budget = goal.thinking_token_budget
    return Knobs(
        enable_thinking=goal.enable_thinking,
        thinking_token_budget=budget if budget >= 0 else None,
        conversational_mode=goal.conversational_mode,
    )


def serve_converse(node: LlmNode, sink: ConverseSink) -> Converse.Result:
    """Run the goal of ``sink.goal_handle`` as a turn of ``node`` and end the goal."""
    goal_handle = sink.goal_handle
    goal = goal_handle.request
    turn_id = "converse-" + bytes(goal_handle.goal_id.uuid).hex()[:8]
    done = node.submit(turn_id, goal.prompt, goal_knobs(goal, node.default_knobs()), sink)
    while not done.done():
        if goal_handle.is_cancel_requested and node.scheduler.current_turn == turn_id:
            node.cancel_current("converse goal cancelled")
        wait_futures([done], timeout=0.02)
    if done.exception() is not None:
        goal_handle.abort()
        return Converse.Result(spoken_text=f"error: {done.exception()}")
    result: TurnResult = done.result()
    if result.cancelled:
        goal_handle.canceled()
    else:
        goal_handle.succeed()
    return Converse.Result(
        spoken_text=result.spoken_text,
        thinking_text=result.thinking_text,
        tool_calls=[tool_call(c["name"], c["arguments"]) for c in result.tool_calls],
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        thinking_tokens=result.thinking_tokens,
    )


def serve_cancel(node: LlmNode, response: Trigger.Response) -> Trigger.Response:
    """``llm/cancel``: stop the turn in progress (speech, tool goals) and drop the queued ones.
    ``success`` says whether a turn was running; ``message`` names it."""
    if node.scheduler is None:
        response.success, response.message = False, "llm_node is not configured"
        return response
    stopped = node.cancel_current("llm/cancel")
    response.success = bool(stopped)
    response.message = f"cancelled turn {stopped}" if stopped else "no turn in progress"
    return response


def serve_reset(node: LlmNode, response: Trigger.Response) -> Trigger.Response:
    """``llm/reset``: a new conversation (history forgotten, the turn in progress cancelled)."""
    if node.scheduler is None:
        response.success, response.message = False, "llm_node is not configured"
        return response
    try:
        forgotten = node.scheduler.reset("llm/reset").result(timeout=RESET_TIMEOUT_S)
    except FutureTimeout:
        response.success, response.message = False, "the LLM worker did not answer in time"
        return response
    response.success, response.message = True, f"forgot {forgotten} turn(s)"
    return response
