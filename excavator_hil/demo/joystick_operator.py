"""The demo's operator with two joysticks instead of IK targets (``excavator-hil demo
--joystick``): the same drive through Redis, then a scripted joystick session (ISO pattern,
``excavator_kinematics.teleop.joy_script.dig_script``) published as ``sensor_msgs/Joy`` for
``teleop_node``, paced by the simulation's ``/clock`` in the dig loop the IK operator uses
(``DemoOperator._play_session``). Each Joy is stamped with the simulated time, as the joy driver
does with ``use_sim_time``: a recording of the session replays (docs/teleoperation.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sensor_msgs.msg import Joy

from excavator_hil.demo.operator import DemoOperator
from excavator_hil.demo.options import DemoOptions
from excavator_kinematics.teleop.joy_script import dig_script

SETTLE_S = 3.0  # neutral sticks after the script until the machine is still [s of sim time]


class JoystickDemoOperator(DemoOperator):
    def __init__(self, redis_url: str, plc_control_port: int, options: DemoOptions,
                 **kwargs: Any):
        """``kwargs``: DemoOperator's (sim_overrides, path)."""
        super().__init__(redis_url, plc_control_port, options, **kwargs)
        self.joy_pub = self.create_publisher(Joy, "joy", 10)

    def _missing(self) -> list[str]:
        missing = [m for m in super()._missing() if "ik_node" not in m]
        if self.joy_pub.get_subscription_count() == 0:
            missing.append("teleop_node subscribed to joy")
        return missing

    def _dig(self, check_alive: Callable[[], None]) -> None:
        script = dig_script("iso", dump=True)

        def command(t: float) -> str:
            axes, buttons = script.sample(t)  # neutral after the end
            msg = Joy()
            ns = round(self.sim_time * 1e9)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
            msg.axes, msg.buttons = axes, buttons
            self.joy_pub.publish(msg)
            segment = script.segment_at(t)
            return segment.label if segment is not None else "release"

        self._play_session(script.duration, command, check_alive, settle_min_s=0.0,
                           phase_starts=script.segment_starts_s,
                           settle_max_s=SETTLE_S)
