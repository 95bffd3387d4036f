"""animation_node: the ``animation/play`` action server, teleop override, joint commands.
Logic: ``core.motion.animation_control``. A control thread (absolute schedule, no drift) steps
the controller, sends commands through a ``RobotLink`` (backend + connection: lost, why,
reconnect), publishes ``robot/joint_commands`` (JointCommand, ``origin`` llm | teleop | idle) and
``robot/joint_states``, what the robot measures. A lost robot aborts the goals with the reason and
turns ``/diagnostics`` ERROR. Decisions and outcomes go to ``animation/events``; the override
state is latched on ``teleop/override_state``.

Goals: execute starts when the motion starts (queued goals stay ACCEPTED) and blocks an executor
thread until the outcome (the runtime's MultiThreadedExecutor; coroutines would busy-poll).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rclpy.action import CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.lifecycle import TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String

from bolt_agent.core.motion.animation import AnimationLibrary
from bolt_agent.core.motion.animation_control import AnimationController, Outcome
from bolt_agent.core.motion.backends import make_backend
from bolt_agent.core.motion.robot_link import LinkEvent, RobotLink
from bolt_agent.nodes import qos
from bolt_agent.nodes.animation_params import AnimationParams
from bolt_agent.nodes.distro import RCLError
from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.messages import joint_command
from bolt_agent.nodes.operator_switch import OperatorSwitch
from bolt_agent.nodes.runtime import main_for
from bolt_agent_interfaces.action import PlayAnimation
from bolt_agent_interfaces.msg import AnimationEvent, JointCommand

DEACTIVATED = "animation_node deactivated"  # why goals end then (the robot itself is fine)


@dataclass
class _Goal:
    handle: ServerGoalHandle
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Outcome | None = None
    executing: bool = False


class AnimationNode(BoltLifecycleNode):
    """A lifecycle node: configure loads the library and connects the backend (the robot, or
    Pollen's daemon), activate starts the control thread, deactivate stops it (goals abort, the
    robot holds its pose), cleanup releases the backend (resting pose first with
    ``sleep_on_stop``)."""

    Params = AnimationParams

    def __init__(self, **node_kwargs) -> None:  # e.g. context=, parameter_overrides=
        super().__init__("animation_node", **node_kwargs)
        self.backend = self.controller = self.link = self.action_server = None
        self.override_switch = None
        self._entities: list[Any] = []
        self._goals: dict[str, _Goal] = {}
        self._goals_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticks = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        p = self.params
        library = AnimationLibrary.load(p.animations_file or None)
        self.backend = make_backend(  # (the sim backend takes no connection options)
            p.backend,
            library.neutral(),
            host=p.reachy_host,
            port=p.reachy_port,
            connect_timeout_s=p.connect_timeout_s,
        )
        self.controller = AnimationController(
            library,
            rate_hz=p.rate_hz,
            policy=p.policy,
            idle_animation=p.idle_animation,
            idle_after_s=p.idle_after_s,
            problem=self.backend.problem,
        )
        for name, why in self.controller.refused.items():
            self.get_logger().error(f"animation {name!r} refused: {why}")
        self.link = RobotLink(self.backend, max_retry_s=p.reconnect_max_s)
        self._feedback_every = max(1, round(p.rate_hz / max(p.feedback_rate_hz, 0.1)))
        self._period = 1.0 / p.rate_hz

        self.cmd_pub = self.create_publisher(JointCommand, "robot/joint_commands", qos.RELIABLE)
        self.state_pub = self.create_publisher(JointState, "robot/joint_states", qos.RELIABLE)
        self.events_pub = self.create_publisher(AnimationEvent, "animation/events", qos.RELIABLE)
        self.override_pub = self.create_publisher(Bool, "teleop/override_state", qos.LATCHED)

        inputs = ReentrantCallbackGroup()
        # latched and volatile publishers alike, each sample once and in order
        self.override_switch = OperatorSwitch(
            self, "teleop/override", self._on_override, callback_group=inputs
        )
        self._entities = [
            *self.override_switch.subscriptions,
            self.create_subscription(
                JointState, "teleop/joint_command", self._on_teleop_joints, qos.RELIABLE,
                callback_group=inputs,
            ),
            self.create_subscription(
                String, "teleop/animation", self._on_teleop_animation, qos.RELIABLE,
                callback_group=inputs,
            ),
        ]  # fmt: skip
        self.action_server = self.create_action_server(
            PlayAnimation,
            "animation/play",
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            handle_accepted_callback=self._on_accepted,
            cancel_callback=self._on_cancel,
            callback_group=inputs,
        )
        self.get_logger().info(
            f"animations: {', '.join(sorted(library.animations))}; {p.rate_hz:.0f} Hz, "
            f"policy={p.policy}, backend={p.backend}, idle={p.idle_animation or 'off'}"
        )
        return TransitionCallbackReturn.SUCCESS

    def activate(self) -> TransitionCallbackReturn:
        if self.controller.robot_reason == DEACTIVATED:  # paused, not lost: motion may go on
            self.controller.robot_back(None)
        self.override_pub.publish(Bool(data=self.controller.override))
        self._stop.clear()
        self._thread = threading.Thread(target=self._control_loop, name="animation_control")
        self._thread.start()
        return TransitionCallbackReturn.SUCCESS

    def deactivate(self) -> None:
        """Stop the control thread; goals still running or queued abort with the reason."""
        self._stop.set()
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)
        self._thread = None
        if self.controller is not None:
            self.controller.robot_lost(DEACTIVATED)
            for outcome in self.controller.take_outcomes():
                self._complete(outcome)

    def cleanup(self) -> None:
        """Release the robot (resting pose first with ``sleep_on_stop``) and what configure
        made."""
        if self.backend is not None:
            if self.params.sleep_on_stop and self.link is not None and self.link.connected:
                try:
                    self.backend.goto_sleep()
                except Exception as exc:
                    self.get_logger().warning(f"resting pose at stop failed: {exc!r}")
            self.backend.close()
        if self.action_server is not None:
            self.action_server.destroy()
        for sub in self._entities:
            self.destroy_subscription(sub)
        for pub in (self.cmd_pub, self.state_pub, self.events_pub, self.override_pub):
            self.destroy_publisher(pub)
        self.backend = self.controller = self.link = self.action_server = None
        self.override_switch, self._entities = None, []

    # -- control loop ---------------------------------------------------------------------------
    def _control_loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set() and self.context.ok():
            try:
                self._tick()
            except Exception as exc:  # never let the loop die silently; stop on shutdown
                if not self.context.ok():
                    return
                self.get_logger().error(f"control step failed: {exc!r}", throttle_duration_sec=1.0)
                self.record_failure("control_step", f"control step failed: {exc!r}", log=False)
            next_t += self._period
            delay = next_t - time.monotonic()
            if delay < -self._period:  # overran by more than a period: resync, do not burst
                next_t, delay = time.monotonic(), 0.0
            self._stop.wait(max(0.0, delay))

    def _tick(self) -> None:
        stamp = self.get_clock().now().to_msg()  # taken before the step: see docs (override)
        if not self.link.connected:
            self._link_changed(self.link.connect())
            for outcome in self.controller.take_outcomes():  # goals the loss aborted
                self._complete(outcome)
            if not self.link.connected:
                return
        result = self.controller.step()
        lost = None
        if result.command is not None:
            cmd = result.command
            lost = self.link.send(cmd.positions)
            command = joint_command(self.controller.lib.joints, cmd.positions, cmd.origin)
            command.header.stamp = stamp
            self.cmd_pub.publish(command)
        measured, lost_reading = self.link.read_state()
        if measured is not None:  # what the robot measures, never the last command
            self.state_pub.publish(self._joint_state(measured, stamp))
        self._link_changed(lost or lost_reading)
        for goal_id in result.started:
            self._start_execute(goal_id)
        self._ticks += 1
        if self._ticks % self._feedback_every == 0:
            for goal_id, progress in result.progress.items():
                goal = self._goals.get(goal_id)
                if goal is not None and goal.executing and progress < 1.0:
                    goal.handle.publish_feedback(PlayAnimation.Feedback(progress=float(progress)))
        for outcome in result.finished:
            self._complete(outcome)

    def _link_changed(self, event: LinkEvent | None) -> None:
        """The robot went away (goals abort with the reason, ERROR until it is back) or came
        back (motion resumes from the pose it measures)."""
        if event is None:
            return
        if event.lost:
            message = f"robot unavailable: {event.reason}; reconnecting"
            self.controller.robot_lost(event.reason)
            self.record_failure("robot_lost", message)
            self.status("ERROR", message)
            self._event(AnimationEvent.EVENT_ROBOT_LOST, reason=event.reason)
            return
        pose = event.pose
        if self.params.wake_up_on_start and self.link.losses == 0:
            try:
                self.backend.wake_up()
                pose, _ = self.link.read_state()
            except Exception as exc:  # the motion is a nicety: the link itself works
                self.record_failure("wake_up", f"wake-up motion failed: {exc!r}")
        self.controller.robot_back(pose)
        self.status("OK", f"robot connected: {self.backend.where}")
        self._event(AnimationEvent.EVENT_ROBOT_CONNECTED, reason=self.backend.where)

    def _joint_state(self, positions, stamp) -> JointState:
        msg = JointState(
            name=list(self.controller.lib.joints), position=[float(x) for x in positions]
        )
        msg.header.stamp = stamp
        return msg

    def _start_execute(self, goal_id: str) -> None:
        """ACCEPTED → EXECUTING when its motion starts, or when it ends without ever starting."""
        with self._goals_lock:
            goal = self._goals.get(goal_id)
            if goal is None or goal.executing:
                return
            goal.executing = True
        goal.handle.execute()

    def _complete(self, outcome: Outcome) -> None:
        self._event(outcome.status, goal_id=outcome.goal_id, reason=outcome.message)
        with self._goals_lock:
            goal = self._goals.get(outcome.goal_id)
        if goal is not None:
            goal.outcome = outcome
            goal.done.set()
            self._start_execute(outcome.goal_id)

    # -- action server --------------------------------------------------------------------------
    def _on_goal(self, goal: PlayAnimation.Goal) -> GoalResponse:
        decision = self.controller.check(goal.name, goal.speed, goal.source)
        if not decision.accepted:
            self.get_logger().warning(f"goal {goal.name!r} rejected: {decision.reason}")
            self._event(
                AnimationEvent.EVENT_REJECTED,
                name=goal.name,
                source=goal.source or PlayAnimation.Goal.SOURCE_LLM,
                reason=decision.reason,
            )
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _on_accepted(self, handle: ServerGoalHandle) -> None:
        goal_id = bytes(handle.goal_id.uuid).hex()
        with self._goals_lock:
            self._goals[goal_id] = _Goal(handle)
        request = handle.request
        decision = self.controller.submit(goal_id, request.name, request.speed, request.source)
        if decision.accepted:
            self._event(
                AnimationEvent.EVENT_ACCEPTED,
                goal_id=goal_id,
                name=request.name,
                source=request.source or PlayAnimation.Goal.SOURCE_LLM,
            )
        else:  # the state changed since goal_callback (e.g. override switched on): abort it
            self._complete(Outcome(goal_id, "aborted", decision.reason))

    def _on_cancel(self, handle: ServerGoalHandle) -> CancelResponse:
        # Stop now: the next control period emits nothing for it; execute then finishes it.
        canceled = self.controller.cancel(bytes(handle.goal_id.uuid).hex())
        return CancelResponse.ACCEPT if canceled else CancelResponse.REJECT

    def _execute(self, handle: ServerGoalHandle) -> PlayAnimation.Result:
        goal_id = bytes(handle.goal_id.uuid).hex()
        with self._goals_lock:
            goal = self._goals[goal_id]
        while not goal.done.wait(0.1):  # one executor thread per *running* goal
            if not self.context.ok():
                break
        with self._goals_lock:
            self._goals.pop(goal_id, None)
        outcome = goal.outcome or Outcome(goal_id, "aborted", "node shutting down")
        try:
            if outcome.status == "succeeded":
                handle.succeed()
            elif outcome.status == "canceled" and handle.is_cancel_requested:
                handle.canceled()
            else:
                handle.abort()
        except RCLError:  # the context went down (Ctrl-C) mid-goal: the state is set, not sent
            if self.context.ok():
                raise
        return PlayAnimation.Result(success=outcome.status == "succeeded", message=outcome.message)

    # -- teleop ---------------------------------------------------------------------------------
    def _on_override(self, on: bool) -> None:
        self.controller.set_override(on)  # aborts llm goals before the state is announced
        self.override_pub.publish(Bool(data=on))
        self.get_logger().info(f"teleop override {'ON' if on else 'off'}")
        self._event(AnimationEvent.EVENT_OVERRIDE, override_on=on)

    def _on_teleop_joints(self, msg: JointState) -> None:
        names = list(msg.name) or list(self.controller.lib.joints)[: len(msg.position)]
        if len(names) != len(msg.position):
            self._reject_teleop(
                AnimationEvent.INPUT_JOINT_COMMAND, "name and position lengths differ"
            )
            return
        decision = self.controller.teleop_pose(dict(zip(names, msg.position, strict=True)))
        if not decision.accepted:
            self._reject_teleop(AnimationEvent.INPUT_JOINT_COMMAND, decision.reason)

    def _on_teleop_animation(self, msg: String) -> None:
        decision = self.controller.play_teleop(msg.data.strip())
        if not decision.accepted:
            self._reject_teleop(AnimationEvent.INPUT_ANIMATION, decision.reason)
        else:
            self._event(
                AnimationEvent.EVENT_ACCEPTED,
                name=msg.data.strip(),
                source=PlayAnimation.Goal.SOURCE_TELEOP,
            )

    def _reject_teleop(self, what: str, reason: str) -> None:
        self.get_logger().warning(f"teleop/{what} rejected: {reason}")
        self._event(
            AnimationEvent.EVENT_REJECTED,
            source=PlayAnimation.Goal.SOURCE_TELEOP,
            input=what,
            reason=reason,
        )

    def _event(self, event: str, **fields: Any) -> None:
        msg = AnimationEvent(event=event, **fields)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.events_pub.publish(msg)

    def diagnostic_values(self) -> dict[str, Any]:
        if self.controller is None or self.link is None or self.backend is None:
            return {"device": f"robot backend {self.params.backend} (not configured)"}
        p, active = self.params, self.controller.active
        with self._goals_lock:
            goals = len(self._goals)
        return {
            "device": f"robot backend {p.backend}"
            + (f" ({self.backend.where})" if p.backend != "sim" else ""),
            "robot_connected": self.link.connected,
            "robot_losses": self.link.losses,
            "robot_unavailable": "" if self.link.connected else self.link.reason,
            "animations": len(self.controller.lib.animations),
            "playing": f"{active[1]} ({active[2]})" if active else "",
            "override": self.controller.override,
            "queue_depth": goals,
            "control_loop_alive": self._thread is not None and self._thread.is_alive(),
        }

    def destroy_node(self) -> None:
        if self._active:
            self.on_deactivate(None)
        if self._is_configured:
            self.cleanup()
            self._is_configured = False
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return main_for(AnimationNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
