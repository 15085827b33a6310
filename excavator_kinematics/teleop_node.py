"""teleop_node: an operator drives the machine (a thin rclpy shell over
:mod:`excavator_kinematics.teleop`). See docs/teleoperation.md.

Subscribes ``joy`` (sensor_msgs/Joy: the two sticks, deadman and mode buttons), ``joy_travel``
(sensor_msgs/Joy: travel pedals, when ``travel.separate_device``), ``joint_states`` (the measured
joints and the base's yaw), ``hand_pose`` (geometry_msgs/PoseStamped: the hand controller, in
``impedance`` mode) and ``soil/wrench`` (geometry_msgs/WrenchStamped in ``world`` at the bucket
origin).
Publishes ``joint_command`` (positions [rad] + speed caps [rad/s] of swing/boom/arm/bucket),
``track_command`` (``track_left``/``track_right`` velocity [m/s]), ``teleop/valve_command``
(sensor_msgs/JointState: per function ``boom_cylinder``, ``arm_cylinder``, ``bucket_cylinder``,
``swing``: position = spool opening -1..1 (+ = extend / swing left), velocity = commanded rod
speed [m/s] or swing rate [rad/s]; header stamp = the stamp of the Joy it answers),
``teleop/force_feedback`` (geometry_msgs/WrenchStamped, impedance mode) and ``/diagnostics``.

Impedance mode advances its model by the control periods that passed since the previous
callback (the control timer's grid), at most ``impedance.max_step_s``, and counts the ticks the
timer missed (``impedance_missed_ticks`` on /diagnostics). Operator input older than
``max_command_age_s`` on arrival (its header stamp) is dropped and counted.

The node is silent while no operator input is live: another commander (ik_node) can share
``joint_command``. When the input stops (timeout, deadman released) it sends one hold command.

With ``command_delay_s`` > 0 (rate modes; needs ``use_sim_time`` and Joy stamped in simulated
time) the commands are a function of the stamps alone, so a recorded session replays to the
same motion: each Joy is answered with the ``joint_states`` of its stamp (the latest at or
before it, from a short history; a Joy ahead of the states waits for them), extrapolated by the
delay (q + q_dot x delay: where the machine will be when the command acts), the
``joint_command`` is stamped Joy stamp + ``command_delay_s`` and ``sim_node`` applies it at that
simulated time (while there is nothing to command, an empty ``joint_command``, a time marker,
keeps sim_node's command lockstep waiting for this stream); the control-rate timer then only
sends the holds (every Joy is answered, the
joy driver's autorepeat keeps the targets moving). A Joy that arrives more than half the delay
behind the newest joint_states acts from the newest state instead (re-stamped, counted as
``joys_restamped``). With ``input_lockstep`` (a scripted session, a bag replay) the markers go no
further than the newest Joy's command while Joys come, so sim_node's command lockstep waits for
the Joys too, and a Joy is re-stamped only when its command would act before one already sent:
the session acts at its stamps however late a loaded host delivers it. Every Joy answered is
published on ``teleop/joy_applied`` (sensor_msgs/Joy) with the stamp it acted at: record that
topic and play it back onto ``joy`` to replay the session. In impedance mode the controller
then ticks on simulated time, each tick from the joint_states, soil wrench and hand pose of its
stamp (excavator_kinematics.teleop.impedance_schedule), and every hand pose is published on
``teleop/hand_applied`` with the stamp it was taken in at: record that one and play it back onto
``hand_pose``; with ``input_lockstep`` a tick waits for the hand pose of its stamp while poses
come. A timer on the wall clock lets the simulation run on once the input stopped for
``input_lockstep_timeout_s``. See docs/teleoperation.md, "Replay".

In a fleet, ``machine`` (e.g. ``exc2``) picks the machine driven: its ``joint_states`` and
``soil/wrench`` in, its ``joint_command``, ``track_command`` and ``teleop/valve_command`` out
(``/exc2/...``); the operator's topics (``joy``, ``joy_travel``, ``hand_pose``,
``teleop/force_feedback``, ``teleop/joy_applied``, ``teleop/hand_applied``) stay in the node's
own namespace. Empty (the default): the node's own namespace, as
``--ros-args -r __ns:=/exc2`` would. Read at start-up: one node drives one machine.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState, Joy

from excavator_common.command_age_node import CommandAgeCheck
from excavator_common.machines import machine_namespace, machine_topic
from excavator_common.node_args import NodeUsage
from excavator_common.parameter_node import NodeParameters
from excavator_common.ros_runtime import (
    OK,
    WARN,
    Diagnostics,
    Rejections,
    pacing_timer,
    run_node,
    steady_timer,
)
from excavator_kinematics.errors import ConfigError, KinematicsError
from excavator_kinematics.forward_kinematics import ForwardKinematics
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.teleop.config import TELEOP_PARAMETERS, settings_from_parameters
from excavator_kinematics.teleop.control_patterns import FUNCTIONS, pattern
from excavator_kinematics.teleop.controller import (
    JointCommand,
    MachineState,
    TeleopCore,
    TeleopSettings,
)
from excavator_kinematics.teleop.impedance import hand_coordinates, soil_force_in_task
from excavator_kinematics.teleop.impedance_schedule import ImpedanceSchedule, ImpedanceTick
from excavator_kinematics.teleop.joystick import button
from excavator_kinematics.teleop.schedule import Answer, InputWait, Refused, StampedAnswers
from excavator_kinematics.teleop.valves import FlowLimits

VALVE_NAMES = ["boom_cylinder", "arm_cylinder", "bucket_cylinder", "swing"]
# input_lockstep: how often [s of wall time] a waiting simulation is checked for a stopped input
_LOCKSTEP_CHECK_S = 0.05


class TeleopNode(Node):
    def __init__(self) -> None:
        super().__init__("teleop_node")
        # One spec (excavator_kinematics.teleop.config.TELEOP_PARAMETERS): the mode, pattern,
        # shaping, timeouts and feedback scales change at run time (validated on set, applied
        # in apply_parameters); the rest are read-only.
        self.parameters = NodeParameters(self, TELEOP_PARAMETERS, self.apply_parameters)
        values: dict[str, Any] = self.parameters.values  # live: updated on every set
        self.values = values
        settings = TeleopSettings(**settings_from_parameters(values))
        geometry = (ExcavatorGeometry.from_yaml(values["geometry_file"])
                    if values["geometry_file"] else default_geometry())
        limits = FlowLimits.from_file(values["hydraulics_file"] or None,
                                      values["total_flow_lpm"])
        self.core = TeleopCore(geometry, limits, settings)
        self.fk = ForwardKinematics(geometry, self.core.linkage)
        # the machine driven (a fleet's namespace) or, empty, this node's own namespace
        own = self.get_namespace()
        try:
            self.machine = machine_namespace(values["machine"]) if values["machine"] else own
        except ValueError as exc:
            raise ConfigError(f"machine: {exc}") from None

        def machine(name: str) -> str:
            return machine_topic(self.machine, name, own)
        self.period = 1.0 / values["control_rate_hz"]
        # Sim-time commands (replay): each command answers its Joy at the Joy's stamp + this.
        self.command_delay_s = float(values["command_delay_s"])
        # input_lockstep: the simulation waits for the Joys / hand poses as well (a session)
        self.input_lockstep = bool(values["input_lockstep"]) and self.command_delay_s > 0.0
        self.answers: StampedAnswers[Joy] | None = (
            StampedAnswers(self.command_delay_s, self.input_lockstep)
            if self.command_delay_s > 0.0 else None)
        # ... for at most input_lockstep_timeout_s of wall time with no input arriving
        self.joy_wait = InputWait(values["input_lockstep_timeout_s"])
        self.hand_wait = InputWait(values["input_lockstep_timeout_s"])
        self.last_command_stamp = 0.0  # [s] of the latest scheduled joint_command
        # ... and in impedance mode the controller ticks on simulated time, from the stamps
        self.impedance_schedule = (ImpedanceSchedule(
            round(1e9 / values["control_rate_hz"]), round(self.command_delay_s * 1e9),
            round(values["hand_timeout_s"] * 1e9), round(values["wrench_timeout_s"] * 1e9),
            hand_lockstep=self.input_lockstep) if self.command_delay_s > 0.0 else None)
        # Operator input older than max_command_age_s on arrival is dropped (a delayed message
        # must not act). Scheduled, a Joy stamped ahead waits for its state: the schedule
        # judges stamps ahead (StampedAnswers), not this check.
        self.command_age = CommandAgeCheck(self, float(values["max_command_age_s"]),
                                           math.inf if self.answers is not None else None)

        # Scheduled, every Joy and command counts (a lost one is a different session): queues
        # that hold 20 s at 50 Hz, so a recorder or this node starved for seconds by a loaded
        # host still gets every one (a reliable KEEP_LAST writer overwrites what is not yet
        # acknowledged); otherwise only the latest matters.
        depth = 1000 if self.command_delay_s > 0.0 else 10
        self.cmd_pub = self.create_publisher(JointState, machine("joint_command"), depth)
        self.track_pub = self.create_publisher(JointState, machine("track_command"), 10)
        self.valve_pub = self.create_publisher(JointState, machine("teleop/valve_command"),
                                               10)
        # scheduled mode: each Joy as answered, stamped with the time it acted at (record this)
        self.joy_applied_pub = self.create_publisher(Joy, "teleop/joy_applied", depth)
        self.feedback_pub = self.create_publisher(WrenchStamped, "teleop/force_feedback", 10)
        # scheduled impedance: each hand pose, stamped with the time it was taken in at
        self.hand_applied_pub = self.create_publisher(PoseStamped, "teleop/hand_applied", depth)
        self.create_subscription(Joy, "joy", self.on_joy, depth)
        if values["travel.enabled"] and values["travel.separate_device"]:
            self.create_subscription(Joy, "joy_travel", self.on_joy_travel, 10)
        # scheduled: every state may be the one a Joy's stamp needs (none may be dropped)
        self.create_subscription(JointState, machine("joint_states"), self.on_joint_states,
                                 depth)
        self.create_subscription(PoseStamped, "hand_pose", self.on_hand_pose, depth)
        self.create_subscription(WrenchStamped, machine("soil/wrench"), self.on_wrench, depth)
        # the status names the machine driven (in a fleet, several teleop nodes may run)
        self.diagnostics = Diagnostics(self, f"{self.get_name()}: teleoperation of "
                                       f"{self.machine}")
        self.rejections = Rejections(self, self.diagnostics, "operator input")

        now = -math.inf
        self.state: MachineState | None = None
        self.base_xy = np.zeros(2)
        self.state_time = now
        self.joy: Joy | None = None
        self.joy_time = now
        self.travel_joy: Joy | None = None
        self.travel_time = now
        self.hand: np.ndarray | None = None
        self.hand_time = now
        self.wrench = (np.zeros(3), np.zeros(3))
        self.wrench_time = now
        self.commanding = False      # a live input is driving joint_command
        self.travelling = False
        self.toggle_was_down = False
        self.sent = 0
        self.holds = 0
        self.markers = 0  # scheduled mode: time markers sent (_send_marker)
        self.last_info: dict[str, object] = {}
        self.control_timer = pacing_timer(self, self.period, self.on_timer)
        if self.input_lockstep:
            # on the wall clock: the simulated one stands while the simulation waits for input
            steady_timer(self, _LOCKSTEP_CHECK_S, self.on_lockstep_timer)
        steady_timer(self, 1.0, self.publish_status)
        self.get_logger().info(f"ready: mode {self.core.mode}, pattern {settings.pattern}, "
                               f"{values['control_rate_hz']:.0f} Hz, machine {self.machine}")
        if self.command_delay_s > 0.0 and not self.get_parameter("use_sim_time").value:
            self.get_logger().warning(
                f"command_delay_s {self.command_delay_s:g} s without use_sim_time: commands "
                "are scheduled in simulated time; run this node with use_sim_time:=true")

    # --- run-time parameter changes: validated by NodeParameters (on-set), applied here ----------
    def apply_parameters(self, changed: dict[str, Any]) -> None:
        """Post-set: the new values are in ``self.values`` already (timeouts act from the next
        message on); the settings of the core are rebuilt from them."""
        settings = TeleopSettings(**settings_from_parameters(self.values))
        core = self.core
        core.settings = dataclasses.replace(core.settings, shaping=settings.shaping,
                                            feedback=settings.feedback,
                                            pattern=settings.pattern)
        core.assignments = pattern(settings.pattern)
        if "max_command_age_s" in changed:
            self.command_age.set_max_age(float(changed["max_command_age_s"]))
        self.joy_wait.timeout_s = self.hand_wait.timeout_s = float(
            self.values["input_lockstep_timeout_s"])
        if self.impedance_schedule is not None:
            self.impedance_schedule.hand_timeout_ns = round(self.values["hand_timeout_s"] * 1e9)
            self.impedance_schedule.wrench_timeout_ns = round(
                self.values["wrench_timeout_s"] * 1e9)
        if "mode" not in changed:
            return  # the mode-toggle button may have changed the mode since start-up
        if self.commanding and self.state is not None and settings.mode != core.mode:
            self._send(core.hold_command(self.state, "mode change"), None)
            self.commanding = False
        core.set_mode(settings.mode)

    # --- inputs --------------------------------------------------------------------------
    def on_joint_states(self, msg: JointState) -> None:
        pos = dict(zip(msg.name, msg.position, strict=False))
        vel = dict(zip(msg.name, msg.velocity, strict=False)) if msg.velocity else {}
        if not all(n in pos for n in FUNCTIONS):
            return
        self.state = MachineState(np.array([pos[n] for n in FUNCTIONS]),
                                  np.array([vel.get(n, 0.0) for n in FUNCTIONS]),
                                  float(pos.get("base_yaw", 0.0)))
        self.base_xy = np.array([pos.get("base_x", 0.0), pos.get("base_y", 0.0)])
        self.state_time = time.monotonic()
        if self.answers is not None:
            stamp = _seconds(msg.header.stamp)
            self._answer(self.answers.add_state(stamp, self.state, self.last_command_stamp))
            if self.core.mode != "impedance":
                # a Joy answered later is stamped at least stamp - delay/2 + delay (an older
                # one is re-stamped to a newer state); a quarter of the delay ahead, so a
                # stalled node's simulation stays well within the re-stamping margin. With
                # input_lockstep, no further than the newest Joy's command while Joys come
                now = time.monotonic()
                self._send_marker(self.answers.marker_stamp(stamp, self.joy_wait.live(now)))
                self.joy_wait.waiting(
                    self.input_lockstep and self.answers.holds_for_input(stamp), now)
        if self.impedance_schedule is not None:
            self._impedance_ticks(self.impedance_schedule.add_state(
                _nanoseconds(msg.header.stamp), self.state, self._hands_live()))

    def on_joy(self, msg: Joy) -> None:
        if not self.command_age.admit("joy", msg.header.stamp):
            return  # too old on arrival: the previous Joy stays until joy_timeout_s
        self.joy, self.joy_time = msg, time.monotonic()
        self.joy_wait.input_came(self.joy_time)
        scheduled = self.command_delay_s > 0.0 and _seconds(msg.header.stamp) > 0.0
        if not scheduled or self.core.mode == "impedance":
            self._mode_toggle(msg)  # scheduled: at the Joy's stamp, in _answer_pending
        if self.values["travel.enabled"] and not self.values["travel.separate_device"]:
            self.travel_joy, self.travel_time = msg, self.joy_time
            self._travel()
        if self.core.mode != "impedance":
            if scheduled and self.answers is not None:
                self._answer(self.answers.add_input(_seconds(msg.header.stamp), msg,
                                                    self.last_command_stamp))
                newest = self.answers.newest_state_s
                if self.input_lockstep and newest is not None:
                    # a Joy ahead of the states moves the cap of the markers: the simulation
                    # held at the previous Joy's command may step on to this one's (else it
                    # waited for input_lockstep_timeout_s: no state comes while it waits)
                    self._send_marker(self.answers.marker_stamp(newest, True))
            else:
                self._sticks()  # answer at once: latency Joy -> command is one callback

    def on_joy_travel(self, msg: Joy) -> None:
        if not self.command_age.admit("joy_travel", msg.header.stamp):
            return
        self.travel_joy, self.travel_time = msg, time.monotonic()
        self._travel()

    def on_hand_pose(self, msg: PoseStamped) -> None:
        if not self.command_age.admit("hand_pose", msg.header.stamp):
            return  # the previous pose holds until hand_timeout_s
        p, o = msg.pose.position, msg.pose.orientation
        try:
            hand = hand_coordinates((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
            if not np.all(np.isfinite(hand)):
                raise KinematicsError(f"hand pose {hand.tolist()} has NaN/inf")
        except KinematicsError as exc:
            self.rejections.reject(str(exc), self._counters())
            return
        self.hand, self.hand_time = hand, time.monotonic()
        self.hand_wait.input_came(self.hand_time)
        if self.impedance_schedule is not None:
            # taken in at its stamp when that is simulated time, else when it arrived there
            verdict = self.command_age.last
            stamp = (_nanoseconds(msg.header.stamp)
                     if verdict is not None and verdict.clock == "simulated"
                     else self.get_clock().now().nanoseconds)
            applied = PoseStamped(header=msg.header, pose=msg.pose)
            applied.header.stamp.sec, applied.header.stamp.nanosec = divmod(
                self.impedance_schedule.take_hand(stamp, hand), 1_000_000_000)
            self.hand_applied_pub.publish(applied)
            if self.input_lockstep:  # the ticks that waited for this pose
                self._impedance_ticks(self.impedance_schedule.due(self._hands_live()))

    def on_wrench(self, msg: WrenchStamped) -> None:
        if msg.header.frame_id not in ("", "world"):
            self.rejections.reject(f"soil/wrench in frame '{msg.header.frame_id}': expected "
                                   "'world' (at the bucket origin)", self._counters())
            return
        f, t = msg.wrench.force, msg.wrench.torque
        force, torque = np.array([f.x, f.y, f.z]), np.array([t.x, t.y, t.z])
        if np.all(np.isfinite(force)) and np.all(np.isfinite(torque)):
            self.wrench, self.wrench_time = (force, torque), time.monotonic()
            if self.impedance_schedule is not None:
                self._impedance_ticks(self.impedance_schedule.add_wrench(
                    _nanoseconds(msg.header.stamp), force, torque, self._hands_live()))

    # --- control -------------------------------------------------------------------------
    def on_timer(self) -> None:
        if self.core.mode == "impedance":
            if self.impedance_schedule is None:  # scheduled: ticks come with joint_states
                self._impedance()
        else:
            self._sticks()
        if self.travelling:
            self._travel()

    def on_lockstep_timer(self) -> None:
        """input_lockstep, on the wall clock: once the input stopped for
        ``input_lockstep_timeout_s`` the simulation no longer waits for it. A waiting simulation
        sends no joint_states, so this timer, not the next state, lets it run on: the ticks
        held for a hand pose, or a time marker past the newest Joy's command."""
        now = time.monotonic()
        if self.core.mode == "impedance":
            if self.impedance_schedule is not None and not self.hand_wait.live(now):
                self._impedance_ticks(self.impedance_schedule.due(hands_live=False))
        elif (self.answers is not None and self.answers.newest_state_s is not None
              and not self.joy_wait.live(now)):
            self._send_marker(self.answers.marker_stamp(self.answers.newest_state_s, False))

    def _hands_live(self) -> bool:
        """input_lockstep: whether a scheduled tick may still wait for the hand poses."""
        return self.hand_wait.live(time.monotonic())

    def _state_ok(self) -> bool:
        return (self.state is not None
                and time.monotonic() - self.state_time <= self.values["state_timeout_s"])

    def _mode_toggle(self, msg: Joy) -> None:
        index = self.values["buttons.mode_toggle"]
        try:
            down = button(msg.buttons, index, "buttons.mode_toggle")
        except KinematicsError as exc:
            self.rejections.reject(str(exc), self._counters())
            return
        if down and not self.toggle_was_down and self.core.mode != "impedance":
            new = "coordinated" if self.core.mode == "joystick" else "joystick"
            self.core.set_mode(new)
            self.get_logger().info(f"mode: {new}")
        self.toggle_was_down = down

    def _answer(self, answers: list[Answer[Joy] | Refused[Joy]]) -> None:
        """Scheduled mode: publish what each Joy answered acted at (teleop/joy_applied), then
        its command, stamped for when it acts (``excavator_kinematics.teleop.schedule``)."""
        for a in answers:
            if isinstance(a, Refused):
                self.rejections.reject(a.reason, self._counters())
                continue
            joy = a.payload
            if a.restamped:
                joy = Joy(header=joy.header, axes=joy.axes, buttons=joy.buttons)
                ns = round(a.acted_at_s * 1e9)
                joy.header.stamp.sec, joy.header.stamp.nanosec = divmod(ns, 1_000_000_000)
            self.joy_applied_pub.publish(joy)
            self._mode_toggle(joy)
            self._sticks(joy, a.state, a.command_stamp_s)

    def _sticks(self, joy: Joy | None = None, state: MachineState | None = None,
                stamp: float | None = None) -> None:
        """Answer a Joy (default: the latest, with the latest state; scheduled mode passes the
        state of the Joy's stamp and the command's stamp [s]); a hold when the input stopped."""
        joy = joy or self.joy
        if joy is None or not self._state_ok():
            return
        state = state or self.state
        assert state is not None
        scheduled = self.command_delay_s > 0.0 and _seconds(joy.header.stamp) > 0.0
        live = self._joy_live(joy, scheduled, stamp)
        if live and scheduled and stamp is None:
            return  # scheduled: every Joy is answered at its stamp, the timer only holds
        try:
            enabled = (self.values["buttons.enable"] < 0
                       or button(joy.buttons, self.values["buttons.enable"], "buttons.enable"))
            if live and enabled:
                cmd = self.core.stick_command(joy.axes, state)
                self._send(cmd, joy, stamp)
                self.commanding = True
                return
            reason = "deadman released" if live else "joystick silent"
        except KinematicsError as exc:
            self.rejections.reject(str(exc), self._counters())
            reason = "bad joystick input"
        if self.commanding:  # one hold, then silence
            if stamp is None and scheduled:
                # a control period after every scheduled command and time marker: sim_node
                # may already have stepped the period that starts at the last one's stamp
                stamp = max(_seconds(self.get_clock().now().to_msg()),
                            self.last_command_stamp + self.period)
            self._send(self.core.hold_command(state, reason), joy, stamp)
            self.core.release_holds()  # while silent, another commander may move the machine
            self.commanding = False
            self.holds += 1
            self.get_logger().info(f"hold: {reason}")

    def _joy_live(self, joy: Joy, scheduled: bool, stamp: float | None) -> bool:
        """Whether the joystick still speaks. Live Joys: the latest arrived within
        ``joy_timeout_s`` of wall time. Scheduled Joys (stamped in simulated time): a Joy
        answered at its stamp is the input of that moment, however late the host answers it;
        otherwise the newest Joy's stamp within ``joy_timeout_s`` of simulated time, so a
        simulation that waits for this node (lockstep) and a slow host make no hold that a
        replay would not make."""
        limit = self.values["joy_timeout_s"]
        if not scheduled:
            return bool(time.monotonic() - self.joy_time <= limit)
        if stamp is not None:
            return True
        newest = self.joy if self.joy is not None else joy
        now = _seconds(self.get_clock().now().to_msg())
        return bool(now - _seconds(newest.header.stamp) <= limit)

    def _impedance(self) -> None:
        if not self._state_ok():
            return
        assert self.state is not None
        now = time.monotonic()
        hand_live = now - self.hand_time <= self.values["hand_timeout_s"]
        if not hand_live:
            if self.commanding:
                self._send(self.core.hold_command(self.state, "hand controller silent"), None)
                self.core.hand.release()
                self.core.release_holds()
                self._publish_feedback(np.zeros(3))
                self.commanding = False
                self.holds += 1
            return
        force, torque = self.wrench
        if now - self.wrench_time > self.values["wrench_timeout_s"]:
            force, torque = np.zeros(3), np.zeros(3)
        soil = self._soil_in_task(self.state, force, torque)
        try:
            cmd, workspace = self.core.impedance_command(self.hand, soil, self.state,
                                                         self._tick_s())
        except KinematicsError as exc:
            self.rejections.reject(str(exc), self._counters())
            return
        self.commanding = True
        self._send(cmd, None)
        self._publish_feedback(soil + workspace)

    def _impedance_ticks(self, ticks: list[ImpedanceTick]) -> None:
        """Scheduled impedance (``command_delay_s``): each tick on simulated time, from the
        state, hand pose and wrench of its stamp (excavator_kinematics.teleop.
        impedance_schedule); the command is stamped for when sim_node applies it."""
        if self.impedance_schedule is not None:  # held for a pose (input_lockstep)?
            self.hand_wait.waiting(self.impedance_schedule.waiting_for_hand, time.monotonic())
        if self.core.mode != "impedance":
            return
        for tick in ticks:
            at_s = tick.command_ns * 1e-9
            if tick.hand is None:
                if self.commanding:  # one hold, then silence
                    self._send(self.core.hold_command(tick.state, "hand controller silent"),
                               None, at_s)
                    self.core.hand.release()
                    self.core.release_holds()
                    self._publish_feedback(np.zeros(3), tick.t_ns)
                    self.commanding = False
                    self.holds += 1
                else:
                    self._send_marker(at_s)
                continue
            soil = self._soil_in_task(tick.state, tick.force, tick.torque)
            try:
                cmd, workspace = self.core.impedance_command(tick.hand, soil, tick.state,
                                                             tick.t_ns * 1e-9)
            except KinematicsError as exc:
                self.rejections.reject(str(exc), self._counters())
                continue
            self.commanding = True
            self._send(cmd, None, at_s)
            self._publish_feedback(soil + workspace, tick.t_ns)

    def _soil_in_task(self, state: MachineState, force: np.ndarray,
                      torque: np.ndarray) -> np.ndarray:
        """The soil wrench (world, at the bucket origin) as generalised forces on X."""
        q = state.q
        pts = self.fk.points(q)
        yaw = state.base_yaw
        c, s = math.cos(yaw), math.sin(yaw)
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        return soil_force_in_task(force, torque, rot @ pts["M"], rot @ pts["tip"],
                                  yaw + float(q[0]))

    def _tick_s(self) -> float:
        """The control timer's tick this callback serves [s, on the node's clock]: its latest
        grid point. rcl fires a timer at or after each grid point and skips the points that
        passed meanwhile, so consecutive ticks differ by whole periods: the impedance model
        advances by the time that passed and the missed ticks are counted exactly
        (excavator_kinematics.teleop.ticks)."""
        timer = self.control_timer
        now_ns = timer.clock.now().nanoseconds
        until_ns = timer.time_until_next_call()
        if until_ns is None:  # cancelled: the time itself
            return now_ns * 1e-9
        return (now_ns + until_ns - timer.timer_period_ns) * 1e-9

    def _travel(self) -> None:
        joy = self.travel_joy
        if joy is None:
            return
        live = time.monotonic() - self.travel_time <= self.values["joy_timeout_s"]
        left = right = 0.0
        if live:
            try:
                left, right = self.core.travel_command(joy.axes, joy.buttons)
            except KinematicsError as exc:
                self.rejections.reject(str(exc), self._counters())
        moving = left != 0.0 or right != 0.0
        if moving or self.travelling:  # while moving, and one zero when it stops
            msg = JointState()
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.name = ["track_left", "track_right"]
            msg.velocity = [float(left), float(right)]
            self.track_pub.publish(msg)
        self.travelling = moving

    # --- outputs -------------------------------------------------------------------------
    def _send(self, cmd: JointCommand, joy: Joy | None, at_s: float | None = None) -> None:
        """Publish a command; ``at_s`` [s]: the stamp (when sim_node applies it), default now."""
        stamp = self.get_clock().now().to_msg()
        msg = self._command_message(at_s)
        if at_s is None:
            msg.header.stamp = stamp
        msg.name = list(FUNCTIONS)
        msg.position = [float(cmd.positions[n]) for n in FUNCTIONS]
        msg.velocity = [float(cmd.velocities[n]) for n in FUNCTIONS]
        self.cmd_pub.publish(msg)
        valve = JointState()
        valve.header.stamp = joy.header.stamp if joy is not None else stamp
        valve.name = list(VALVE_NAMES)
        valve.position = [float(cmd.valve.spool[n]) for n in VALVE_NAMES]
        valve.velocity = [float(cmd.valve.speed[n]) for n in VALVE_NAMES]
        self.valve_pub.publish(valve)
        self.sent += 1
        self.last_info = cmd.info

    def _send_marker(self, at_s: float) -> None:
        """Scheduled mode, nothing to command: an empty ``joint_command`` stamped ``at_s`` [s]
        (a time marker: sim_node changes nothing and holds it for its stamp), so sim_node's
        command lockstep waits for this stream from its start, not from the first real
        command, which a starved host could send late. Only ahead of every command sent: the
        stream stays in stamp order."""
        if at_s <= self.last_command_stamp:
            return
        self.cmd_pub.publish(self._command_message(at_s))
        self.markers += 1

    def _command_message(self, at_s: float | None) -> JointState:
        """An empty ``joint_command`` in base_link, stamped ``at_s`` [s] when scheduled (the
        newest stamp sent is kept: markers go only ahead of it)."""
        msg = JointState()
        msg.header.frame_id = "base_link"
        if at_s is not None:
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(round(at_s * 1e9),
                                                                    1_000_000_000)
            self.last_command_stamp = max(self.last_command_stamp, at_s)
        return msg

    def _publish_feedback(self, task_force: np.ndarray, stamp_ns: int | None = None) -> None:
        """The force for the hand controller; stamped ``stamp_ns`` (a scheduled tick) or now."""
        force, torque, saturated = self.core.settings.feedback.device_wrench(task_force)
        msg = WrenchStamped()
        if stamp_ns is None:
            msg.header.stamp = self.get_clock().now().to_msg()
        else:
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        msg.header.frame_id = self.values["feedback.frame_id"]
        msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = map(float, force)
        msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = map(float, torque)
        self.feedback_pub.publish(msg)
        self.last_info = {**self.last_info, "feedback_saturated": saturated}

    def _counters(self) -> dict[str, Any]:
        return {"mode": self.core.mode, "pattern": self.core.settings.pattern,
                "commands": self.sent, "holds": self.holds, "markers": self.markers,
                "joys_restamped": self.answers.restamped if self.answers else 0,
                "input_lockstep_releases": self.joy_wait.releases + self.hand_wait.releases,
                **self.command_age.counters(), **self.core.impedance_ticks.counters(),
                **(self.impedance_schedule.counters() if self.impedance_schedule else {}),
                **self.last_info}

    def publish_status(self) -> None:
        dropped = self.command_age.refused_since_status()
        if dropped:
            rule = self.command_age.rule
            last = rule.last_refused
            assert last is not None
            self.diagnostics.publish(
                WARN, f"{dropped} operator command(s) dropped as too old or stamped ahead since "
                f"the last status: {rule.last_refused_topic} {last.age_s:.3f} s old (limit "
                f"max_command_age_s {rule.max_age_s:g} s)", self._counters())
            return
        if self.state is None or not self._state_ok():
            self.diagnostics.publish(WARN, "no joint_states: not commanding", self._counters())
            return
        self.diagnostics.publish(OK, "commanding" if self.commanding else "idle",
                                 self._counters())


