"""``plant_link``: the ROS 2 node over ``link.PlantLink`` (thin shell, rclpy only here).

Subscribes ``plant/sensors`` (sensor_msgs/JointState) and ``imu`` (sensor_msgs/Imu) from the
simulation; publishes ``plant/actuation`` (sensor_msgs/JointState) from the exchange thread,
once per exchange that read a fresh ``plant_out`` (and once when it brakes on a fault),
stamped with this node's clock at the read; ``/diagnostics`` at 1 Hz (status, cause,
counters: late and missed exchanges, link faults, refused blocks).

The two subscriptions are **taken by the exchange thread**, once a period just before it
writes ``plant_in`` (every message that arrived since, each judged as before), not run by the
executor: they are in a callback group the executor never waits on (``TakenByExchange``).
rclpy's SingleThreadedExecutor rebuilds its wait set in Python at every wake-up (every
entity of the node: the parameter services, the QoS event handlers, ...); woken twice a
period by the two 100 Hz topics it spent more CPU than the exchange itself, all of it holding
the GIL the exchange thread waits for when it comes back from the PLC's socket. The executor
now serves only the 1 Hz diagnostics timer and the parameter services. (rclpy's
EventsExecutor would do the dispatch in C++, but with it this node never reached ``running``
and did not end on SIGINT, rclpy 9.1.2; its ``spin_once`` beside a Python thread that sleeps
hung in a minimal script too.) ``EXCAVATOR_HIL_PLANT_LINK_INPUTS=executor`` restores
the executor's callbacks, for measuring the difference (bench/plant_link.py).

Parameters: one spec, ``plc_bridge.parameters.PLANT_LINK`` (docs/configuration.md): declared
with description, unit and range (``ros2 param describe /plant_link exchange_hz``), read only;
a parameter not given to the node takes its value from ``config_file`` (default the package's
config/plant_link.yaml), else the spec's default; an unknown one is a start-up error naming
it (exit 2). The PLC connection, model and blocks come from ``plc_config_file`` (the bridge's
file), ``plc_host`` / ``plc_port`` / ``model`` override them.
"""

from __future__ import annotations

import os
from typing import Any

from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState

from excavator_common.node_args import NodeUsage
from excavator_common.parameter_files import read_parameter_file
from excavator_common.parameter_node import NodeParameters
from excavator_common.ros_runtime import ERROR, OK, WARN, Diagnostics, run_node, steady_timer
from plc_bridge.errors import BridgeConfigError
from plc_bridge.parameters import PLANT_LINK
from plc_bridge.plant_link.config import build_plant_link_config, default_plant_link_path
from plc_bridge.plant_link.core import (
    Actuation,
    ImuReading,
    SensorError,
    actuation_arrays,
    roll_pitch,
    sensors_from_joints,
)
from plc_bridge.plant_link.link import PlantLink

# ``executor``: the executor runs the input callbacks (the set-up before; bench/plant_link.py)
INPUTS_ENV = "EXCAVATOR_HIL_PLANT_LINK_INPUTS"


def inputs_taken_by_exchange() -> bool:
    """False when ``EXCAVATOR_HIL_PLANT_LINK_INPUTS`` is ``executor``."""
    return os.environ.get(INPUTS_ENV, "exchange").lower() != "executor"


class TakenByExchange(CallbackGroup):
    """A callback group the executor never runs nor waits on (``can_execute`` is False): its
    subscriptions are read by the exchange thread (:func:`take_all`)."""

    def can_execute(self, entity: Any) -> bool:
        return False

    def beginning_execution(self, entity: Any) -> bool:
        return False

    def ending_execution(self, entity: Any) -> None:
        pass


def take_all(subscription: Any) -> list[Any]:
    """Every message waiting on ``subscription``, oldest first (rclpy's own take, as its
    executor and ``wait_for_message`` do it); [] when none."""
    taken = []
    handle = subscription.handle
    with handle:
        while (info := handle.take_message(subscription.msg_type, subscription.raw)) is not None:
            taken.append(info[0])
    return taken


class PlantLinkParameters(NodeParameters):
    """``PLANT_LINK`` declared on the node; what the node is not given comes from
    ``config_file`` (an override, not a parameter of the file), else the spec's default."""

    def __init__(self, node: PlantLinkNode) -> None:
        given = dict(getattr(node, "_parameter_overrides", {}))
        cf = given.get("config_file")
        self.config_file = str(cf.value) if cf is not None and cf.value else ""
        path = self.config_file or str(default_plant_link_path())
        from_file = read_parameter_file(path, node.get_name(), error=BridgeConfigError)
        unknown = PLANT_LINK.unknown(from_file)
        if unknown:
            raise BridgeConfigError(PLANT_LINK.unknown_message(unknown, path))
        self._base = {n: v for n, v in from_file.items() if n not in given}
        super().__init__(node, PLANT_LINK, None, warn_unknown=False)
        if self.unknown:
            raise BridgeConfigError(
                PLANT_LINK.unknown_message(self.unknown, f"{node.get_name()} parameters") +
                " (config_file names the parameter file)")

    def _overrides(self) -> dict[str, Parameter[Any]]:
        out: dict[str, Parameter[Any]] = {n: Parameter(n, value=v) for n, v in self._base.items()}
        out.update(super()._overrides())
        return out


