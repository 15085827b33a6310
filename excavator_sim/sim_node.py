"""sim_node: the MuJoCo excavator over ROS 2 (a thin rclpy shell over ExcavatorSimulation).

Subscribes
- ``joint_command`` (sensor_msgs/JointState): positions [rad] of any of swing/boom/arm/bucket,
  optional velocities [rad/s] (same order; approach speed caps). Cylinder names
  (``*_cylinder``, as the ik_node adds them) are accepted and ignored: the joint targets define
  them. NaN, unknown names and out-of-range targets are rejected (logged + ``/diagnostics``);
  the machine keeps its last valid setpoint.
- ``soil/wrench`` (geometry_msgs/WrenchStamped, frame ``world``): force/torque on the bucket at
  its origin M, stamped with the simulated time of the ``bucket_pose`` it answers. It acts only
  while fresh: during a publish period whose end is at most ``max_wrench_age_s`` after that
  stamp; after that the soil force is left out (zero) until a fresh one arrives
  (:mod:`excavator_sim.pacing` says why not hold). ``max_wrench_age_s`` 0 turns the check off
  (the latest wrench acts until replaced, whatever its stamp). Beyond the
  machine's plausible wrench (``excavator_sim.plausibility``: 3 x its maximum digging force) a
  wrench is rejected on arrival and the last valid one is kept (still only while fresh). A
  physics step that diverges anyway is undone by the core (last good state, wrench dropped,
  clock running) and reported as ERROR on ``/diagnostics``. With ``soil_lockstep_timeout_s``
  > 0 a period steps only once the wrench answering the latest ``bucket_pose`` arrived (at
  most that long a wait, then on alone until soil_node answers again:
  :mod:`excavator_sim.soil_lockstep`): the soil coupling then depends on simulated time only.
- ``track_command`` (sensor_msgs/JointState): ``velocity`` [m/s] of ``track_left`` /
  ``track_right``. Held for ``track_command_timeout_s`` of simulated time (default 0.2 s: ten
  periods of the bridge's 50 Hz ``plc/wheel_states`` and of teleop_node's 50 Hz commands, so a
  few late or lost samples on a loaded host or a LAN do not jerk the base); then the tracks stop
  (:mod:`excavator_sim.command_timeout`), WARN on ``/diagnostics`` until a fresh command
  arrives. 0 holds the last command until replaced.
- ``wheel_command`` (sensor_msgs/JointState), a **wheeled machine** in ``drive_mode``
  kinematic (issue 28): ``velocity`` of ``wheel_<w>`` = ground speed ``r omega`` [m/s] of each
  wheel the machine's model drives (Ackermann ``rl``, ``rr``; 4WD4WS ``fl``, ``fr``, ``rl``,
  ``rr``), ``position`` of ``steer_<w>`` = steering angle [rad, + left] of each wheel it steers
  (Ackermann ``fl``, ``fr``; 4WD4WS all four); every one of them in each message (the layout
  of the bridge's ``plc/wheel_states``, so the standalone arrangement remaps this topic to
  it). The wheels turn at those speeds at once and the steering follows the angles at the
  preset's steering rate; the base moves with the model's direct kinematics
  (:mod:`excavator_sim.drivetrain.wheeled_kinematic`). The same stale-command rule as
  ``track_command`` (``track_command_timeout_s``: then the wheels stop, the steering held;
  ``max_command_age_s``, the stamp schedule); NaN, a speed beyond the wheel drive's limit, an
  angle past the end stops, a missing or unknown name is rejected, the last valid command
  kept. On a tracked machine, or in plant mode, it is refused (rejection).
- The command topics are applied **at their header stamp** in simulated time when it lies
  ahead (``excavator_sim.command_schedule``): held in a time-ordered buffer and applied at the
  first publish period starting at or after the stamp, so the motion depends on the stamps,
  not on when the messages arrived (teleop_node's ``command_delay_s``; replay). A stamp at or
  behind the simulated time (late, or stamped when sent, as ik_node does) or zero applies on
  arrival; late ones are counted on ``/diagnostics`` (``commands_past_stamp``,
  ``command_late_ms_max``); with ``command_lockstep_timeout_s`` > 0 there are none from a
  scheduled sender: once a command was held, a period steps only once a command stamped at or
  after its start arrived (at most that long a wait, then on alone until a command is held
  again: :mod:`excavator_sim.command_lockstep`). An empty ``joint_command`` (no names, no
  positions, no velocities) is a **time marker**: it changes nothing, and is held for its stamp
  like a command (teleop_node's scheduled stream while it has nothing to command, so the
  lockstep holds from the sender's start; counted as ``command_markers``; one already past
  engages the lockstep too, counted as ``command_markers_late``). A stamp more than
  ``max_command_lead_s``
  ahead (a wall-clock stamp from a node without ``use_sim_time``) applies on arrival too, counted
  (``commands_beyond_lead``) and logged once; ``max_command_lead_s`` 0 applies every command on
  arrival. Before that, a command sent more than ``max_command_age_s`` before it is taken
  (its DDS source timestamp on the wall clock: held up on the link, or waiting while this
  node was stopped) is dropped and counted (``commands_expired``;
  :mod:`excavator_common.command_age`), and a dropped track command does not keep the tracks
  alive. Not the header stamp: here it says when to apply, and a bag replays commands with
  the stamps of their recording.
- ``plant/actuation`` (sensor_msgs/JointState, from the plant link: the PLC's ``plant_out``),
  ``drive_mode`` plant (hardware in the loop, issue 27): ``effort`` of ``track_left`` /
  ``track_right`` = torque set-points [N m at the sprocket], ``position`` of the pseudo-joints
  ``drive_enable`` and ``brake`` (1.0 on, 0.0 off), NaN where nothing applies. Applied at once,
  to the drive train (:mod:`excavator_sim.drivetrain`). Fail-safe (torque 0, brakes applied):
  before the first one, when none arrived for ``plant_actuation_timeout_s`` of simulated time
  (WARN on ``/diagnostics``), with ``drive_enable`` 0 or ``brake`` 1, and on a bad one (NaN,
  inf, a torque beyond twice the drive's limit, a flag not 0/1, a missing or unknown name): a
  **drive fault**, ERROR on ``/diagnostics`` naming it, latched until a valid actuation (the last
  valid one is not reused); the simulation keeps running. In kinematic mode it is refused
  (rejection), and in plant mode ``track_command`` is. A **wheeled machine** (``machine`` a
  wheeled preset, issue 28; in kinematic mode it takes ``wheel_command``) takes ``wheel_<w>`` of its
  driven wheels (``effort`` = torque set-point [N m at the wheel]) and ``steer_<w>`` of its
  steered wheels (``velocity`` = steering rate command [rad/s]) with the same pseudo-joints and
  the same fail-safe; a torque beyond twice the wheel drive's limit or a steering rate beyond
  twice the steering's rate is a drive fault too (:mod:`excavator_sim.drivetrain.wheeled_io`;
  up to there the relief valve and the steering valve clip, and the end stops hold the
  angle).
- ``soil/bucket_payload`` (geometry_msgs/InertiaStamped, frame ``bucket``): the soil carried
  in the bucket as a rigid body (soil_node with the per-cell bucket soil), put on the MuJoCo
  bucket body (``ExcavatorSimulation.set_bucket_payload``) and held until replaced: its weight
  acts at its own centre, its inertia slows the swing and the front (the wrench then carries
  no weight). An implausible one is rejected and the last kept. With ``soil_in_process`` the
  in-process soil sets it directly every period. In lockstep, once payloads come, the soil's
  answer to a pose is its payload and its wrench of that stamp: a period steps on both.
- ``soil/terrain_patch`` (std_msgs/Float64MultiArray): a changed rectangle of the terrain,
  written into MuJoCo's height field (format: :mod:`excavator_sim.heightfield`, dims ``i``,
  ``j``, data ``[i0, j0, heights...]`` [m]); the grids must match (``terrain.*`` parameters).

Pacing: with ``real_time_factor`` > 0 each publish period is due at an absolute wall-clock
deadline (``excavator_sim.pacing.Pacer``): a late wake-up is caught up by stepping several
periods at once, at most ``max_catch_up_s`` of wall time; beyond that the schedule slips and the
node says so. ``/diagnostics`` reports how far the simulation is behind the wall clock (lag
p50/p99/max), the achieved real-time factor, the soil wrench's age on arrival (p50/p99/max
[ms of sim time]) and how many periods ran without soil force because the wrench was stale;
the level is WARN while the lag exceeds ``lag_warn_s`` or wrenches go stale.

Publishes (at ``publish_rate_hz``): ``joint_states`` (every named joint, cylinders and passive
joints included; tracks: position = travelled distance [m], velocity [m/s]; the base's
``base_x``, ``base_y`` [m] and ``base_yaw`` [rad] in ``world``: with them every movable joint
of the URDF, so robot_state_publisher poses the machine in ``world``), ``/clock`` (only
when the node's ``use_sim_time`` parameter is true at start-up: with it false nothing follows
simulated time, and two simulators on one graph would interleave their clocks),
``bucket_twist`` then ``bucket_pose`` (frame ``world``, same stamp: the twist first, so the
soil node has it when the pose arrives), ``markers`` (the machine in ``world``, at
``marker_rate_hz`` in wall time: they are for RViz), ``imu`` (sensor_msgs/Imu, frame
``base_link`` with the ``frame_prefix``: orientation, angular velocity, specific force as an
accelerometer reads it; pitch and roll from the terrain's plane under the tracks, the base
itself staying planar), ``plant/sensors`` (drive_mode plant; sensor_msgs/JointState:
``track_left`` / ``track_right`` position = travelled distance [m], velocity = sprocket speed
[m/s], effort = drive torque [N m]; ``ground_speed`` velocity [m/s] along base_link x;
pseudo-joints ``drive_ready``, ``drive_fault``, ``brake`` in position, 1.0 = true; a wheeled
machine: ``wheel_<w>`` of all four wheels (travelled distance [m], ``r omega`` [m/s], drive
torque [N m], 0 on an undriven wheel) and ``steer_<w>`` position = measured steering angle
[rad] in place of the tracks; its ``joint_states`` carry ``wheel_<w>`` [rad, rad/s] and
``steer_<w>`` [rad, rad/s], the URDF's joints),
``robot_description`` once (transient local;
the URDF of the model this node simulates, rooted at ``world``, its other links prefixed with
the ``frame_prefix`` parameter, e.g. ``exc1/``, for a fleet), ``/diagnostics`` at 1 Hz. Poses,
twists and markers are in ``world``, the frame the machines of a fleet share.
Header stamps are simulated time (the time on ``/clock``, whether or not it is published).

Parameters: ``excavator_sim.sim_config.SIM_PARAMETERS`` (docs/configuration.md). Changeable at
run time (``ros2 param set``, applied at once): ``publish_rate_hz``, ``real_time_factor`` and
``max_catch_up_s`` (the pacing is rebuilt from the current simulated time), ``marker_rate_hz``,
``max_wrench_age_s``, ``lag_warn_s``, ``track_command_timeout_s``,
``plant_actuation_timeout_s``, ``max_command_age_s``; every other parameter is read-only.

One clock for a fleet: with ``follow_clock`` true the node publishes no ``/clock`` and is not
paced by the wall clock; it steps its model to the time on ``/clock`` (another sim_node's: the
fleet's clock owner), whole publish periods at a time, so its stamps are the owner's time
(:mod:`excavator_sim.clock_follower`). No ``/clock``, no stepping: ``/diagnostics`` says it
waits for the clock.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import InertiaStamped, PoseStamped, TwistStamped, WrenchStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import MessageInfo
from rclpy.timer import Timer
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import Marker, MarkerArray

from excavator_common import realtime
from excavator_common.command_age_node import CommandAgeCheck, take_waiting
from excavator_common.frames import check_frame_prefix
from excavator_common.node_args import NodeUsage
from excavator_common.parameter_node import NodeParameters, parameter_overrides
from excavator_common.ros_runtime import (
    ERROR,
    OK,
    RECORDED_STREAM_DEPTH,
    WARN,
    Diagnostics,
    Rejections,
    run_node,
    steady_timer,
)
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_sim.clock_follower import ClockFollower
from excavator_sim.command_lockstep import CommandLockstep
from excavator_sim.command_schedule import CommandSchedule, StampTooFarAheadError
from excavator_sim.command_timeout import CommandTimeout
from excavator_sim.drivetrain.actuation import (
    ActuationError,
    ActuationFreshness,
    PlantActuation,
    parse_actuation,
    read_seq,
)
from excavator_sim.drivetrain.vehicle import SAFE_COMMAND
from excavator_sim.drivetrain.wheeled import SAFE_WHEELED_COMMAND, WheeledCommand
from excavator_sim.drivetrain.wheeled_io import (
    WheeledPlantActuation,
    parse_wheeled_actuation,
    wheeled_sensor_arrays,
)
from excavator_sim.errors import CommandError, HeightFieldError, SimConfigError
from excavator_sim.model_builder import CYLINDER_JOINTS
from excavator_sim.pacing import Pacer, Window, WrenchGate
from excavator_sim.plausibility import fmt_vector
from excavator_sim.sim_config import (
    INSTANCES,
    SIM_PARAMETERS,
    config_from_flat,
    load_sim_machine,
)
from excavator_sim.simulation import TRACK_JOINTS, ExcavatorSimulation
from excavator_sim.soil.bucket_prism import BucketPrism
from excavator_sim.soil.payload import BucketPayload
from excavator_sim.soil.payload_messages import is_bucket_frame, payload_from_message
from excavator_sim.soil_lockstep import SoilLockstep
from excavator_sim.terrain_patch import flat_to_patch

if TYPE_CHECKING:
    from excavator_sim.soil.in_process import InProcessSoil
from excavator_sim.urdf import urdf_from_model

WORLD = "world"
# Free run (real_time_factor 0): wall time spent simulating before serving callbacks [s].
_FREE_RUN_SLICE_S = 0.005
# Paced: publish periods stepped at most per timer call when catching up (then the executor
# serves commands and wrenches before the rest).
_MAX_BURST = 5
# Lag samples before this much wall time after the first period are start-up, not reported as
# the worst lag since start [s].
_STARTUP_S = 1.0
# Soil lockstep: a wait for the answer to the latest bucket pose sends that pose again this often
# [s wall]. A pose published before soil_node's subscription matched (its start-up, or this
# node's: discovery takes a moment) was never received, and nothing newer comes while the
# simulation waits: the whole soil_lockstep_timeout_s was lost at every start (once in each run
# of the impedance replay test). soil_node answers a stamp once (it skips one it has taken).
_POSE_RESEND_S = 0.25
_MARKER_TYPES = {int(mujoco.mjtGeom.mjGEOM_BOX): Marker.CUBE,
                 int(mujoco.mjtGeom.mjGEOM_CAPSULE): Marker.CYLINDER,
                 int(mujoco.mjtGeom.mjGEOM_CYLINDER): Marker.CYLINDER}


def _stamp(seconds: float) -> Time:
    ns = round(seconds * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


class SimNode(Node):
    def __init__(self, **node_options: Any) -> None:
        """``node_options``: rclpy Node's keyword options (a composed node's own ``cli_args``
        with ``use_global_arguments=False``: excavator_hil.node_container)."""
        super().__init__("sim_node", **node_options)
        # A machine class preset (config/machines/, issue 14) replaces the parameter files'
        # values of the keys it sets (so the declared, read-only parameters show what acts).
        machine = parameter_overrides(self).get("machine")
        machine_name = str(machine.value) if machine is not None else ""
        preset = load_sim_machine(machine_name) if machine_name else None
        # One spec (excavator_sim.sim_config.SIM_PARAMETERS): declared with descriptors,
        # read_only but for the dynamic ones, which apply_parameters applies at run time.
        self.parameters = NodeParameters(self, SIM_PARAMETERS, self.apply_parameters,
                                         instances=INSTANCES,
                                         replace=preset.parameters if preset else None)
        values = self.parameters.values
        geometry_file = str(values["geometry_file"])
        self.marker_rate = float(values["marker_rate_hz"])
        publish_description = bool(values["publish_robot_description"])
        frame_prefix = str(values["frame_prefix"])
        try:
            check_frame_prefix(frame_prefix)
        except ValueError as exc:
            raise SimConfigError(str(exc)) from None
        max_wrench_age = float(values["max_wrench_age_s"])
        self.lag_warn_s = float(values["lag_warn_s"])
        self.max_catch_up_s = float(values["max_catch_up_s"])
        self.track_timeout = CommandTimeout(float(values["track_command_timeout_s"]))
        self._track_speeds = (0.0, 0.0)  # the latest commanded [m/s]
        self._tracks_stopped_by_timeout = False
        self._commands_checked = False  # the track command's age checked in this burst
        follow_clock = bool(values["follow_clock"])
        self.follow_clock = follow_clock
        config = config_from_flat(values, source="sim_node parameters" + (
            f" + machine preset {preset.source}" if preset else ""),
            undercarriage=preset.undercarriage if preset else None)
        # in-process soil (issue 12 item 3): soil_node's core inside the simulation step
        soil_in_process = bool(values["soil_in_process"])
        soil_params_file = str(values["soil_params_file"])
        soil_config = None
        if soil_in_process:   # imported only then: the soil's numba kernels cost ~35-60 MiB
            from excavator_sim.soil.config import load_soil_config

            soil_config = load_soil_config(soil_params_file or None)
        # Commands stamped ahead of the simulated time wait for it (teleop replay).
        self.schedule: CommandSchedule[tuple[str, object, object]] = CommandSchedule(
            max_lead_s=float(values["max_command_lead_s"]))
        self.unschedulable = 0  # commands stamped beyond max_command_lead_s (applied at once)
        self.markers = 0  # empty joint_commands: time markers of a scheduled sender
        self.markers_late = 0  # ... of them already past on arrival
        # Sent longer than max_command_age_s ago (the DDS source timestamp: the header stamp
        # says when to apply, the schedule's business, and bags replay old ones): dropped.
        self.command_age = CommandAgeCheck(self, float(values["max_command_age_s"]))
        geometry = (ExcavatorGeometry.from_yaml(geometry_file) if geometry_file
                    else default_geometry())
        if preset is not None:
            geometry = preset.geometry(geometry)
        self.sim = ExcavatorSimulation(config, geometry)
        self.config = config
        # the PLC's actuation (drive_mode plant): fresh, valid, or the drives brake
        timeout = float(values["plant_actuation_timeout_s"])
        self.plant: ActuationFreshness[Any] = (
            WheeledPlantActuation(timeout) if self.sim.wheeled is not None
            else PlantActuation(timeout))
        self.plant_mode = self.sim.vehicle is not None
        self._plant_refused = 0   # plant/actuation refused in kinematic mode
        self._plant_seq = ""      # the plant_out seq of the last PLC actuation applied
        self.gate = WrenchGate(max_age_s=max_wrench_age)
        # over DDS only: the in-process soil answers within the step (the parameter check
        # refuses both together, and follow_clock)
        self.lockstep = SoilLockstep(float(values["soil_lockstep_timeout_s"])
                                     if not soil_in_process else 0.0)
        self.command_lockstep = CommandLockstep(float(values["command_lockstep_timeout_s"]))
        self._pose_sent_wall = -math.inf   # when the bucket pose was last sent [s monotonic]
        self.poses_resent = 0
        self.timer: Timer | None = None
        self.follower: ClockFollower | None = None
        self._clock_wall: float | None = None  # wall time the latest /clock arrived [s]
        self._clock_subscribed = False
        self._set_timing(start=False)
        self.lag = Window()  # [s of wall time] behind the schedule after each period
        self._lag_since_status = -math.inf
        self._stale_at_status = 0
        self._periods = 0
        self._paced_since: float | None = None  # wall time of the first paced period [s]

        # use_sim_time (declared by rclpy): this node is then the source of /clock. Read once at
        # start-up; without it no /clock publisher exists at all.
        self.publishes_clock = (bool(self.get_parameter("use_sim_time").value)
                                and not follow_clock)
        self.joint_pub = self.create_publisher(JointState, "joint_states",
                                               RECORDED_STREAM_DEPTH)
        self.clock_pub = (self.create_publisher(Clock, "/clock", 10) if self.publishes_clock
                          else None)
        self.pose_pub = self.create_publisher(PoseStamped, "bucket_pose", RECORDED_STREAM_DEPTH)
        self.twist_pub = self.create_publisher(TwistStamped, "bucket_twist", 10)
        self.marker_pub = self.create_publisher(MarkerArray, "markers", 10)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        if publish_description:
            self.description_pub = self.create_publisher(String, "robot_description", latched)
            self.description_pub.publish(String(data=urdf_from_model(self.sim.model,
                                                                     frame_prefix=frame_prefix)))
        # Deep enough that a burst of stamped commands after a stall is applied, none lost.
        # Taken all at once before each step (take_commands), not one per executor round.
        self._command_subs = (
            (self.create_subscription(JointState, "joint_command", self.on_joint_command, 100),
             self.on_joint_command),
            (self.create_subscription(JointState, "track_command", self.on_track_command, 100),
             self.on_track_command),
            (self.create_subscription(JointState, "wheel_command", self.on_wheel_command, 100),
             self.on_wheel_command),
            (self.create_subscription(JointState, "plant/actuation", self.on_plant_actuation,
                                      10), self.on_plant_actuation))
        self.imu_pub = self.create_publisher(Imu, "imu", 10)
        self.sensors_pub = (self.create_publisher(JointState, "plant/sensors", 10)
                            if self.plant_mode else None)
        self.terrain_patches = 0
        self.soil: InProcessSoil | None = None
        if soil_config is not None:   # the soil is computed here: its topics are outputs
            from excavator_sim.soil.in_process import InProcessSoil

            self.soil = InProcessSoil(self, soil_config, BucketPrism.from_geometry(geometry))
            box, heights = self.soil.full_grid()
            try:
                self.sim.terrain.set_region(box[0], box[2], heights)
            except HeightFieldError as exc:
                self.soil.close()
                raise SimConfigError(
                    f"soil_in_process: the soil grid ({heights.shape[0]} x {heights.shape[1]} "
                    f"cells) does not fit the height field: {exc}; make sim_node's terrain.* "
                    "match the terrain of the soil file (soil_params_file)") from None
        else:
            # the payload first: when both are ready the executor takes them in this order
            # (soil_node publishes the payload, then the wrench of the same update)
            self.create_subscription(InertiaStamped, "soil/bucket_payload", self.on_payload, 10)
            self.create_subscription(WrenchStamped, "soil/wrench", self.on_wrench, 10)
            self.create_subscription(Float64MultiArray, "soil/terrain_patch",
                                     self.on_terrain_patch, 10)
        self._soil_rejected = ""   # the in-process soil's last rejection (said once)
        # soil/bucket_payload: the latest stamp received (None: the soil sends none, the
        # closed form), and a wrench's stamp whose payload has not arrived yet (lockstep)
        self._payload_stamp: float | None = None
        self._answer_pending: float | None = None
        # in a fleet the status names its machine: "exc2/sim_node: simulation"
        ns = self.get_namespace().strip("/")
        self.diagnostics = Diagnostics(self, f"{ns + '/' if ns else ''}{self.get_name()}: "
                                       "simulation")
        self.rejections = Rejections(self, self.diagnostics, "command")
        self._divergences_reported = 0
        self._divergence_in_period = False
        # Timers on the steady clock: with use_sim_time the node clock follows the /clock this
        # node publishes itself, and sim-time timers would never fire (ros_runtime.steady_timer)
        steady_timer(self, 1.0, self.publish_status)

        self._clock_msg = Clock()
        self._joint_msg = JointState()
        self._joint_msg.name = list(self.sim.joint_state().names)
        self._pose_msg = PoseStamped()
        self._pose_msg.header.frame_id = WORLD
        self._twist_msg = TwistStamped()
        self._twist_msg.header.frame_id = WORLD
        self._imu_msg = Imu()
        self._imu_msg.header.frame_id = f"{frame_prefix}base_link"
        self._sensors_msg = JointState()
        self._sensors_msg.name = (
            wheeled_sensor_arrays(self.sim.wheeled, False)[0] if self.sim.wheeled is not None
            else ["track_left", "track_right", "ground_speed", "drive_ready", "drive_fault",
                  "brake"])
        self._wall_start = time.monotonic()
        self._sim_start = self.sim.time
        self._markers = self._make_markers()
        # The machine's geom poses as of the last period, (sim time, xpos, xmat): copied on the
        # control path (a few microseconds), turned into markers in their own thread.
        self._geom_snapshot: tuple[float, np.ndarray, np.ndarray] | None = None
        self._stop = threading.Event()
        self._marker_thread: threading.Thread | None = None
        if self.marker_rate > 0:
            self._start_marker_thread()
        self._set_timing(start=True)
        g = config.terrain
        self.get_logger().info(
            f"ready: dt {config.timestep} s, real_time_factor {config.real_time_factor}, "
            f"publish_rate_hz {config.publish_rate}, max_wrench_age_s {max_wrench_age}, /clock "
            f"{_clock_mode(self.publishes_clock, follow_clock)}, "
            f"{self.sim.model.nv} dof, drive_mode {config.drive_mode}"
            + (f" on wheels ({config.undercarriage.vehicle_model})"
               if config.undercarriage is not None else "") + ", terrain "
            f"{g.nx} x {g.ny} nodes from ({g.x0}, {g.y0}) m every {g.cell_size} m, machine "
            f"{preset.name if preset else 'default'} "
            f"({sum(self.sim.geometry.masses_kg.values()) / 1e3:.1f} t, "
            f"{config.hydraulics.pressure_pa / 1e6:.1f} MPa)")

    # --- run-time parameter changes (validated by NodeParameters' on-set callback) ----------
    def _set_timing(self, start: bool) -> None:
        """Publish period, pacer and stepping timer from ``self.config`` (publish_rate,
        real_time_factor) and ``max_catch_up_s``; ``start`` (re)creates the timer."""
        config = self.config
        self.steps_per_publish = max(1, round(1.0 / (config.publish_rate * config.timestep)))
        self.period_s = self.steps_per_publish * config.timestep  # one publish period [s]
        self.pacer = (Pacer(self.period_s, config.real_time_factor, self.max_catch_up_s)
                      if config.real_time_factor > 0 and not self.follow_clock else None)
        self._paced_since = None  # wall time of the first paced period [s]
        if self.follow_clock:
            # stepped by the owner's /clock; a rebuilt follower aligns on the next /clock
            self.follower = ClockFollower(self.period_s, self.max_catch_up_s)
        if not start:
            return
        if self.follow_clock:
            if not self._clock_subscribed:  # latest wins
                self.create_subscription(Clock, "/clock", self.on_clock, QoSProfile(
                    depth=1, reliability=ReliabilityPolicy.RELIABLE))
                self._clock_subscribed = True
            return
        if self.timer is not None:
            self.destroy_timer(self.timer)
        # real_time_factor 0: tick as fast as possible; else wake once per publish period of
        # wall time (the Pacer's absolute schedule decides how many periods are due).
        self.timer = steady_timer(self, self.period_s / config.real_time_factor
                                  if config.real_time_factor > 0 else 1e-4, self.tick)

    def apply_parameters(self, changed: dict[str, Any]) -> None:
        """Post-set: apply validated run-time changes (rates, thresholds) at once."""
        if "max_wrench_age_s" in changed:
            self.gate.max_age_s = float(changed["max_wrench_age_s"])
        if "lag_warn_s" in changed:
            self.lag_warn_s = float(changed["lag_warn_s"])
        if "track_command_timeout_s" in changed:
            self.track_timeout.timeout_s = float(changed["track_command_timeout_s"])
        if "plant_actuation_timeout_s" in changed:
            self.plant.timeout_s = float(changed["plant_actuation_timeout_s"])
        if "max_command_age_s" in changed:
            self.command_age.set_max_age(float(changed["max_command_age_s"]))
        if "max_catch_up_s" in changed:
            self.max_catch_up_s = float(changed["max_catch_up_s"])
        timing = {"publish_rate_hz", "real_time_factor", "max_catch_up_s"} & set(changed)
        if timing:
            self.config = dataclasses.replace(
                self.config,
                publish_rate=float(changed.get("publish_rate_hz", self.config.publish_rate)),
                real_time_factor=float(changed.get("real_time_factor",
                                                   self.config.real_time_factor)))
            self._set_timing(start=True)  # lag samples restart after _STARTUP_S
        if "marker_rate_hz" in changed:
            self.marker_rate = float(changed["marker_rate_hz"])
            if self.marker_rate > 0 and self._marker_thread is None:
                self._start_marker_thread()

    # --- inputs --------------------------------------------------------------------------
    def _reject(self, message: str) -> None:
        self.rejections.reject(message, {})

    def on_joint_command(self, msg: JointState, info: MessageInfo) -> None:
        if not self.command_age.admit_in_transit("joint_command", info):
            return
        names = list(msg.name)
        if not names and not msg.position and not msg.velocity:
            # a time marker (teleop_node with command_delay_s, while it has nothing to
            # command): no joint changes; held for its stamp like any scheduled command, so
            # the command lockstep waits for the stream from the sender's start, not from its
            # first real command (which a starved sender could send late)
            self.markers += 1
            stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
            ahead = stamp - self.sim.time
            if 1e-9 < ahead <= self.schedule.max_lead_s:  # a late one is no late command ...
                self._scheduled(msg, ("marker", None, None))
            elif ahead <= 1e-9 and stamp > 0.0 and self.schedule.max_lead_s > 0.0:
                # ... but it says a scheduled sender is there: the lockstep waits for it from
                # here on (a sender starved from its start sent only late markers, and its
                # session's first command came past its stamp, nothing awaited: ci87)
                self.markers_late += 1
                self.command_lockstep.sender_behind(stamp)
            return
        if len(msg.position) != len(names):
            self._reject(f"joint_command has {len(names)} names but {len(msg.position)} "
                         "positions: send one position per name")
            return
        if msg.velocity and len(msg.velocity) != len(names):
            self._reject(f"joint_command has {len(names)} names but {len(msg.velocity)} "
                         "velocities: send none or one per name")
            return
        positions, velocities = {}, {}
        for k, name in enumerate(names):
            if name in CYLINDER_JOINTS:
                continue  # implied by the joint targets (the ik_node sends them too)
            positions[name] = msg.position[k]
            if msg.velocity:
                velocities[name] = msg.velocity[k]
        if not self._scheduled(msg, ("joint", positions, velocities or None)):
            self._apply_joint_targets(positions, velocities or None)

    def _scheduled(self, msg: JointState, command: tuple[str, object, object]) -> bool:
        """True when the command is held for its stamp (or rejected); False: apply it now."""
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        if self.schedule.max_lead_s <= 0.0 or stamp == 0.0:
            return False
        try:
            held = self.schedule.offer(stamp, command, self.sim.time)
        except StampTooFarAheadError as exc:
            # Most likely a wall-clock stamp from a node without use_sim_time: applied on
            # arrival as before the schedule existed, said once (a warning only when this node
            # runs on sim time, where a wall-clock stamp is a mistake).
            self.unschedulable += 1
            if self.unschedulable == 1:
                log = (self.get_logger().warning if self.publishes_clock
                       else self.get_logger().info)
                log(f"{exc}; applying such commands on arrival")
            return False
        if held:  # a scheduled stream: the lockstep waits for it from here on (where on)
            self.command_lockstep.held(stamp)
        return held

    def _apply_joint_targets(self, positions: dict[str, float],
                             velocities: dict[str, float] | None) -> None:
        try:
            self.sim.set_joint_targets(positions, velocities)
        except CommandError as exc:
            self._reject(str(exc))

    def _apply_track_speeds(self, left: float, right: float) -> None:
        try:
            self.sim.set_track_speeds(left, right)
        except CommandError as exc:
            self._reject(str(exc))
            return
        self._track_speeds = (left, right)
        self._tracks_stopped_by_timeout = False
        self.track_timeout.received(self.sim.time)

    def on_wrench(self, msg: WrenchStamped) -> None:
        # valid or not, the soil answered the pose of this stamp (lockstep)
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        self._take_wrench(msg)
        if self._payload_stamp is not None and self._payload_stamp < stamp - 1e-9:
            # the soil sends its load's mass before each wrench (soil/bucket_payload): the
            # answer is complete with it, so a lockstep period never steps on the old mass
            self._answer_pending = stamp
            return
        self._answered(stamp)

    def _answered(self, stamp: float) -> None:
        self.lockstep.answered(stamp)
        if self.lockstep.waiting:  # the period held back for this answer steps now
            self.tick()

    def _take_wrench(self, msg: WrenchStamped) -> None:
        """Check the wrench and offer it to the gate (rejected: logged, the last one kept)."""
        if msg.header.frame_id not in ("", WORLD):
            self._reject(f"soil/wrench in frame {msg.header.frame_id!r}: send it in 'world'")
            return
        f, t = msg.wrench.force, msg.wrench.torque
        force, torque = np.array([f.x, f.y, f.z]), np.array([t.x, t.y, t.z])
        if not (np.all(np.isfinite(force)) and np.all(np.isfinite(torque))):
            self._reject(f"bucket wrench force={fmt_vector(force)} torque={fmt_vector(torque)} "
                         "has NaN/inf: pass finite values [N], [N m]; the last valid wrench is "
                         "kept")
            return
        reason = self.sim.envelope.check_wrench(force, torque)
        if reason is not None:
            self._reject(f"{reason}; the last valid wrench is kept")
            return
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        # Applied at the next period boundary, if still fresh then (see tick).
        self.gate.offer(stamp, force, torque, self.sim.time)

    def on_plant_actuation(self, msg: JointState, info: MessageInfo) -> None:
        """The PLC's actuation (through the plant link): checked and applied at once; a bad one
        is a drive fault that brakes (latched until a valid one). One held up in transit past
        ``max_command_age_s`` is dropped like any late command, and does not keep the drives
        alive (``plant_actuation_timeout_s``)."""
        if not self.command_age.admit_in_transit("plant/actuation", info):
            return
        if not self.plant_mode:
            self._plant_refused += 1
            if self._plant_refused == 1:
                self._reject("plant/actuation refused: drive_mode is kinematic (the tracks "
                             "follow track_command); start sim_node with drive_mode:=plant for "
                             "hardware in the loop")
            return
        command: Any
        from_plc, seq = True, None
        try:
            from_plc, seq = read_seq(msg.name, msg.position)
            if self.sim.wheeled is not None:
                command = parse_wheeled_actuation(msg.name, msg.position, msg.velocity,
                                                  msg.effort, self.sim.wheeled.params)
            else:
                assert self.sim.drivetrain is not None
                command = parse_actuation(msg.name, msg.position, msg.velocity, msg.effort,
                                          self.sim.drivetrain.params.drive.torque_limit_nm)
        except ActuationError as exc:
            onset = not self.plant.fault
            if seq is not None:   # the PLC's block: named as its program counts it
                exc = ActuationError(f"plant_out seq {seq}: {exc}")
            self.plant.reject(str(exc))
            self._brake_drives()
            if onset:   # said when it starts, counted after (a stream of bad ones: no flood)
                message = f"drive fault: {exc}; drives braked until a valid plant/actuation"
                self.get_logger().error(message)
                self.diagnostics.publish(ERROR, message, self._plant_values())
            return
        if self.plant.fault and from_plc:   # the plant link's own brake leaves it latched
            self.get_logger().info("drive fault cleared: a valid plant/actuation arrived")
        if seq is not None:
            self._plant_seq = str(seq)
        self.plant.accept(command, self.sim.time, from_plc)
        if isinstance(command, WheeledCommand):
            self.sim.set_wheeled_command(command)
        else:
            self.sim.set_drive_command(command)

    def _brake_drives(self) -> None:
        """The fail-safe command: torque 0, brakes applied (and the steering valves closed)."""
        if self.sim.wheeled is not None:
            self.sim.set_wheeled_command(SAFE_WHEELED_COMMAND)
        else:
            self.sim.set_drive_command(SAFE_COMMAND)

    def _actuation_values(self) -> dict[str, str | int]:
        return {
            "drive_mode": "plant", "drive_fault": self.plant.fault,
            "plant_actuations": self.plant.received,
            "plant_actuation_faults": self.plant.rejected,
            "plant_actuation_seq": self._plant_seq,
            "plant_actuation_age_s": f"{self.plant.age_s(self.sim.time):.3f}",
            "plant_actuation_timeouts": self.plant.timeouts,
            "plant_actuation_age_at_timeout_s": f"{self.plant.age_at_timeout_s:.3f}",
        }

    def _wheeled_values(self) -> dict[str, str | int]:
        """A wheeled machine's figures for /diagnostics (per wheel in fl, fr, rl, rr order)."""
        v = self.sim.wheeled
        assert v is not None
        cmd = self.sim.wheeled_command
        wheels = list(v.wheels.values())
        p = v.params
        return {
            **self._actuation_values(),
            "vehicle_model": self.config.undercarriage.vehicle_model
            if self.config.undercarriage is not None else "",
            "drive_enable": int(cmd.enable), "brake": int(wheels[0].braked),
            "torque_setpoint_nm": " / ".join(f"{t:.0f}" for t in cmd.torques_nm),
            "steer_rate_command_rad_s": " / ".join(f"{r:.3f}" for r in cmd.steer_rates_rad_s),
            "drive_torque_nm": " / ".join(f"{w.torque_nm:.0f}" for w in wheels),
            "wheel_speed_m_s": " / ".join(f"{w.speed_m_s:.3f}" for w in wheels),
            "steer_angle_rad": " / ".join(f"{a:.4f}" for a in v.steer_angles(p.steered)),
            "wheel_slip": " / ".join(f"{w.slip:.4f}" for w in wheels),
            "ground_speed_m_s": f"{v.ground_speed_m_s:.3f}",
            "yaw_rate_rad_s": f"{v.yaw_rate_rad_s:.4f}",
            "drive_torque_limit_nm": f"{p.drive.torque_limit_nm:.0f}",
            "drivetrain_unconverged_steps": v.unconverged,
        }

    def _plant_values(self) -> dict[str, str | int]:
        """The drive train's figures for /diagnostics (drive_mode plant)."""
        if self.sim.wheeled is not None:
            return self._wheeled_values()
        v = self.sim.drivetrain
        if v is None:
            return {"drive_mode": "kinematic", "plant_actuation_refused": self._plant_refused}
        cmd = self.sim.drive_command
        ground = self.sim.ground
        left, right = v.tracks
        return {
            **self._actuation_values(),
            "drive_enable": int(cmd.enable), "brake": int(left.braked),
            "torque_setpoint_nm": f"{cmd.torque_left_nm:.0f} / {cmd.torque_right_nm:.0f}",
            "drive_torque_nm": f"{left.torque_nm:.0f} / {right.torque_nm:.0f}",
            "track_speed_m_s": f"{left.speed_m_s:.3f} / {right.speed_m_s:.3f}",
            "ground_speed_m_s": f"{v.ground_speed_m_s:.3f}",
            "track_slip": f"{left.slip:.4f} / {right.slip:.4f}",
            "soil_under_tracks": (f"{ground.soils[0].name} / {ground.soils[1].name}"
                                  if ground is not None else ""),
            "drive_torque_limit_nm": f"{v.params.drive.torque_limit_nm:.0f}",
            "drivetrain_unconverged_steps": v.unconverged,
        }

    def _plant_actuation_timeout_message(self) -> str:
        return (f"drives braked: no plant/actuation for "
                f"{self.plant.age_s(self.sim.time):.2f} s of simulated time "
                f"(plant_actuation_timeout_s {self.plant.timeout_s:g})")

    def on_track_command(self, msg: JointState, info: MessageInfo) -> None:
        if not self.command_age.admit_in_transit("track_command", info):
            return  # too old: nor does it keep the tracks alive (track_command_timeout_s)
        if self.config.undercarriage is not None:
            self._reject("track_command refused: this is a wheeled machine: drive it by "
                         "wheel_command (drive_mode kinematic: wheel speeds and steering "
                         "angles) or through the PLC (drive_mode plant)")
            return
        if self.plant_mode:
            self._reject("track_command refused: drive_mode is plant (the drive train moves "
                         "the base from plant/actuation); start sim_node with "
                         "drive_mode:=kinematic to drive the tracks by speed")
            return
        speeds = dict(zip(msg.name, msg.velocity, strict=False))
        unknown = sorted(set(msg.name) - set(TRACK_JOINTS))
        if unknown or len(msg.velocity) != len(msg.name):
            self._reject(f"track_command needs velocities [m/s] for {list(TRACK_JOINTS)}; got "
                         f"names {list(msg.name)} with {len(msg.velocity)} velocities")
            return
        left = speeds.get("track_left", 0.0)
        right = speeds.get("track_right", 0.0)
        if not self._scheduled(msg, ("track", left, right)):
            self._apply_track_speeds(left, right)   # counts as received when it is valid
        elif math.isfinite(left) and math.isfinite(right):
            self.track_timeout.received(self.sim.time)  # held for its stamp: the link is alive

    def on_wheel_command(self, msg: JointState, info: MessageInfo) -> None:
        """A kinematic wheeled machine's wheel speeds and steering angles (module doc)."""
        if not self.command_age.admit_in_transit("wheel_command", info):
            return  # too old: nor does it keep the wheels alive (track_command_timeout_s)
        wheels = self.sim.kinematic_wheels
        if wheels is None:
            self._reject("wheel_command refused: " + (
                "this machine runs on tracks: drive it by track_command"
                if self.config.undercarriage is None else
                "drive_mode is plant (the drive train moves the wheels from plant/actuation); "
                "start sim_node with drive_mode:=kinematic to drive the wheels by speed and "
                "angle"))
            return
        drives = [f"wheel_{w}" for w in wheels.drive_names]
        steers = [f"steer_{w}" for w in wheels.steer_names]
        names = list(msg.name)
        if (sorted(set(names)) != sorted(drives + steers) or len(names) != len(set(names))
                or (drives and len(msg.velocity) != len(names))
                or (steers and len(msg.position) != len(names))):
            self._reject(f"wheel_command needs velocity [m/s] of {drives} and position [rad] "
                         f"of {steers}, each once; got names {names} with "
                         f"{len(msg.velocity)} velocities and {len(msg.position)} positions")
            return
        index = {n: k for k, n in enumerate(names)}
        speeds = {n[6:]: float(msg.velocity[index[n]]) for n in drives}
        angles = {n[6:]: float(msg.position[index[n]]) for n in steers}
        if not self._scheduled(msg, ("wheel", speeds, angles)):
            self._apply_wheel_command(speeds, angles)
        elif all(math.isfinite(v) for v in (*speeds.values(), *angles.values())):
            self.track_timeout.received(self.sim.time)  # held for its stamp: the link is alive

    def _apply_wheel_command(self, speeds: dict[str, float], angles: dict[str, float]
                             ) -> None:
        try:
            self.sim.set_wheel_command(speeds, angles)
        except CommandError as exc:
            self._reject(f"wheel_command: {exc}")
            return
        self._track_speeds = (1.0, 1.0) if any(speeds.values()) else (0.0, 0.0)
        self._tracks_stopped_by_timeout = False
        self.track_timeout.received(self.sim.time)

    def on_terrain_patch(self, msg: Float64MultiArray) -> None:
        dims = [(d.label, d.size) for d in msg.layout.dim]
        if len(dims) != 2 or msg.layout.data_offset != 2:
            self._reject(f"soil/terrain_patch layout {dims} (data_offset "
                         f"{msg.layout.data_offset}): expected dims i, j and data_offset 2")
            return
        try:
            i0, j0, heights = flat_to_patch(dims[0][1], dims[1][1], msg.data)
            self.sim.terrain.set_region(i0, j0, heights)
        except HeightFieldError as exc:
            self._reject(f"soil/terrain_patch: {exc}")
            return
        self.terrain_patches += 1

    # --- stepping and outputs ------------------------------------------------------------
    def take_commands(self) -> None:
        """Every command waiting (joint_command, track_command, plant/actuation), oldest first,
        before the periods of a timer or clock call: rclpy's executor takes one per round,
        after the timer, so while this node steps bursts to catch up it would take them slower
        than they come and their age in its own queue would drop them (max_command_age_s)."""
        for subscription, callback in self._command_subs:
            for msg, info in take_waiting(subscription):
                callback(msg, info)

    def on_clock(self, msg: Clock) -> None:
        """follow_clock: step to the owner's time (whole periods; the first clock aligns)."""
        assert self.follower is not None
        self.take_commands()
        now = time.monotonic()
        clock_s = msg.clock.sec + 1e-9 * msg.clock.nanosec
        first = not self.follower.aligned
        plan = self.follower.plan(self.sim.time, clock_s)
        if plan.set_time_s is not None:
            self.sim.data.time = plan.set_time_s
        if first:  # the fleet's time starts here for this machine
            self._wall_start, self._sim_start = now, self.sim.time
            self.get_logger().info(f"following /clock from t={clock_s:.3f} s")
        elif self._clock_wall is not None and now - self._wall_start > _STARTUP_S:
            # how far behind the owner's clock the follower was (beyond one period) [s]
            lag = max(0.0, clock_s - self.sim.time - self.period_s)
            self.lag.add(lag)
            self._lag_since_status = max(self._lag_since_status, lag)
        self._clock_wall = now
        self._commands_checked = False
        for _ in range(plan.periods):
            self.step_period()
        if plan.periods and abs(self.sim.time - clock_s) < 0.5 * self.config.timestep:
            # exactly the owner's time (the two sums of timesteps differ in the last bits)
            self.sim.data.time = clock_s

    def tick(self) -> None:
        """Paced: the publish periods due by the wall clock (absolute schedule), at most
        ``_MAX_BURST`` per call; free run (real_time_factor 0): periods for a few ms, returning
        to the executor in between for commands."""
        self._commands_checked = False
        self.take_commands()
        if self.pacer is None:
            deadline = time.monotonic() + _FREE_RUN_SLICE_S
            while self.may_step():
                self.step_period()
                if time.monotonic() >= deadline:
                    return
            return
        now = time.monotonic()
        if self._paced_since is None:
            self._paced_since = now
        due = self.pacer.due(now, self.sim.time)
        for _ in range(min(due, _MAX_BURST)):
            if not self.may_step():
                break  # the soil's answer or the command steps it, or the next tick
            self.step_period()
        if due:
            now = time.monotonic()
            lag = self.pacer.lag(now, self.sim.time)
            if now - self._paced_since > _STARTUP_S:
                self.lag.add(lag)
                self._lag_since_status = max(self._lag_since_status, lag)

    def may_step(self) -> bool:
        """Whether the next period may step now: the soil answered the latest pose and the
        scheduled commands reached its start (each lockstep where on)."""
        now = time.monotonic()
        if not self.lockstep.may_step(now):
            if now - self._pose_sent_wall >= _POSE_RESEND_S:   # (_POSE_RESEND_S: why)
                self.twist_pub.publish(self._twist_msg)
                self.pose_pub.publish(self._pose_msg)
                self._pose_sent_wall = now
                self.poses_resent += 1
            return False
        return self.command_lockstep.may_step(self.sim.time, now)

    def step_period(self) -> None:
        """One publish period: the commands due by their stamp, the soil wrench if fresh (else
        none), the track command if fresh (else stop), physics, outputs."""
        for kind, a, b in self.schedule.due(self.sim.time):
            if kind == "joint":
                self._apply_joint_targets(a, b)  # type: ignore[arg-type]
            elif kind == "wheel":
                self._apply_wheel_command(a, b)  # type: ignore[arg-type]
            elif kind == "marker":
                continue  # a time marker: nothing to apply (on_joint_command)
            else:
                self._apply_track_speeds(a, b)  # type: ignore[arg-type]
        if not self._commands_checked:
            # once per burst: the periods of one burst run without the executor delivering
            # commands in between, so a command's age grows by the burst (a late simulation
            # catching up, a follower stepping to the clock) without any silence on the link
            self._commands_checked = True
            if self.plant_mode:
                if self.plant.check(self.sim.time):
                    self._brake_drives()
                    self.get_logger().warning(self._plant_actuation_timeout_message())
            elif self.track_timeout.expires(self.sim.time):
                self.stop_tracks()
        if self.soil is not None:
            self.step_soil()
        wrench = self.gate.for_period(self.sim.time + self.period_s)
        if wrench is not None:
            self.sim.apply_bucket_wrench(*wrench)
        self.sim.step(self.steps_per_publish)
        if self.sim.divergence_count != self._divergences_reported:
            self.report_divergence()
        self._periods += 1
        self.publish_state()
        if self._marker_thread is not None:
            d = self.sim.data
            self._geom_snapshot = (self.sim.time, d.geom_xpos.copy(), d.geom_xmat.copy())

    def step_soil(self) -> None:
        """In-process soil: the wrench for the bucket's pose and twist now, offered to the gate
        with this instant's stamp (age 0: it acts during the coming period)."""
        assert self.soil is not None
        pos, quat = self.sim.bucket_pose()
        lin, ang = self.sim.bucket_twist()
        stamp = _stamp(self.sim.time)
        result = self.soil.step(stamp, pos, quat, lin, ang)
        if result.rejected != self._soil_rejected:   # said when it starts, not every period
            self._soil_rejected = result.rejected
            if result.rejected:
                self._reject(result.rejected)
        if result.payload is not None:   # the load's mass on the bucket body (not in force)
            self._set_payload(result.payload)
        if result.force is not None and result.torque is not None:
            self.gate.offer(self.sim.time, result.force, result.torque, self.sim.time)
        if result.changed is not None and result.heights is not None:
            self._apply_soil_patch(result.changed, result.heights)

    def _set_payload(self, payload: BucketPayload) -> None:
        try:
            self.sim.set_bucket_payload(payload.mass_kg, payload.centre_m, payload.inertia_kg_m2)
        except CommandError as exc:
            self._reject(str(exc))

    def on_payload(self, msg: InertiaStamped) -> None:
        """soil_node's per-cell bucket soil as mass on the bucket body (held until replaced:
        it is the soil in the bucket, stale wrench or not). Valid or not, it completes the
        soil's answer of its stamp for the lockstep (the wrench of that stamp may be here)."""
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        if self._payload_stamp is None or stamp > self._payload_stamp:
            self._payload_stamp = stamp
        if not is_bucket_frame(msg.header.frame_id):
            self._reject(f"soil/bucket_payload in frame {msg.header.frame_id!r}: send it in "
                         "the bucket link's frame 'bucket'")
        else:
            self._set_payload(payload_from_message(msg))
        pending = self._answer_pending
        if pending is not None and stamp >= pending - 1e-9:
            self._answer_pending = None
            self._answered(pending)

    def _apply_soil_patch(self, box: tuple[int, int, int, int], heights: np.ndarray) -> None:
        try:
            self.sim.terrain.set_region(box[0], box[2], heights)
        except HeightFieldError as exc:
            self._reject(f"in-process soil: the soil grid does not fit the height field "
                         f"(terrain.* parameters): {exc}")
            return
        self.terrain_patches += 1

    def publish_state(self) -> None:
        # Messages are built once and refilled: at real_time_factor 0 this runs thousands of
        # times per second and message construction would cost more than the physics.
        sim = self.sim
        stamp = self._clock_msg.clock
        ns = round(sim.time * 1e9)
        stamp.sec, stamp.nanosec = ns // 1_000_000_000, ns % 1_000_000_000
        if self.clock_pub is not None:
            self.clock_pub.publish(self._clock_msg)
        js = sim.joint_state()
        msg = self._joint_msg
        msg.header.stamp = stamp
        msg.position = js.positions.tolist()
        msg.velocity = js.velocities.tolist()
        self.joint_pub.publish(msg)
        # twist first: the soil node uses the latest twist when the pose arrives
        lin, ang = sim.bucket_twist()
        twist = self._twist_msg
        twist.header.stamp = stamp
        twist.twist.linear.x, twist.twist.linear.y, twist.twist.linear.z = lin.tolist()
        twist.twist.angular.x, twist.twist.angular.y, twist.twist.angular.z = ang.tolist()
        self.twist_pub.publish(twist)
        pos, quat = sim.bucket_pose()
        pose = self._pose_msg
        pose.header.stamp = stamp
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = pos.tolist()
        o = pose.pose.orientation
        o.w, o.x, o.y, o.z = quat.tolist()
        self.pose_pub.publish(pose)
        self.publish_imu(stamp)
        if self.sensors_pub is not None:
            self.publish_sensors(stamp)
        self.lockstep.published(stamp.sec + 1e-9 * stamp.nanosec)
        self._pose_sent_wall = time.monotonic()

    def publish_imu(self, stamp: Time) -> None:
        """``imu`` when someone reads it (the plant link of the closed loop, a user's
        estimator): without a subscriber the reading (the ground plane under the footprint,
        rates by difference: ~10 % of a period's Python work, issue 32) is not computed."""
        if self.imu_pub.get_subscription_count() == 0:
            self.sim.forget_imu()
            return
        reading = self.sim.imu()
        msg = self._imu_msg
        msg.header.stamp = stamp
        o = msg.orientation
        o.w, o.x, o.y, o.z = reading.orientation
        a = msg.angular_velocity
        a.x, a.y, a.z = reading.angular_velocity
        f = msg.linear_acceleration
        f.x, f.y, f.z = reading.linear_acceleration
        self.imu_pub.publish(msg)

    def publish_sensors(self, stamp: Time) -> None:
        """plant/sensors: what the machine's sensors measure (the contract of issue 27)."""
        assert self.sensors_pub is not None
        if self.sim.wheeled is not None:
            msg = self._sensors_msg
            msg.header.stamp = stamp
            _, msg.position, msg.velocity, msg.effort = wheeled_sensor_arrays(
                self.sim.wheeled, bool(self.plant.fault))
            self.sensors_pub.publish(msg)
            return
        v = self.sim.drivetrain
        assert v is not None
        left, right = v.tracks
        nan = math.nan
        msg = self._sensors_msg
        msg.header.stamp = stamp
        msg.position = [left.travel_m, right.travel_m, nan, 0.0 if self.plant.fault else 1.0,
                        1.0 if self.plant.fault else 0.0, 1.0 if left.braked else 0.0]
        msg.velocity = [left.speed_m_s, right.speed_m_s, v.ground_speed_m_s, nan, nan, nan]
        msg.effort = [left.torque_nm, right.torque_nm, nan, nan, nan, nan]
        self.sensors_pub.publish(msg)

    def stop_tracks(self) -> None:
        """The latest track (or wheel) command timed out: stop the tracks, or the wheels with
        the steering held (WARN while they were moving)."""
        if self.config.undercarriage is not None:
            self.sim.stop_wheels()
        else:
            self.sim.set_track_speeds(0.0, 0.0)
        if any(v != 0.0 for v in self._track_speeds):
            self._tracks_stopped_by_timeout = True
            self.get_logger().warning(self._track_timeout_message())
        self._track_speeds = (0.0, 0.0)

    def _track_timeout_message(self) -> str:
        if self.config.undercarriage is not None:
            return (f"wheels stopped: no wheel_command for "
                    f"{self.track_timeout.age_s(self.sim.time):.2f} s of simulated time "
                    f"(track_command_timeout_s {self.track_timeout.timeout_s:g})")
        return (f"tracks stopped: no track_command for "
                f"{self.track_timeout.age_s(self.sim.time):.2f} s of simulated time "
                f"(track_command_timeout_s {self.track_timeout.timeout_s:g})")

    def _make_markers(self) -> tuple[MarkerArray, list[int]]:
        """One marker per machine geom (built once; poses updated on publish)."""
        m = self.sim.model
        out, geoms = MarkerArray(), []
        for gid in range(m.ngeom):
            if int(m.geom_type[gid]) not in _MARKER_TYPES or m.geom_bodyid[gid] == 0:
                continue
            marker = Marker()
            marker.header.frame_id = WORLD
            marker.ns = "excavator"
            marker.id = gid
            marker.type = _MARKER_TYPES[int(m.geom_type[gid])]
            marker.action = Marker.ADD
            size = m.geom_size[gid]
            if marker.type == Marker.CUBE:
                marker.scale.x, marker.scale.y, marker.scale.z = (2.0 * size).tolist()
            else:  # capsule drawn as a cylinder of its radius and segment length
                marker.scale.x = marker.scale.y = 2.0 * float(size[0])
                marker.scale.z = 2.0 * float(size[1])
            r, g, b, a = m.geom_rgba[gid].tolist()
            marker.color.r, marker.color.g, marker.color.b, marker.color.a = r, g, b, a
            out.markers.append(marker)
            geoms.append(gid)
        return out, geoms

    def _start_marker_thread(self) -> None:
        # Markers are for people watching RViz: paced by the wall clock, not sim time, and
        # built off the control path.
        self._marker_thread = threading.Thread(target=self._marker_loop, name="sim_markers",
                                               daemon=True)
        self._marker_thread.start()

    def _marker_loop(self) -> None:
        realtime.name_thread("sim_markers")
        next_due = time.monotonic()
        while not self._stop.wait(max(0.0, next_due - time.monotonic())):
            rate = self.marker_rate  # marker_rate_hz: changeable at run time; 0 = paused
            period = 1.0 / rate if rate > 0 else 0.5
            next_due = max(next_due + period, time.monotonic() - period)
            if rate <= 0:
                continue
            try:
                self.publish_markers()
            except Exception as exc:  # noqa: BLE001 - rclpy shutting down under the thread
                if not self._stop.is_set() and self.context.ok():  # not shutting down
                    self.get_logger().error(f"marker publish failed: {exc}")
                return

    def publish_markers(self) -> None:
        snapshot = self._geom_snapshot
        if snapshot is None:
            return
        t, xpos, xmat = snapshot
        stamp = _stamp(t)
        markers, geoms = self._markers
        quat = np.zeros(4)
        for marker, gid in zip(markers.markers, geoms, strict=True):
            marker.header.stamp = stamp
            p = marker.pose.position
            p.x, p.y, p.z = xpos[gid].tolist()
            mujoco.mju_mat2Quat(quat, xmat[gid])
            o = marker.pose.orientation
            o.w, o.x, o.y, o.z = quat.tolist()
        self.marker_pub.publish(markers)

    def destroy_node(self) -> None:
        # also called by rclpy's context clean-up on a node whose constructor failed
        if hasattr(self, "_stop"):
            self._stop.set()
        thread = getattr(self, "_marker_thread", None)
        if thread is not None and thread.is_alive():
            thread.join(5.0)
        soil = getattr(self, "soil", None)
        if soil is not None:
            soil.close()
        super().destroy_node()

    def timing_values(self) -> dict[str, str | int]:
        """Pacing and coupling figures for /diagnostics (ms of wall time for lag, ms of sim
        time for wrench ages; NaN before there is a sample)."""
        lag50, lag99, lagmax = (1e3 * v for v in self.lag.percentiles())
        age50, age99, agemax = (1e3 * v for v in self.gate.arrival_age.percentiles())
        pacer = self.pacer
        return {
            "real_time_factor_target": f"{self.config.real_time_factor:g}",
            "lag_ms_p50": f"{lag50:.2f}", "lag_ms_p99": f"{lag99:.2f}",
            "lag_ms_max": f"{lagmax:.2f}",
            "lag_ms_max_since_start": f"{1e3 * max(self.lag.max_ever, 0.0):.2f}",
            "slipped_s": f"{pacer.slipped_s if pacer else self._follow_slipped():.3f}",
            "periods": self._periods,
            "wrench_age_ms_p50": f"{age50:.2f}", "wrench_age_ms_p99": f"{age99:.2f}",
            "wrench_age_ms_max": f"{agemax:.2f}",
            "wrench_age_ms_max_since_start": f"{1e3 * self.gate.arrival_age.max_ever:.2f}"
            if self.gate.received else "nan",
            "wrenches_received": self.gate.received,
            "wrenches_stale_on_arrival": self.gate.stale_on_arrival,
            "wrench_applied_periods": self.gate.applied_periods,
            "wrench_stale_periods": self.gate.stale_periods,
            "max_wrench_age_ms": f"{1e3 * self.gate.max_age_s:g}",
            "commands_held": self.schedule.held,
            "commands_pending": self.schedule.pending,
            "commands_past_stamp": self.schedule.past_stamp,
            "command_late_ms_max": f"{1e3 * self.schedule.max_late_s:.2f}",
            "commands_beyond_lead": self.unschedulable,
            "command_markers": self.markers,
            "command_markers_late": self.markers_late,
            **self.command_age.counters(),
            **self.lockstep.values(),
            "soil_poses_resent": self.poses_resent,
            **self.command_lockstep.values(),
        }

    def _follow_slipped(self) -> float:
        return self.follower.slipped_s if self.follower is not None else 0.0

    def report_divergence(self) -> None:
        """The core undid a diverged physics step (``ExcavatorSimulation.step``): ERROR on
        /diagnostics with the cause and what was dropped; the state published is the restored
        good one."""
        self._divergences_reported = self.sim.divergence_count
        if self._divergence_in_period:
            return  # one report per status period: a persistent fault must not flood
        self._divergence_in_period = True
        d = self.sim.divergences[-1]
        message = (f"simulation diverged at t={d.time_s:.3f} s: {d.cause}; restored the last "
                   f"good state" + (f", dropped {d.dropped}" if d.dropped else ""))
        self.get_logger().error(message)
        self.diagnostics.publish(ERROR, message, {"divergences": self.sim.divergence_count,
                                                  "sim_time_s": f"{self.sim.time:.3f}"})

    def publish_status(self) -> None:
        wall = time.monotonic() - self._wall_start
        rtf = (self.sim.time - self._sim_start) / wall if wall > 0 else 0.0
        residual = self.sim.constraint_residual()
        problems = []
        if residual >= 1e-3:
            problems.append(f"loop residual {residual:.2e} m > 1 mm")
        worst, self._lag_since_status = self._lag_since_status, -math.inf
        if worst > self.lag_warn_s:
            behind = ("behind /clock (follow_clock" if self.follower is not None else
                      f"behind the wall clock (real_time_factor "
                      f"{self.config.real_time_factor:g}")
            problems.append(f"cannot keep up: {1e3 * worst:.0f} ms {behind}, warn above "
                            f"{1e3 * self.lag_warn_s:.0f} ms)")
        stale, self._stale_at_status = (self.gate.stale_periods - self._stale_at_status,
                                        self.gate.stale_periods)
        if self._tracks_stopped_by_timeout:
            problems.append(self._track_timeout_message())
        if self.plant_mode and self.plant.timed_out and not self.plant.fault:
            problems.append(self._plant_actuation_timeout_message())
        if self.follower is not None and (self._clock_wall is None
                                          or time.monotonic() - self._clock_wall > 1.0):
            problems.append("waiting for /clock (follow_clock: the fleet's clock owner, a "
                            "sim_node with use_sim_time true, steps this one)")
        if self.lockstep.detached:
            problems.append(f"soil lockstep: no soil/wrench for the latest bucket_pose within "
                            f"{self.lockstep.timeout_s:g} s (soil_lockstep_timeout_s); stepping "
                            "without waiting until soil_node answers again")
        if self.command_lockstep.detached:
            problems.append(f"command lockstep: no command stamped at or after the simulated "
                            f"time within {self.command_lockstep.timeout_s:g} s "
                            "(command_lockstep_timeout_s); stepping without waiting until a "
                            "scheduled command arrives again")
        dropped = self.command_age.refused_since_status()
        if dropped:
            problems.append(f"{dropped} commands dropped as older than max_command_age_s "
                            f"{self.command_age.rule.max_age_s:g} s")
        if stale:
            problems.append(f"soil wrench late: {stale} periods without soil force (older "
                            f"than {1e3 * self.gate.max_age_s:g} ms)")
        values = {"sim_time_s": f"{self.sim.time:.3f}", "achieved_real_time_factor": f"{rtf:.2f}",
                  **self.timing_values(),
                  "loop_residual_m": f"{residual:.2e}", "rejected": self.rejections.count,
                  "terrain_patches": self.terrain_patches,
                  "bucket_payload_kg": f"{self.sim.payload_kg:.1f}",
                  "last_error": self.rejections.last,
                  **{f"target_{n}": f"{v:.4f}" for n, v in self.sim.targets.items()}}
        values["divergences"] = self.sim.divergence_count
        values["clock"] = _clock_mode(self.publishes_clock, self.follower is not None)
        values["track_command_age_s"] = f"{self.track_timeout.age_s(self.sim.time):.3f}"
        values["track_command_timeouts"] = self.track_timeout.expiries
        if self.soil is not None:
            values.update(self.soil.counters())
        values.update(self._plant_values())
        # "running" whatever the level: monitors key on it; the problems follow it.
        level = WARN if problems else OK
        if self.plant_mode and self.plant.fault:   # a drive fault: ERROR until a valid one
            level = ERROR
            problems.insert(0, f"drive fault: {self.plant.fault}; drives braked until a valid "
                               "plant/actuation")
        message = "running" + (f": {'; '.join(problems)}" if problems else "")
        if self._divergence_in_period:  # stays ERROR for the status period it happened in
            self._divergence_in_period = False
            d = self.sim.divergences[-1]
            level, message = ERROR, f"simulation diverged at t={d.time_s:.3f} s: {d.cause}"
        self.diagnostics.publish(level, message, values)