def _seconds(stamp: Any) -> float:
    return float(stamp.sec + 1e-9 * stamp.nanosec)


def _nanoseconds(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _factory() -> TeleopNode:
    try:
        return TeleopNode()
    except (ConfigError, KinematicsError) as exc:
        raise ConfigError(str(exc)) from None


USAGE = NodeUsage(
    "teleop_node", "An operator drives the machine: joysticks (ISO/SAE patterns), coordinated "
    "bucket control or impedance teleoperation with force feedback, to joint and track commands; "
    "in a fleet -p machine:=exc2 drives /exc2 (the joystick stays on this node's joy).",
    subscribes=("joy, joy_travel (sensor_msgs/Joy)", "joint_states (sensor_msgs/JointState)",
                "hand_pose (geometry_msgs/PoseStamped)",
                "soil/wrench (geometry_msgs/WrenchStamped)"),
    publishes=("joint_command, track_command, teleop/valve_command (sensor_msgs/JointState)",
               "teleop/force_feedback (geometry_msgs/WrenchStamped)",
               "teleop/joy_applied (sensor_msgs/Joy)",
               "teleop/hand_applied (geometry_msgs/PoseStamped)", "/diagnostics"),
    params_file="teleop.yaml", docs="docs/teleoperation.md")


def main(args: list[str] | None = None) -> int:
    return run_node(_factory, args, usage=USAGE)


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