class PlantLinkNode(Node):
    def __init__(self) -> None:
        super().__init__("plant_link")
        self.params = PlantLinkParameters(self)
        self.config = build_plant_link_config(
            self.params.values, self.params.config_file or str(default_plant_link_path()))
        plc = self.config.plc
        self.actuation_pub = self.create_publisher(JointState, "plant/actuation", 10)
        self.diagnostics = Diagnostics(self, "plant_link")
        taken = inputs_taken_by_exchange()
        self.link = PlantLink(self.config, self._publish_actuation,
                              take_inputs=self._take_inputs if taken else None)
        self._sensor_errors = 0
        self._last_sensor_error = ""
        group = TakenByExchange() if taken else None
        self._sensors_sub = self.create_subscription(
            JointState, "plant/sensors", self._on_sensors, qos_profile_sensor_data,
            callback_group=group)
        self._imu_sub = self.create_subscription(Imu, "imu", self._on_imu,
                                                 qos_profile_sensor_data, callback_group=group)
        self._actuation = JointState()   # filled anew and published at each forwarding
        steady_timer(self, 1.0, self._publish_diagnostics)
        self.link.start()
        self.get_logger().info(
            f"plant link: model {plc.model}, PLC {plc.plc_host}:{plc.plc_port}, plant_in "
            f"DB{plc.plant_in_db} (written), plant_out DB{plc.plant_out_db} (read), "
            f"{self.config.exchange_hz:g} Hz")

    # --- simulation -> PLC ---------------------------------------------------------------------
    def _take_inputs(self) -> None:
        """In the exchange thread, once a period: what arrived since the last one, in order."""
        for sensors in take_all(self._sensors_sub):
            self._on_sensors(sensors)
        for imu in take_all(self._imu_sub):
            self._on_imu(imu)

    def _on_sensors(self, msg: JointState) -> None:
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        try:
            sensors = sensors_from_joints(self.config.plc, stamp_ns, msg.name, msg.position,
                                          msg.velocity, msg.effort)
        except SensorError as e:
            self._sensor_errors += 1
            if str(e) != self._last_sensor_error:
                self.get_logger().error(f"plant/sensors not used: {e}")
            self._last_sensor_error = str(e)
            return
        self.link.set_sensors(sensors)

    def _on_imu(self, msg: Imu) -> None:
        q = msg.orientation
        roll, pitch = roll_pitch(q.x, q.y, q.z, q.w)
        self.link.set_imu(ImuReading(float(msg.angular_velocity.z), pitch, roll))

    # --- PLC -> simulation (called in the exchange thread) -------------------------------------
    def _publish_actuation(self, act: Actuation) -> None:
        """One message object, filled anew each time (only this thread publishes it)."""
        msg = self._actuation
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
            self.get_clock().now().nanoseconds, 1_000_000_000)
        msg.header.frame_id = ""
        names, position, velocity, effort = actuation_arrays(self.config.plc, act)
        msg.name, msg.position, msg.velocity, msg.effort = names, position, velocity, effort
        self.actuation_pub.publish(msg)

    def _publish_diagnostics(self) -> None:
        values = self.link.status_values()
        values["sensor_messages_rejected"] = self._sensor_errors
        if self._last_sensor_error:
            values["last_sensor_error"] = self._last_sensor_error
        status = str(values["status"])
        # link_lost and plant_out_torn: the drives braked, nothing of the PLC's goes on
        level = (OK if status == "running" else ERROR
                 if status in ("link_lost", "plant_out_torn") else WARN)
        if values.get("last_refusal") and level == OK:
            level = WARN
        detail = str(values["detail"])
        if values.get("drive_fault"):   # a refused plant_out in force: the drives braked
            level = ERROR
            detail = f"drive fault: {values['drive_fault']}" + (f"; {detail}" if detail else "")
        self.diagnostics.publish(level, status + (f": {detail}" if detail else ""), values)

    def close(self) -> None:
        self.link.stop()


USAGE = NodeUsage(
    "plant_link", "Hardware in the loop: the simulation's sensors to the PLC's plant_in data "
    "block, the PLC's plant_out block to the simulation's actuators, over S7 at exchange_hz "
    "(one read, one write per period), failing safe (a brake on any fault).",
    subscribes=("plant/sensors (sensor_msgs/JointState)", "imu (sensor_msgs/Imu)"),
    publishes=("plant/actuation (sensor_msgs/JointState)", "/diagnostics"),
    params_file="plant_link.yaml", docs="docs/plc_bridge.md")


def main(args: list[str] | None = None) -> int:
    return run_node(PlantLinkNode, args, cleanup=lambda n: n.close(), usage=USAGE)


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
