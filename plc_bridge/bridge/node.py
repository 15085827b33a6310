"""``plc_bridge``: the ROS 2 lifecycle node over ``BridgeCore`` (thin shell, rclpy only here).

- configure: load and validate the parameters, start the bridge loop (it connects to Redis and
  the PLC in the background and keeps the PLC at a stop: monitor keys live, no commands);
- activate: commands are forwarded (after a fresh heartbeat edge, as always);
- deactivate: a stop is written to the PLC before the transition returns;
- cleanup / shutdown: the loop ends with a last stop, and everything configure created is
  released: the bridge loop's PLC and Redis connections, the publishers, timers, the cmd_vel
  subscription and its Redis client (100 configure/cleanup cycles leave no growth in
  publishers, subscriptions or file descriptors: test/test_bridge_node.py).

Publishes ``odom`` (nav_msgs/Odometry, dead reckoning of the measured twist, frame
``<frame_prefix>odom`` -> ``<frame_prefix>base_link``; ``frame_prefix`` e.g. ``exc2/`` in a
fleet, empty by default), ``plc/wheel_states`` (sensor_msgs/JointState: measured wheel/track speeds
[m/s] as velocity, steering angles [rad] as position; tracks are ``track_left``/``track_right``,
wheels ``wheel_<name>``, steering ``steer_<name>``) and ``/diagnostics``. With
``cmd_vel_to_redis`` it also plays the operational layer: ``cmd_vel`` (geometry_msgs/Twist) is
written to the Redis control keys and the heartbeat is toggled while cmd_vel keeps arriving
(within ``cmd_vel_timeout_s``).

Parameters: one spec, ``plc_bridge.parameters.BRIDGE`` (docs/configuration.md shows it):
every parameter is declared with its description, unit, range and ``read_only`` flag (``ros2
param describe``); a parameter not given to the node (``--params-file``, ``-p``) takes its value
from ``config_file`` (default the package's config/plc.yaml), else the spec's default. A
parameter the node does not know is a start-up error naming it and the closest known name (exit
2), never a silently used default; a deprecated name (``redis_timeout``...) is used with a
warning naming the new one. The dynamic parameters (heartbeat and PLC-alive timeouts, command
envelope, liveness TTL, ``publish_rate_hz``, ``cmd_vel_timeout_s``) are validated in the on-set
callback (range, the rules between parameters: the reason comes back to ``ros2 param set``) and
applied in the post-set callback: to the bridge loop between two of its cycles, to the
publishing timer at once. Every other one is read only: ``ros2 param set`` is refused with the
reason. With ``autostart`` a configuration that fails (bad model, bad Redis URL) ends the
process with one message and exit code 2.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import redis
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from sensor_msgs.msg import JointState

from excavator_common import realtime
from excavator_common.frames import check_frame_prefix
from excavator_common.node_args import NodeUsage
from excavator_common.parameter_files import read_parameter_file
from excavator_common.parameter_node import NodeParameters
from excavator_common.parameters import Value
from excavator_common.ros_runtime import (
    ERROR,
    OK,
    WARN,
    Diagnostics,
    fatal,
    run_node,
    steady_timer,
)
from excavator_kinematics.vehicle import BodyTwist, artof_from_twist
from plc_bridge import redis_keys as keys
from plc_bridge.bridge.core import DYNAMIC, BridgeCore
from plc_bridge.bridge.odometry import Pose2D, integrate
from plc_bridge.command_seq import from_dint, refusal_name
from plc_bridge.config import BRIDGE, BridgeConfig, build_config, default_config_path
from plc_bridge.errors import BridgeConfigError

# Stop reasons that are normal operation rather than a fault (diagnostics level WARN, not ERROR).
_BENIGN = ("waiting_heartbeat", "waiting_heartbeat_edge", "heartbeat_stale", "deactivated",
           "inactive", "starting")


class BridgeParameters(NodeParameters):
    """The node's parameters (``BRIDGE``): those not given to the node come from
    ``config_file``; an unknown one is an error (the shared class only warns: one ``/**`` file
    may serve several nodes, but every key of a bridge file is the bridge's)."""

    def __init__(self, node: PlcBridgeNode) -> None:
        given = dict(getattr(node, "_parameter_overrides", {}))
        cf = given.get("config_file")
        self.config_file = str(cf.value) if cf is not None and cf.value else ""
        path = self.config_file or str(default_config_path())
        from_file = read_parameter_file(path, node.get_name(), error=BridgeConfigError)
        # deprecated names of config_file: warned here, unless the node was given them too
        def warn(message: str) -> None:
            if not any(f"'{old}'" in message for old in given):
                node.get_logger().warning(message)

        from_file = BRIDGE.rename_deprecated(from_file, path, warn)
        unknown = BRIDGE.unknown(from_file)
        if unknown:
            raise BridgeConfigError(BRIDGE.unknown_message(unknown, path))
        renamed = {BRIDGE.deprecated.get(n, n) for n in given}
        self._base = {n: v for n, v in from_file.items() if n not in renamed}
        super().__init__(node, BRIDGE, node.apply_parameters, warn_unknown=False)
        if self.unknown:
            raise BridgeConfigError(
                BRIDGE.unknown_message(self.unknown, f"{node.get_name()} parameters") +
                " (the parameters of plc_bridge: `ros2 param list /plc_bridge`)")

    def _overrides(self) -> dict[str, Parameter[Any]]:
        out: dict[str, Parameter[Any]] = {n: Parameter(n, value=v) for n, v in self._base.items()}
        out.update(super()._overrides())
        return out


class PlcBridgeNode(LifecycleNode):
    def __init__(self) -> None:
        super().__init__("plc_bridge")
        self.params = BridgeParameters(self)
        self.config_file = self.params.config_file
        self.autostart = bool(self.params["autostart"])
        self.publish_rate_hz = float(self.params["publish_rate_hz"])
        self.cmd_vel_to_redis = bool(self.params["cmd_vel_to_redis"])
        self.cmd_vel_timeout_s = float(self.params["cmd_vel_timeout_s"])
        frame_prefix = str(self.params["frame_prefix"])
        try:
            check_frame_prefix(frame_prefix)
        except ValueError as exc:
            raise BridgeConfigError(str(exc)) from None
        self.odom_frame, self.base_frame = frame_prefix + "odom", frame_prefix + "base_link"
        self.core: BridgeCore | None = None
        self.config: BridgeConfig | None = None
        self.diagnostics = Diagnostics(self, "plc_bridge")
        # created by on_configure, released by on_cleanup / on_shutdown (stop_core())
        self.odom_pub: Publisher[Odometry] | None = None
        self.wheel_pub: Publisher[JointState] | None = None
        self._cmd_sub: Subscription[Twist] | None = None
        # not ``_timers``: that is rclpy's own list of the node's timers (Node._timers, what
        # the executor waits on); assigning it dropped every timer made before (the hang
        # watchdog's, the autostart's) from the executor
        self._lifecycle_timers: list[Timer] = []
        self._publish_timer: Timer | None = None
        self._cmd_client: redis.Redis | None = None
        self._pose = Pose2D()
        self._last_stamp: float | None = None
        self._active = False
        self._last_cmd_vel = -1e9
        self._hb_level = False
        self._config_error = ""
        self.exit_code = 0   # non-zero when autostart's configure failed
        if self.autostart:
            self._autostart_timer = steady_timer(self, 0.0, self._do_autostart)

    def apply_parameters(self, changes: dict[str, Value]) -> None:
        """Post-set: apply validated run-time changes. The loop's own take effect between two
        of its cycles (``BridgeCore.update_parameters``); unconfigured, at the next configure
        (which reads ``self.params``)."""
        if "publish_rate_hz" in changes:
            self.publish_rate_hz = float(changes["publish_rate_hz"])  # type: ignore[arg-type]
            if self._publish_timer is not None:
                self._publish_timer.timer_period_ns = int(1e9 / self.publish_rate_hz)
        if "cmd_vel_timeout_s" in changes:
            self.cmd_vel_timeout_s = float(changes["cmd_vel_timeout_s"])  # type: ignore[arg-type]
        core_changes = {k: v for k, v in changes.items() if k in DYNAMIC}
        if core_changes and self.core is not None:
            try:
                self.core.update_parameters(core_changes)
                self.config = self.core.config
            except BridgeConfigError as e:   # validated on set: not expected
                self.get_logger().error(f"parameter change not applied: {e}")

    def _do_autostart(self) -> None:
        self._autostart_timer.cancel()
        self.trigger_configure()
        if self.core is None:
            # unconfigured is useless here: one message, end the process with exit code 2
            why = self._config_error or "configure failed"
            self.exit_code = fatal(f"invalid configuration: {why}")
            self.context.try_shutdown()
            return
        self.trigger_activate()

    # --- lifecycle -----------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.config = build_config(self.params.values,
                                       source=self.config_file or str(default_config_path()))
            self.core = BridgeCore(self.config, logger=None)
        except BridgeConfigError as e:
            self._config_error = str(e)
            if not self.autostart:   # with autostart, run_node prints it once and exits 2
                self.get_logger().fatal(f"invalid configuration: {e}")
            return TransitionCallbackReturn.FAILURE
        if self.config.rt_priority > 0:
            self._executor_realtime(max(1, self.config.rt_priority - 1))
        self.core.set_enabled(False, "inactive")
        self.core.start()
        self._pose, self._last_stamp = Pose2D(), None   # odometry starts anew at each configure
        self.odom_pub = self.create_publisher(Odometry, "odom", 10)
        self.wheel_pub = self.create_publisher(JointState, "plc/wheel_states", 10)
        self._publish_timer = steady_timer(self, 1.0 / self.publish_rate_hz, self._publish)
        self._lifecycle_timers = [self._publish_timer,
                                  steady_timer(self, 1.0, self._publish_diagnostics)]
        if self.cmd_vel_to_redis:
            self._cmd_client = redis.Redis.from_url(self.config.redis_url, socket_timeout=0.2,
                                                    socket_connect_timeout=0.2)
            self._cmd_sub = self.create_subscription(Twist, "cmd_vel", self._on_cmd_vel, 10)
            self._lifecycle_timers.append(steady_timer(self, 0.25, self._heartbeat))
        self.get_logger().info(
            f"configured: model {self.config.model}, PLC {self.config.plc_host}:"
            f"{self.config.plc_port} rack {self.config.rack} slot {self.config.slot}, "
            f"{self.config.cycle_hz:g} Hz")
        return TransitionCallbackReturn.SUCCESS

    def _executor_realtime(self, priority: int) -> None:
        """SCHED_FIFO one step below the loop for this thread (rclpy's executor: on_configure
        runs in it), before the loop starts. It holds the GIL while it publishes odometry; an
        ordinary thread pre-empted while holding it would hold up the real-time loop with it
        (the GIL does not inherit priority; ``excavator_common.realtime.fifo``)."""
        try:
            realtime.fifo(priority)
        except (OSError, AttributeError) as e:
            self.get_logger().warning(
                f"rt_priority: the executor thread stays at normal scheduling ({e}); the loop "
                "may wait for the GIL behind it")

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self.core is not None
        self.core.set_enabled(True)
        self._active = True
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        if self.core is not None:
            self.core.set_enabled(False, "deactivated")   # returns after the stop was written
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.stop_core()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.stop_core()
        return TransitionCallbackReturn.SUCCESS

    def destroy_node(self) -> None:
        """rclpy's LifecycleNode keeps its state machine, which holds the node's handle:
        ``destroy_node`` alone left the node, and with it the process's DDS participant, alive
        until the object was collected, which a node process ending with ``os._exit``
        (``excavator_common.process_exit``) never does. The participant then never said
        goodbye: an ended bridge stayed in every peer's graph (``ros2 node list``, a
        supervisor's watch) for the participant's lease, 20 s. Released with the node."""
        super().destroy_node()
        if hasattr(self, "_state_machine"):
            del self._state_machine

    def stop_core(self) -> None:
        """Release what on_configure created: the timers first (no callback runs on a half
        released node), the loop (its last act writes a stop to the PLC, then it closes its PLC
        and Redis connections), the cmd_vel subscription and its Redis client, the publishers.
        Idempotent: cleanup, shutdown and the process exit may each call it."""
        self._active = False
        for t in self._lifecycle_timers:
            self.destroy_timer(t)
        self._lifecycle_timers = []
        self._publish_timer = None
        if self.core is not None:
            self.core.stop()
            self.core = None
        if self._cmd_sub is not None:
            self.destroy_subscription(self._cmd_sub)
            self._cmd_sub = None
        if self._cmd_client is not None:
            client, self._cmd_client = self._cmd_client, None
            client.close()                         # and its pool's connections
            client.connection_pool.disconnect()
        for pub in (self.odom_pub, self.wheel_pub):
            if pub is not None:
                self.destroy_publisher(pub)
        self.odom_pub = self.wheel_pub = None

    # --- outputs -------------------------------------------------------------------------------
    def _publish(self) -> None:
        core, cfg = self.core, self.config
        if core is None or cfg is None or self.odom_pub is None:
            return
        snap = core.snapshot()
        stamp = self.get_clock().now().to_msg()
        if snap.measured is not None:
            if self._last_stamp is not None:
                self._pose = integrate(self._pose, snap.measured,
                                       max(0.0, snap.stamp_s - self._last_stamp))
            self._last_stamp = snap.stamp_s
        odom = Odometry()
        odom.header.stamp = stamp
        odom.header.frame_id = self.odom_frame
        odom.child_frame_id = self.base_frame
        odom.pose.pose.position.x = self._pose.x
        odom.pose.pose.position.y = self._pose.y
        odom.pose.pose.orientation.z = math.sin(self._pose.yaw / 2.0)
        odom.pose.pose.orientation.w = math.cos(self._pose.yaw / 2.0)
        twist = snap.measured or BodyTwist()
        odom.twist.twist.linear.x = twist.vx
        odom.twist.twist.linear.y = twist.vy
        odom.twist.twist.angular.z = twist.wz
        if snap.measured is None:   # unknown: say so in the covariance rather than claim 0
            odom.twist.covariance[0] = odom.twist.covariance[7] = -1.0
        self.odom_pub.publish(odom)

        js = JointState()
        js.header.stamp = stamp
        prefix = "track_" if cfg.model == "skid_steer" else "wheel_"
        for name, v in snap.wheel_speeds.items():
            js.name.append(prefix + name)
            js.position.append(0.0)
            js.velocity.append(v)
        for name, a in snap.wheel_angles.items():
            js.name.append("steer_" + name)
            js.position.append(a)
            js.velocity.append(0.0)
        if js.name and self.wheel_pub is not None:
            self.wheel_pub.publish(js)

    def _publish_diagnostics(self) -> None:
        if self.core is None:
            return
        snap = self.core.snapshot()
        reason = snap.status.removeprefix("stopped:")
        level = OK if snap.status == "running" else WARN if reason in _BENIGN else ERROR
        values: dict[str, Any] = {"status": snap.status, "detail": snap.detail,
                                  "plc_connected": snap.plc_connected,
                                  "redis_connected": snap.redis_connected,
                                  "monitor_valid": snap.monitor_valid, "active": self._active}
        # the PLC's status bits as last read (HIL: plant_lost, drive_saturated among them)
        values.update({f"plc.{b}": bool(snap.plc_state[b]) for b in keys.STATE_BITS
                       if b in snap.plc_state})
        values.update({f"counter.{k}": v for k, v in snap.counters.items()})
        # the PLC's verdicts on the bridge's writes (monitor DB) and the bridge's seq
        st = snap.plc_state
        if "refused" in st:
            values["plc.refused"] = st["refused"]
        if "refused_reason" in st:
            values["plc.refused_reason"] = refusal_name(int(st["refused_reason"]))
        if "seq_accepted" in st:
            values["plc.seq_accepted"] = from_dint(int(st["seq_accepted"]))
        if snap.seq is not None:
            values["seq"] = snap.seq
        self.diagnostics.publish(level, snap.status + (f": {snap.detail}" if snap.detail else ""),
                                 values)

    # --- optional operational layer ------------------------------------------------------------
    def _on_cmd_vel(self, msg: Twist) -> None:
        cfg = self.config
        if cfg is None or self._cmd_client is None:
            return
        lon, lat, ang = artof_from_twist(BodyTwist(msg.linear.x, msg.linear.y, msg.angular.z),
                                         cfg.lateral_positive)
        try:
            self._cmd_client.mset({keys.LONGITUDINAL: f"{lon:.10g}",
                                   keys.LATERAL: f"{lat:.10g}", keys.ANGULAR: f"{ang:.10g}"})
            self._last_cmd_vel = time.monotonic()
        except Exception as e:  # noqa: BLE001 - Redis down: the bridge stops on its own
            self.get_logger().warning(f"cmd_vel not written to Redis: {e}",
                                      throttle_duration_sec=5.0)

    def _heartbeat(self) -> None:
        if self._cmd_client is None or time.monotonic() - self._last_cmd_vel > \
                self.cmd_vel_timeout_s:
            return   # no fresh cmd_vel: let the heartbeat go stale, the bridge stops
        self._hb_level = not self._hb_level
        with contextlib.suppress(Exception):   # Redis down: the bridge stops on its own
            self._cmd_client.set(keys.HEARTBEAT, "true" if self._hb_level else "false")


USAGE = NodeUsage(
    "plc_bridge", "The Redis <-> Siemens S7 PLC bridge (python-snap7) through the vehicle "
    "model, failing safe; a lifecycle node: configure and activate it (ros2 lifecycle set "
    "/plc_bridge configure, then activate) or start it with -p autostart:=true.",
    subscribes=("cmd_vel (geometry_msgs/Twist, with cmd_vel_to_redis)",
                "Redis plc.control.navigation.* (velocities, heartbeat)"),
    publishes=("odom (nav_msgs/Odometry)", "plc/wheel_states (sensor_msgs/JointState)",
               "/diagnostics", "Redis plc.monitor.*, plc.bridge.*"),
    params_file="plc.yaml", docs="docs/plc_bridge.md")


def main(args: list[str] | None = None) -> int:
    made: list[PlcBridgeNode] = []

    def factory() -> PlcBridgeNode:
        made.append(PlcBridgeNode())
        return made[-1]

    code = run_node(factory, args, cleanup=lambda n: n.stop_core(), usage=USAGE)
    return code or (made[-1].exit_code if made else 0)


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
