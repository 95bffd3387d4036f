"""``BoltLifecycleNode``: the node base for nodes that load models or connect hardware.

Lifecycle, the ROS way (``BoltLifecycleNode``): an inactive node is silent and inert. Every
publisher it creates is a lifecycle publisher, enabled only while active, so nothing it
publishes leaves the node before ``activate`` or after ``deactivate`` (its ``/diagnostics`` and
the lifecycle services excepted); subscriptions, services and action goals are ignored or
refused while inactive (the guard's gate). ``on_error`` (a transition callback raised) releases
what configure made, so the node goes back to unconfigured with nothing loaded. ``autostart``
brings a node up alone; ``ros2 launch … autostart:=false`` leaves it for ``ros2 lifecycle set``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node

from bolt_agent.core.memory import release_free_memory
from bolt_agent.nodes.base import _BoltNodeMixin
from bolt_agent.nodes.params import ParamError, build_params


class BoltLifecycleNode(_BoltNodeMixin, LifecycleNode):
    """A lifecycle node: ``autostart`` (configure + activate when run alone), parameters
    re-read and validated at configure, shutdown deactivates an active node first."""

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.declare_parameter(
            "autostart",
            True,
            ParameterDescriptor(description="configure and activate on start (no manager)"),
        )
        self._active = False
        self._gate_inputs = True  # from here on, inputs are ignored while inactive
        self._is_configured = False
        self._configure_error = ""
        self._init_bolt()

    def _configured(self) -> bool:
        return self._is_configured

    def _accepts_input(self) -> bool:
        return self._active

    def create_publisher(self, msg_type: Any, topic: str, qos_profile: Any, **kw: Any) -> Any:
        """A lifecycle publisher: it sends only while the node is active. One made while the
        node is already active starts enabled. (rclpy's own, made while the node is being
        built, e.g. ``/rosout``, stay plain.)"""
        if "_managed_entities" not in self.__dict__:
            return Node.create_publisher(self, msg_type, topic, qos_profile, **kw)
        pub = self.create_lifecycle_publisher(msg_type, topic, qos_profile, **kw)
        if self._active:
            pub.on_activate(None)
        return pub

    def destroy_publisher(self, publisher: Any) -> bool:
        self.__dict__.get("_managed_entities", set()).discard(publisher)
        return super().destroy_publisher(publisher)

    def lifecycle_state(self) -> str:
        """The lifecycle state's label: unconfigured, inactive, active, finalized (or a
        transition's label, e.g. configuring)."""
        try:
            return self._state_machine.current_state[1]
        except Exception:  # not initialised yet / torn down: our own flags
            if self._active:
                return "active"
            return "inactive" if self._is_configured else "unconfigured"

    def _diagnostic_level(self) -> tuple[str, str]:
        state = self.lifecycle_state()
        if state == "active":
            return super()._diagnostic_level()
        if self._configure_error and not self._is_configured:
            return "ERROR", f"{state}: {self._configure_error}"
        return "WARN", f"{state}: not running"

    def diagnostic_status(self) -> DiagnosticStatus:
        status = super().diagnostic_status()
        status.values.insert(0, KeyValue(key="lifecycle_state", value=self.lifecycle_state()))
        status.values.append(KeyValue(key="ignored_inactive", value=str(self.ignored_inactive())))
        return status

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.params = build_params(self.Params, self._raw_params())
        except ParamError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            self._configure_error = f"configure failed: {exc}"
            self.status("ERROR", f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        errors_before = self._errors
        result = self._run_transition("configure", self.configure)
        # loading a model leaves its temporaries as free heap that glibc keeps (whisper's
        # float16 → int8 conversion 37 MiB, Piper's graph 29 MiB, measured in a process per
        # node as ros2 launch runs them): give it back once, off any turn's path
        release_free_memory()
        self._is_configured = result == TransitionCallbackReturn.SUCCESS
        if self._is_configured:
            self._configure_error = ""
        else:  # the reason: what configure() recorded (record_failure), else the log has it
            reason = self._last_error if self._errors != errors_before else "see the log"
            self._configure_error = f"configure failed: {reason}"
            self.status("ERROR", f"configure failed: {reason}")
        return result

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._health_lock:  # a new activation: what the last one reported is history
            self._status_level, self._status_message = "", ""
        self._active = True  # before the node's threads start: they run while it is set
        super().on_activate(state)  # publishers first: activate() may already publish
        try:
            result = self._run_transition("activate", self.activate)
        except Exception:
            self._active = False
            LifecycleNode.on_deactivate(self, state)
            raise
        if result != TransitionCallbackReturn.SUCCESS:
            self._active = False
            LifecycleNode.on_deactivate(self, state)
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        self.cancel_retry()
        self.deactivate()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.cleanup()
        release_free_memory()  # the models just dropped
        self._is_configured = False
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active:
            self.on_deactivate(state)
        return TransitionCallbackReturn.SUCCESS

    def _run_transition(self, name: str, step: Callable[[], Any]) -> Any:
        """``step()``; what it raises is logged with its traceback and counted, then raised on
        so that rclpy moves to ErrorProcessing and calls ``on_error`` (rclpy itself logs
        nothing)."""
        try:
            return step()
        except Exception as exc:
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self.get_logger().error(f"{name} raised {exc!r}\n{trace}")
            self.record_failure("transition", f"{name} raised {exc!r}", log=False)
            self._configure_error = f"{name} raised {exc!r}"
            raise

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition callback raised: stop what runs and release what configure made, then
        return to unconfigured (SUCCESS) so that ``configure`` can be tried again; FAILURE
        (finalized) only if even that fails."""
        self.get_logger().error(f"a transition from {state.label} failed: cleaning up")
        try:
            self._active = False
            self.cancel_retry()
            self.deactivate()
            self.cleanup()
        except Exception as exc:
            self.record_failure("on_error", f"cleanup after an error failed: {exc!r}")
            return TransitionCallbackReturn.FAILURE
        finally:
            release_free_memory()
        self._is_configured = False
        self.status("ERROR", f"{self._configure_error or 'a transition raised'}; cleaned up")
        return TransitionCallbackReturn.SUCCESS

    # --- what a node implements --------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        """Load models, create publishers/subscriptions (``self.params`` is fresh)."""
        return TransitionCallbackReturn.SUCCESS

    def activate(self) -> TransitionCallbackReturn:
        """Start threads and devices."""
        return TransitionCallbackReturn.SUCCESS

    def deactivate(self) -> None:
        """Stop threads and devices (``self._active`` is already False)."""

    def cleanup(self) -> None:
        """Destroy what configure created, free models."""
