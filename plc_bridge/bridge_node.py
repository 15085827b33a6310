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
(within ``cmd_vel_timeout``).

Parameters: every key of ``config/plc.yaml``, declared here (scalars with their ranges; the
data-block layouts, actuators and vehicle geometry under their dotted names, e.g.
``vehicle.skid_steer.track_width_m``), with defaults from ``config_file``; plus ``autostart``,
``publish_rate``, ``cmd_vel_to_redis`` and ``cmd_vel_timeout``. A parameter given to the node
(``--params-file``, ``-p``) that it does not declare is a start-up error naming it and the
closest known name (exit 2), never a silently used default. With ``autostart`` a
configuration that fails (bad model, bad Redis URL) ends the process with one message and
exit code 2.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import time
from typing import Any

import redis
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from sensor_msgs.msg import JointState

from excavator_common.frames import check_frame_prefix
from excavator_common.parameter_files import flatten
from excavator_common.ros_runtime import (
    ERROR,
    OK,
    WARN,
    Diagnostics,
    fatal,
    run_node,
)
from excavator_common.ros_runtime import declare as ros_declare
from excavator_kinematics.vehicle import BodyTwist, artof_from_twist
from plc_bridge import redis_keys as keys
from plc_bridge.bridge_core import BridgeCore
from plc_bridge.config import (
    NODE_ONLY_PARAMETERS,
    OPTIONAL_PARAMETERS,
    SCALAR_PARAMETERS,
    BridgeConfig,
    check_known_keys,
    default_config_path,
    known_parameter_names,
    load_config,
    read_parameters,
)
from plc_bridge.errors import BridgeConfigError
from plc_bridge.odometry import Pose2D, integrate

# a bad parameter of this node is a bridge configuration error, not a kinematics one
declare = functools.partial(ros_declare, error=BridgeConfigError)

# Stop reasons that are normal operation rather than a fault (diagnostics level WARN, not ERROR).
_BENIGN = ("waiting_heartbeat", "waiting_heartbeat_edge", "heartbeat_stale", "deactivated",
           "inactive", "starting")
_STRINGS = ("redis_url", "plc_host", "model", "lateral_positive", "notify_channel")
_BOOLS = ("wake_on_change", "configure_keyspace_events")