def _clock_mode(publishes: bool, follows: bool) -> str:
    if follows:
        return "/clock followed (follow_clock)"
    return "/clock on (use_sim_time)" if publishes else "/clock off (use_sim_time false)"


USAGE = NodeUsage(
    "sim_node", "The MuJoCo excavator: applies joint and track commands, takes the soil's "
    "force, publishes the joint states, the bucket's pose and twist, the clock and the URDF.",
    subscribes=("joint_command, track_command (sensor_msgs/JointState)",
                "wheel_command (sensor_msgs/JointState, a wheeled machine's wheel speeds [m/s] "
                "and steering angles [rad], drive_mode kinematic)",
                "soil/wrench (geometry_msgs/WrenchStamped)",
                "soil/bucket_payload (geometry_msgs/InertiaStamped)",
                "soil/terrain_patch (std_msgs/Float64MultiArray)",
                "plant/actuation (sensor_msgs/JointState, the PLC's drives and steering, "
                "drive_mode plant)",
                "/clock (with follow_clock)"),
    publishes=("joint_states (sensor_msgs/JointState)", "bucket_pose (geometry_msgs/PoseStamped)",
               "bucket_twist (geometry_msgs/TwistStamped)",
               "markers (visualization_msgs/MarkerArray)", "robot_description (std_msgs/String)",
               "plant/sensors (sensor_msgs/JointState, the drives' sensors)",
               "imu (sensor_msgs/Imu)", "/clock (with use_sim_time)", "/diagnostics"),
    params_file="sim.yaml", docs="docs/simulation.md")


def main(args: list[str] | None = None) -> int:
    """Console entry point (``ros2 run excavator_hil sim_node``)."""
    return run_node(SimNode, args, usage=USAGE)


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
