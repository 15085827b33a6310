"""The demo's operator with two joysticks instead of IK targets (``excavator-hil demo
--joystick``): the same drive through Redis, then a scripted joystick session (ISO pattern,
``excavator_kinematics.teleop.joy_script.dig_script``) published as ``sensor_msgs/Joy`` for
``teleop_node``, paced by the simulation's ``/clock`` like the IK dig cycle."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from sensor_msgs.msg import Joy

from excavator_hil.demo.operator import STILL_FOR_S, TARGET_PERIOD_S, DemoOperator
from excavator_hil.demo.options import DemoOptions
from excavator_hil.demo.progress import Progress
from excavator_kinematics.teleop.joy_script import dig_script

SETTLE_S = 3.0  # neutral sticks after the script until the machine is still [s of sim time]


class JoystickDemoOperator(DemoOperator):
    def __init__(self, redis_url: str, plc_control_port: int, options: DemoOptions):
        super().__init__(redis_url, plc_control_port, options)
        self.joy_pub = self.create_publisher(Joy, "joy", 10)

    def _missing(self) -> list[str]:
        missing = [m for m in super()._missing() if "ik_node" not in m]
        if self.joy_pub.get_subscription_count() == 0:
            missing.append("teleop_node subscribed to joy")
        return missing

    def _dig(self, check_alive: Callable[[], None]) -> None:
        script = dig_script("iso", dump=True)
        progress = Progress(script.duration + SETTLE_S)
        t0 = self.sim_time
        phase = ""
        still_since = math.inf
        while True:
            check_alive()
            t = self.sim_time - t0
            still_since = min(still_since, t) if self._still() else math.inf
            if t > script.duration and (t - still_since >= STILL_FOR_S
                                        or t > script.duration + SETTLE_S):
                break
            segment = script.segment_at(t)
            label = segment.label if segment is not None else "release"
            if label != phase:
                phase = label
                self._phase = phase
                self.phase_marks.append((self.sim_time, phase))
            axes, buttons = script.sample(t)
            msg = Joy()
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.axes, msg.buttons = axes, buttons
            self.joy_pub.publish(msg)
            load = self.loads[-1][1] if self.loads else 0.0
            progress.update(t, phase, f"bucket {load:.3f} m^3")
            time.sleep(TARGET_PERIOD_S)
        progress.done()
