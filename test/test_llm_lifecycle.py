"""llm_node lifecycle in-process: configure loads, deactivate pauses without unloading."""

from __future__ import annotations

from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter

from bolt_agent.nodes.llm_node import LlmNode
from support.ros_helpers import ros_node


def test_configure_activate_deactivate_reactivate_cleanup():
    with ros_node("lifecycle_probe") as (probe, _):
        node = LlmNode(
            context=probe.context,
            parameter_overrides=[
                Parameter("autostart", value=False),
                Parameter("n_ctx", value=1024),
                Parameter("enable_thinking", value=False),
                Parameter("tool_choice", value="none"),
                Parameter("max_new_tokens", value=8),
                Parameter("max_steps", value=1),
            ],
        )
        try:
            assert node.engine is None
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            engine = node.engine
            assert engine is not None and node.runner is not None
            assert node.submit("t0", "hello").exception(timeout=5) is not None  # not active yet
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            assert node.submit("t1", "hello").result(timeout=60).steps == 1
            assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
            paused = node.submit("t2", "hello")
            assert "not active" in str(paused.exception(timeout=5))
            assert node.failures("not_active") == 2  # t0 and t2: refused, counted, logged
            assert node.engine is engine  # paused, not unloaded
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            assert node.submit("t3", "again").result(timeout=60).steps == 1
            assert len(node.runner.dialogue.turns) == 2  # t1 and t3
            assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
            assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
            assert node.engine is None
        finally:
            node.destroy_node()


def test_configure_failure_returns_to_unconfigured():
    with ros_node("lifecycle_probe2") as (probe, _):
        node = LlmNode(
            context=probe.context,
            parameter_overrides=[
                Parameter("autostart", value=False),
                Parameter("profile", value="no_such_profile"),
            ],
        )
        try:
            assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
            node.set_parameters(
                [Parameter("profile", value="reachy_mini"), Parameter("n_ctx", value=1024)]
            )
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        finally:
            node.destroy_node()


def test_a_whole_number_for_a_double_parameter_is_taken_as_that_double():
    """``-p few_shot_nearest_min_score:=0`` (or ``0`` in a YAML file, ``--set …=0``): rclpy
    would refuse the integer for a double at declaration and end the node."""
    with ros_node("lifecycle_probe3") as (probe, _):
        node = LlmNode(
            context=probe.context,
            cli_args=["--ros-args", "-p", "end_of_turn_hints:=false", "-p", "top_p:=1"],
            parameter_overrides=[
                Parameter("autostart", value=False),
                Parameter("few_shot_nearest_min_score", value=0),
            ],
        )
        try:
            assert node.params.few_shot_nearest_min_score == 0.0
            assert isinstance(node.params.few_shot_nearest_min_score, float)
            assert node.get_parameter("top_p").type_ == Parameter.Type.DOUBLE
            assert node.params.top_p == 1.0 and node.params.end_of_turn_hints is False
            # later changes keep ROS's strict typing: refused with a reason, the node lives on
            result = node.set_parameters([Parameter("few_shot_nearest_min_score", value=2)])[0]
            assert not result.successful and node.params.few_shot_nearest_min_score == 0.0
        finally:
            node.destroy_node()