class PlcBridgeNode(LifecycleNode):
    def __init__(self) -> None:
        super().__init__("plc_bridge")
        self.config_file = declare(self, "config_file", "", "parameter file with the data-block "
                                   "layouts and vehicle geometry ('' = the package's "
                                   "config/plc.yaml)")
        file_params = read_parameters(self.config_file or None)
        self.overrides: dict[str, Any] = {}
        for name in _STRINGS:
            self.overrides[name] = declare(self, name, str(file_params.get(name, "")),
                                           f"see config/plc.yaml: {name}")
        for name in _BOOLS:
            self.overrides[name] = declare(self, name, bool(file_params.get(name, True)),
                                           f"see config/plc.yaml: {name}")
        for name, (kind, lo, hi, unit) in SCALAR_PARAMETERS.items():
            default = kind(file_params.get(name, lo))
            self.overrides[name] = declare(self, name, default, f"see config/plc.yaml: {name}",
                                           low=lo, high=hi, unit=unit)
        self.autostart = declare(self, "autostart", False,
                                 "configure and activate at start-up")
        self.publish_rate = declare(self, "publish_rate", 50.0, "odom / wheel_states rate",
                                    low=1.0, high=500.0, unit="Hz")
        self.cmd_vel_to_redis = declare(self, "cmd_vel_to_redis", False,
                                        "write cmd_vel to the Redis control keys")
        self.cmd_vel_timeout = declare(self, "cmd_vel_timeout", 0.5, "heartbeat toggles only "
                                       "while cmd_vel is younger than this", low=0.05,
                                       high=10.0, unit="s")
        frame_prefix = declare(self, "frame_prefix", "", "TF prefix of this machine's frames "
                               "(odom -> base_link), e.g. 'exc1/' in a fleet")
        try:
            check_frame_prefix(frame_prefix)
        except ValueError as exc:
            raise BridgeConfigError(str(exc)) from None
        self.odom_frame, self.base_frame = frame_prefix + "odom", frame_prefix + "base_link"
        self._declare_nested(file_params)
        self._check_undeclared()
        self.core: BridgeCore | None = None
        self.config: BridgeConfig | None = None
        self.diagnostics = Diagnostics(self, "plc_bridge")
        # created by on_configure, released by on_cleanup / on_shutdown (stop_core())
        self.odom_pub: Publisher[Odometry] | None = None
        self.wheel_pub: Publisher[JointState] | None = None
        self._cmd_sub: Subscription[Twist] | None = None
        self._timers: list[Timer] = []
        self._cmd_client: redis.Redis | None = None
        self._pose = Pose2D()
        self._last_stamp: float | None = None
        self._active = False
        self._last_cmd_vel = -1e9
        self._hb_level = False
        self._config_error = ""
        self.exit_code = 0   # non-zero when autostart's configure failed
        if self.autostart:
            self._autostart_timer = self.create_timer(0.0, self._do_autostart)

    def _declare_nested(self, file_params: dict[str, Any]) -> None:
        """Layouts, actuators, vehicle geometry, write_allow_list: declared under their dotted
        names with the defaults of ``config_file`` (the package's values where it has none)."""
        check_known_keys(file_params, self.config_file or str(default_config_path()))
        package = flatten(read_parameters(default_config_path()))
        given = flatten(file_params)
        for name in sorted(set(package) | set(OPTIONAL_PARAMETERS) | set(given)):
            if name in self.overrides or name in NODE_ONLY_PARAMETERS or \
                    self.has_parameter(name):
                continue
            ref = package.get(name, OPTIONAL_PARAMETERS.get(name))
            default = given.get(name, ref)
            if isinstance(ref, float) and isinstance(default, int) and \
                    not isinstance(default, bool):
                default = float(default)
            if isinstance(default, list) and not default:
                continue   # an empty list has no ROS type; the file's value is used
            self.overrides[name] = declare(self, name, default, f"see config/plc.yaml: {name}")

    def _check_undeclared(self) -> None:
        """A parameter given to this node that it does not declare is a typo: an error."""
        import difflib

        declared = set(self._parameters)
        given = set(getattr(self, "_parameter_overrides", {}))
        for name in sorted(given - declared):
            known = sorted(declared | known_parameter_names())
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise BridgeConfigError(f"parameter '{name}' is not a parameter of plc_bridge{hint} "
                                    f"(its parameters are the keys of config/plc.yaml, see "
                                    f"docs/configuration.md)")

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
            self.config = load_config(self.config_file or None, self.overrides)
            self.core = BridgeCore(self.config, logger=None)
        except BridgeConfigError as e:
            self._config_error = str(e)
            if not self.autostart:   # with autostart, run_node prints it once and exits 2
                self.get_logger().fatal(f"invalid configuration: {e}")
            return TransitionCallbackReturn.FAILURE
        self.core.set_enabled(False, "inactive")
        self.core.start()
        self._pose, self._last_stamp = Pose2D(), None   # odometry starts anew at each configure
        self.odom_pub = self.create_publisher(Odometry, "odom", 10)
        self.wheel_pub = self.create_publisher(JointState, "plc/wheel_states", 10)
        self._timers = [self.create_timer(1.0 / self.publish_rate, self._publish),
                        self.create_timer(1.0, self._publish_diagnostics)]
        if self.cmd_vel_to_redis:
            self._cmd_client = redis.Redis.from_url(self.config.redis_url, socket_timeout=0.2,
                                                    socket_connect_timeout=0.2)
            self._cmd_sub = self.create_subscription(Twist, "cmd_vel", self._on_cmd_vel, 10)
            self._timers.append(self.create_timer(0.25, self._heartbeat))
        self.get_logger().info(
            f"configured: model {self.config.model}, PLC {self.config.plc_host}:"
            f"{self.config.plc_port} rack {self.config.rack} slot {self.config.slot}, "
            f"{self.config.cycle_hz:g} Hz")
        return TransitionCallbackReturn.SUCCESS

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

    def stop_core(self) -> None:
        """Release what on_configure created: the timers first (no callback runs on a half
        released node), the loop (its last act writes a stop to the PLC, then it closes its PLC
        and Redis connections), the cmd_vel subscription and its Redis client, the publishers.
        Idempotent: cleanup, shutdown and the process exit may each call it."""
        self._active = False
        for t in self._timers:
            self.destroy_timer(t)
        self._timers = []
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
        values.update({f"counter.{k}": v for k, v in snap.counters.items()})
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
                self.cmd_vel_timeout:
            return   # no fresh cmd_vel: let the heartbeat go stale, the bridge stops
        self._hb_level = not self._hb_level
        with contextlib.suppress(Exception):   # Redis down: the bridge stops on its own
            self._cmd_client.set(keys.HEARTBEAT, "true" if self._hb_level else "false")


def main(args: list[str] | None = None) -> int:
    made: list[PlcBridgeNode] = []

    def factory() -> PlcBridgeNode:
        made.append(PlcBridgeNode())
        return made[-1]

    code = run_node(factory, args, cleanup=lambda n: n.stop_core())
    return code or (made[-1].exit_code if made else 0)


if __name__ == "__main__":
    sys.exit(main())
