"""The demo's operator with two joysticks instead of IK targets (``excavator-hil demo
--joystick``): the same drive through Redis, then a scripted joystick session (ISO pattern,
``excavator_kinematics.teleop.joy_script.dig_script``) published as ``sensor_msgs/Joy`` for
``teleop_node`` in the dig loop the IK operator uses (``DemoOperator._play_session``).

The session is a joy driver's 20 Hz stream on simulated time: the Joy of each period is the
script at that moment, stamped with it, as the joy driver does with ``use_sim_time``, and sent
up to ``JOY_LEAD_S`` ahead of the simulation's ``/clock`` (teleop_node holds each for its
stamp). teleop_node answers them scheduled (``command_delay_s``, ``input_lockstep``) and sim_node
waits for the commands (its command lockstep), so the machine digs the same on any host, and a
recording of the session replays (docs/teleoperation.md, "Replay")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sensor_msgs.msg import Joy

from excavator_hil.demo.operator import DemoOperator
from excavator_hil.demo.options import DemoOptions
from excavator_kinematics.teleop.joy_script import dig_script

SETTLE_S = 3.0  # neutral sticks after the script until the machine is still [s of sim time]
JOY_PERIOD_S = 0.05  # the joy driver's 20 Hz [s of sim time]
# the Joys go out this far ahead of /clock [s of sim time]: an operator thread starved for
# less than this keeps the simulation from waiting for it (teleop_node holds a Joy up to
# excavator_kinematics.teleop.schedule.AHEAD_LIMIT_S ahead of its joint_states). The session
# starts this far past the /clock the operator has seen, and its first Joy goes out at once:
# until a Joy came, nothing holds the simulation for the operator, and one starved while the
# simulation ran on stamped its first Joys behind it (teleop_node re-stamped 6 of them, a host
# loaded past both cores)
JOY_LEAD_S = 1.0


class JoystickDemoOperator(DemoOperator):
    def __init__(self, redis_url: str, plc_control_port: int, options: DemoOptions,
                 **kwargs: Any):
        """``kwargs``: DemoOperator's (sim_overrides, path)."""
        super().__init__(redis_url, plc_control_port, options, **kwargs)
        self.session_lead_s = JOY_LEAD_S
        # every Joy counts (a lost one is a different session): a depth that holds a burst
        # sent after a starved spell until teleop_node has taken it (teleop_node's depth)
        self.joy_pub = self.create_publisher(Joy, "joy", 1000)

    def _missing(self) -> list[str]:
        missing = [m for m in super()._missing() if "ik_node" not in m]
        if self.joy_pub.get_subscription_count() == 0:
            missing.append("teleop_node subscribed to joy")
        return missing

    def _dig(self, check_alive: Callable[[], None]) -> None:
        script = dig_script("iso", dump=True)
        sent = 0  # Joys of the session sent (the k-th is stamped start + k x JOY_PERIOD_S)

        def command(t: float) -> str:
            nonlocal sent
            while sent * JOY_PERIOD_S <= t + JOY_LEAD_S:
                at = sent * JOY_PERIOD_S
                axes, buttons = script.sample(at)  # neutral after the end
                msg = Joy()
                ns = round((self.session_start_s + at) * 1e9)
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
                msg.axes, msg.buttons = axes, buttons
                self.joy_pub.publish(msg)
                sent += 1
            segment = script.segment_at(max(t, 0.0))   # t < 0: before the session's start
            return segment.label if segment is not None else "release"

        self._play_session(script.duration, command, check_alive, settle_min_s=0.0,
                           phase_starts=script.segment_starts_s,
                           settle_max_s=SETTLE_S)
