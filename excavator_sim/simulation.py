"""The excavator simulation core (no ROS): joint targets in, MuJoCo physics, states out.

Control structure (why: many MuJoCo steps per Python call, see docs/simulation.md):

- MuJoCo holds each cylinder with an ``intvelocity`` actuator (see :mod:`hydraulics`): the
  control is the valve's rod speed [m/s], bounded by the pump flow; force bounded by pressure.
- An outer position loop runs every ``control_period`` (10 ms by default) in Python: it maps the
  joint targets to cylinder extensions with the closed-form linkage and commands the valve speed
  ``clip(gain * error, flow limits)``, tapered so the axis can stop within its acceleration
  limit. Because the error is measured on the rod, not on the held setpoint, the loop also
  removes the oil column's static compression: zero drift in a hold.
- Between two control updates ``mujoco.mj_step(model, data, n)`` runs n physics steps in C.
- The base (planar joints ``base_x``, ``base_y``, ``base_yaw``) is driven, per
  ``drive_mode``: ``kinematic``, at the skid-steer velocities of :meth:`set_track_speeds`;
  ``plant``, by the drive train (:mod:`excavator_sim.drivetrain`: hydrostatic drives,
  Janosi-Hanamoto traction, grade from the terrain, the bucket's soil force) under
  :meth:`set_drive_command`, stepped once per control period; the base's servos then follow
  its pose.
- A wheeled machine (``SimConfig.undercarriage``, a machine preset's, issue 28): in ``plant``
  mode the wheeled drive train (:mod:`excavator_sim.drivetrain.wheeled`: wheel drives, brakes,
  rate-limited steering, brush-model tyres) moves the base under :meth:`set_wheeled_command`;
  in ``kinematic`` mode its wheels follow wheel speeds and steering angles
  (:meth:`set_wheel_command`, :mod:`excavator_sim.drivetrain.wheeled_kinematic`: the model's
  direct kinematics, no forces). Either way the model's wheel and steering joints are set from
  it every period (they show the machine).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from excavator_kinematics.errors import KinematicsError
from excavator_kinematics.forward_kinematics import ForwardKinematics
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_sim.drivetrain.grade import attitude, ground_normal
from excavator_sim.drivetrain.implicit_step import ExternalLoad
from excavator_sim.drivetrain.imu import ImuReading, imu_reading, specific_force
from excavator_sim.drivetrain.soil import TractionSoil
from excavator_sim.drivetrain.vehicle import (
    SAFE_COMMAND,
    DriveCommand,
    Ground,
    TrackedVehicle,
)
from excavator_sim.drivetrain.wheeled import (
    SAFE_WHEELED_COMMAND,
    WHEELS,
    WheeledCommand,
    WheeledGround,
    WheeledVehicle,
)
from excavator_sim.drivetrain.wheeled_kinematic import KinematicWheels
from excavator_sim.errors import CommandError, SimConfigError
from excavator_sim.heightfield import HeightField
from excavator_sim.hydraulics import (
    BASE_ACTUATORS,
    CYLINDER_ACCEL_M_S2,
    CYLINDER_ACTUATORS,
    SWING_BRAKE_SHARE,
    SWING_STOP_SPEED_RAD_S,
    damper_name,
    reference_step,
    swing_stop,
)
from excavator_sim.model_builder import (
    ACTIVE_JOINTS,
    BASE_JOINTS,
    CYLINDER_JOINTS,
    PASSIVE_JOINTS,
    BuiltModel,
    ModelOptions,
    build_model,
    loop_residuals,
    wheel_joint_names,
)
from excavator_sim.plausibility import STATE_SPEED_FACTOR, MachineEnvelope, fmt_vector
from excavator_sim.sim_config import SimConfig, load_sim_config

TRACK_JOINTS = ("track_left", "track_right")
# Every joint of joint_state(), in this order: every movable joint of the URDF (the base's planar
# joints included, so robot_state_publisher can pose the machine in world) plus the tracks.
STATE_JOINTS = (*ACTIVE_JOINTS, *CYLINDER_JOINTS, *TRACK_JOINTS, *PASSIVE_JOINTS, *BASE_JOINTS)
# Time constant [s] of the filter on the loop closures' compliance (see _compliance_offsets).
COMPLIANCE_FILTER_S = 0.1
COMPLIANCE_REFRESH_S = 0.04  # [s] how often the compliance offsets are measured
# MuJoCo's own divergence warnings: each resets mjData (time to 0) when it fires.
_DIVERGENCE_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS,
                        mujoco.mjtWarning.mjWARN_BADQVEL)
_STATE = mujoco.mjtState.mjSTATE_INTEGRATION
GRAVITY_M_S2 = 9.81   # the model's (model_builder: option.gravity)
DRIVE_MODES = ("kinematic", "plant")


def model_options(config: SimConfig) -> ModelOptions:
    """The model builder's options for a simulation configured by ``config``."""
    return ModelOptions(hydraulics=config.hydraulics, terrain=config.terrain,
                        terrain_contact=config.terrain_contact, initial=config.initial,
                        timestep=config.timestep,
                        wheels=(config.undercarriage.params if config.undercarriage is not None
                                else None))


def state_joints(config: SimConfig) -> tuple[str, ...]:
    """The joints of :meth:`ExcavatorSimulation.joint_state` for a machine so configured:
    ``STATE_JOINTS``, a wheeled machine's wheels (``wheel_<w>``) and steering joints
    (``steer_<w>``) in place of the tracks."""
    if config.undercarriage is None:
        return STATE_JOINTS
    wheels, steers = wheel_joint_names(config.undercarriage.params)
    return (*ACTIVE_JOINTS, *CYLINDER_JOINTS, *wheels, *steers, *PASSIVE_JOINTS, *BASE_JOINTS)


@dataclass(frozen=True)
class Divergence:
    """One detected divergence of the physics, undone: what was seen and what was dropped."""

    time_s: float  # simulated time at which it was detected (the clock kept running) [s]
    cause: str
    dropped: str  # the input dropped with it ("" if none was active)


@dataclass(frozen=True)
class JointStateSnapshot:
    """Names, positions and velocities of every published joint (units per name, see
    :meth:`ExcavatorSimulation.joint_state`)."""

    names: tuple[str, ...]
    positions: np.ndarray
    velocities: np.ndarray

    def as_dict(self) -> dict[str, tuple[float, float]]:
        return {n: (float(p), float(v)) for n, p, v in
                zip(self.names, self.positions, self.velocities, strict=True)}


class ExcavatorSimulation:
    """One simulated excavator: MuJoCo model + hydraulic position control + terrain."""

    def __init__(self, config: SimConfig | None = None,
                 geometry: ExcavatorGeometry | None = None):
        self.config = config if config is not None else load_sim_config()
        self.geometry = geometry if geometry is not None else default_geometry()
        self.linkage = Linkage(self.geometry)
        self.fk = ForwardKinematics(self.geometry, self.linkage)
        c = self.config
        options = model_options(c)
        try:
            self.built: BuiltModel = build_model(self.geometry, self.linkage, options,
                                                 c.hydraulics.tracks.track_width_m)
        except KinematicsError as exc:
            raise SimConfigError(f"initial pose rejected: {exc}; set initial.boom_rad, "
                                 "initial.arm_rad, initial.bucket_rad within the limits") from exc
        self.model = self.built.model
        self.data = mujoco.MjData(self.model)
        mujoco.mj_resetDataKeyframe(self.model, self.data, 0)
        self.terrain = HeightField(self.model, c.terrain)  # build_model filled it flat
        mujoco.mj_forward(self.model, self.data)

        b = self.built
        self.state_joints = state_joints(c)
        # a wheeled machine's wheel and steering joints (set from its drive train)
        self._wheel_joints: tuple[tuple[str, ...], tuple[str, ...]] = (
            wheel_joint_names(c.undercarriage.params) if c.undercarriage is not None
            else ((), ()))
        self._q_adr = {n: b.qpos_adr[n] for n in (*ACTIVE_JOINTS, *CYLINDER_JOINTS,
                                                   *PASSIVE_JOINTS, *BASE_JOINTS,
                                                   *self._wheel_joints[0],
                                                   *self._wheel_joints[1])}
        self._v_adr = {n: b.dof_adr[n] for n in self._q_adr}
        joints = self.state_joints
        in_mujoco = [k for k, n in enumerate(joints) if n not in TRACK_JOINTS]
        self._state_mj = np.array(in_mujoco)
        self._state_qadr = np.array([self._q_adr[joints[k]] for k in in_mujoco])
        self._state_vadr = np.array([self._v_adr[joints[k]] for k in in_mujoco])
        self._state_tracks = np.array([joints.index(n) for n in TRACK_JOINTS if n in joints])
        self._wheel_state = np.array([joints.index(n) for n in self._wheel_joints[0]], dtype=int)
        self._steer_state = np.array([joints.index(n) for n in self._wheel_joints[1]], dtype=int)
        self._wheel_qadr = [self._q_adr[n] for n in (*self._wheel_joints[0],
                                                     *self._wheel_joints[1])]
        self._wheel_vadr = [self._v_adr[n] for n in (*self._wheel_joints[0],
                                                     *self._wheel_joints[1])]
        self._act = {n: b.actuator_id[n] for n in (*CYLINDER_ACTUATORS, "swing",
                                                   *BASE_ACTUATORS)}
        # The valves' damping actuators take the same speed command as their cylinders.
        self._dampers = {self._act[n]: b.actuator_id[damper_name(n)]
                         for n in CYLINDER_ACTUATORS if damper_name(n) in b.actuator_id}
        self._act_state = {n: int(self.model.actuator_actadr[self._act[n]])
                           for n in (*CYLINDER_ACTUATORS, "swing")}
        self._bucket_body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "bucket")
        # the bucket's own mass properties (the payload adds to them) and its ancestors (their
        # subtree masses change with it)
        b = self._bucket_body
        self._bucket_mass0 = (float(self.model.body_mass[b]), self.model.body_ipos[b].copy(),
                              self.model.body_inertia[b].copy(), self.model.body_iquat[b].copy())
        chain, k = [], b
        while True:
            chain.append(k)
            if k == 0:
                break
            k = int(self.model.body_parentid[k])
        self._bucket_chain = np.array(chain)
        self._bucket_subtree0 = self.model.body_subtreemass[self._bucket_chain].copy()
        self.payload_kg = 0.0
        self._payload_set: tuple[float, np.ndarray, np.ndarray] | None = None
        self._base_body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "caterpillar")
        self._steps_per_control = max(1, round(c.control_period / c.timestep))

        # Setpoints: the configured initial pose (the keyframe rests there, its rods at these
        # joints' extensions, pre-loaded for gravity: model_builder.preload_cylinders).
        self._targets = {n: float(getattr(c.initial, n)) for n in ACTIVE_JOINTS}
        # Swing targets moved to where the house stops (inside its stopping distance): a count,
        # and the command so replaced (sent again unchanged, it stays replaced: the lever is
        # still where it was; a new value is a new command).
        self.swing_stops = 0
        self._swing_released: float | None = None
        self._swing_braking = 0.0  # direction [+-1] of a released house still braking, else 0
        self._swing_check = False  # a neutral-lever swing command awaits its stopping check
        self._speed_caps: dict[str, float] = {}
        self._axis_targets = self._axis_targets_from_joints(self._targets)
        # Loop-closure compliance: rod extension minus the rigid linkage's extension at the
        # measured joint angles, low-pass filtered; the rods are steered to target + this, so the
        # joints (not only the rods) reach their targets (near the bucket's toggle 0.2 mm of
        # rod is 0.4 deg).
        self._compliance = self._compliance_offsets()
        self._compliance_wait = COMPLIANCE_REFRESH_S
        self._reference = {a: (float(self.data.qpos[self._q_adr[a]]), 0.0)
                           for a in (*CYLINDER_ACTUATORS, "swing")}
        self._track_speeds = (0.0, 0.0)
        self._track_travel = np.zeros(2)
        self._wrench = np.zeros(6)
        self._wrench_active = False
        # Per base axis: (actuator, qpos adr, dof adr, act adr, ctrl lo/hi, force limit, kp, kv)
        self._base_axes: list[tuple[int, int, int, int, float, float, float, float, float]] = []
        for a in BASE_ACTUATORS:
            ctrl_lo, ctrl_hi = (float(x) for x in self.model.actuator_ctrlrange[self._act[a]])
            self._base_axes.append(
                (self._act[a], self._q_adr[a], self._v_adr[a],
                 int(self.model.actuator_actadr[self._act[a]]), ctrl_lo, ctrl_hi,
                 float(self.model.actuator_forcerange[self._act[a], 1]),
                 float(self.model.actuator_gainprm[self._act[a], 0]),
                 -float(self.model.actuator_biasprm[self._act[a], 2])))
        m = self.model
        # Per axis: (name, actuator, qpos adr, dof adr, act adr, ctrl lo/hi, force lo/hi, kp, kv)
        self._axes: list[tuple[str, int, int, int, int, float, float, float, float, float,
                               float]] = []
        for a in (*CYLINDER_ACTUATORS, "swing"):
            ctrl_lo, ctrl_hi = (float(x) for x in m.actuator_ctrlrange[self._act[a]])
            force_lo, force_hi = (float(x) for x in m.actuator_forcerange[self._act[a]])
            self._axes.append((a, self._act[a], self._q_adr[a], self._v_adr[a],
                               self._act_state[a], ctrl_lo, ctrl_hi, force_lo, force_hi,
                               float(m.actuator_gainprm[self._act[a], 0]),
                               -float(m.actuator_biasprm[self._act[a], 2])))
        # Swing acceleration limit from the torque limit and the upper structure's inertia.
        m_full = np.zeros((self.model.nv, self.model.nv))
        mujoco.mj_fullM(self.model, self.data, m_full)
        swing_inertia = float(m_full[self._v_adr["swing"], self._v_adr["swing"]])
        self._swing_accel = 0.5 * c.hydraulics.swing.torque_limit_nm / swing_inertia
        self.swing_inertia_kg_m2 = swing_inertia
        # The swing's inertia changes with the front's pose and the bucket's load: its diagonal
        # element of the mass matrix (mj_step's, current) sets the swing's acceleration and
        # braking every control period ("Swing drive", docs/simulation.md).
        v_swing = self._v_adr["swing"]
        self._swing_madr = int(self.model.M_rowadr[v_swing] + self.model.M_rownnz[v_swing] - 1)

        # The drive train (drive_mode plant): its mass and yaw inertia are the MuJoCo model's
        # (the whole machine on the base's planar joints, updated every period as the front
        # and the upper structure move).
        if c.drive_mode not in DRIVE_MODES:
            raise SimConfigError(f"drive_mode {c.drive_mode!r} is not one of {DRIVE_MODES}")
        self.drive_mode = c.drive_mode
        self.drivetrain: TrackedVehicle | None = None    # a tracked machine's (plant)
        self.wheeled: WheeledVehicle | None = None       # a wheeled machine's (always plant)
        self.vehicle: TrackedVehicle | WheeledVehicle | None = None   # whichever moves it
        self._drive_command = SAFE_COMMAND
        self._wheeled_command = SAFE_WHEELED_COMMAND
        self._ground: Ground | None = None
        self._wheeled_ground: WheeledGround | None = None
        self._attitude_before = np.eye(3)
        self._imu_memory: tuple[float, np.ndarray, np.ndarray] | None = None
        # a wheeled machine in drive_mode kinematic: its wheels follow set_wheel_command
        self.kinematic_wheels: KinematicWheels | None = None
        if c.undercarriage is not None and c.drive_mode != "plant":
            self.kinematic_wheels = KinematicWheels(c.undercarriage)
        elif c.undercarriage is not None:
            mass, inertia = self.base_inertia()
            init = c.initial
            self.wheeled = self.vehicle = WheeledVehicle(
                c.undercarriage.params, mass, inertia, x=init.base_x, y=init.base_y,
                yaw=init.base_yaw)
            self._wheeled_ground = self.wheeled_ground_under(init.base_x, init.base_y,
                                                             init.base_yaw)
            self._attitude_before = self._wheeled_ground.attitude
        elif c.drive_mode == "plant":
            if c.drivetrain is None:
                raise SimConfigError("drive_mode plant needs the drive train's parameters "
                                     "(SimConfig.drivetrain: load the config with "
                                     "excavator_sim.sim_config)")
            mass, inertia = self.base_inertia()
            init = c.initial
            self.drivetrain = self.vehicle = TrackedVehicle(
                c.drivetrain.params, mass, inertia, x=init.base_x, y=init.base_y,
                yaw=init.base_yaw)
            self._ground = self.ground_under(init.base_x, init.base_y, init.base_yaw)
            self._attitude_before = self._ground.attitude

        # Plausibility (what the machine can do) and the state guard (see _check_state).
        self.envelope = MachineEnvelope.from_machine(self.geometry, c.hydraulics, self.linkage)
        hinge = self.model.jnt_type[self.model.dof_jntid] == mujoco.mjtJoint.mjJNT_HINGE
        slide_limit, hinge_limit = self.envelope.state_speed_limits
        self._qvel_limit = np.where(hinge, hinge_limit, slide_limit)
        self._good_state = np.empty(mujoco.mj_stateSize(self.model, _STATE))
        mujoco.mj_getState(self.model, self.data, self._good_state, _STATE)
        self.divergences: deque[Divergence] = deque(maxlen=100)  # the latest ones
        self.divergence_count = 0  # all of them
        self._consecutive_divergences = 0

    # --- properties ----------------------------------------------------------------------
    @property
    def time(self) -> float:
        """Simulated time [s]."""
        return float(self.data.time)

    @property
    def timestep(self) -> float:
        return float(self.model.opt.timestep)

    @property
    def targets(self) -> dict[str, float]:
        """The last accepted joint targets [rad]."""
        return dict(self._targets)

    def speed_limits(self) -> dict[str, tuple[float, float]]:
        """(retract, extend) speed limits [m/s] per cylinder, (-, +) [rad/s] for the swing."""
        out = {}
        for n in (*CYLINDER_ACTUATORS, "swing"):
            lo, hi = self.model.actuator_ctrlrange[self._act[n]]
            out[n] = (float(-lo), float(hi))
        return out

    # --- commands ------------------------------------------------------------------------
    def set_joint_targets(self, positions: Mapping[str, float],
                          velocities: Mapping[str, float] | None = None) -> None:
        """Accept position targets [rad] for any of swing/boom/arm/bucket (others keep theirs).

        ``velocities`` [rad/s], optional, cap each named joint's approach speed (magnitude) on
        top of the hydraulic limits. Raises :class:`CommandError` on NaN, an unknown name or a
        target outside the linkage limits; the previous setpoint is then kept unchanged.
        """
        new = dict(self._targets)
        for name, value in positions.items():
            if name not in ACTIVE_JOINTS:
                raise CommandError(f"unknown joint {name!r} in the command: expected names "
                                   f"among {list(ACTIVE_JOINTS)}")
            v = float(value)
            if not math.isfinite(v):
                raise CommandError(f"{name} target is {v}: targets must be finite numbers [rad]")
            new[name] = v
        # A rate-mode command (teleop: positions with velocities) whose swing speed is 0 is the
        # swing lever in neutral: checked against the stopping distance (_update_controls).
        # Sent again unchanged it stays released; a position-only command is a target to reach.
        neutral = ("swing" in positions and velocities is not None
                   and float(velocities.get("swing", math.nan)) == 0.0)
        if "swing" in positions:
            if neutral and new["swing"] == self._swing_released:
                new["swing"] = self._targets["swing"]  # the same released command: held stop
            else:
                self._swing_check = neutral and new["swing"] != self._targets["swing"]
                if self._swing_released is not None:
                    self._swing_released = None  # a new command: the drive follows it again
                    if self._swing_braking != 0.0:
                        self._swing_braking = 0.0
                        d = self.data
                        self._reference["swing"] = (float(d.qpos[self._q_adr["swing"]]),
                                                    float(d.qvel[self._v_adr["swing"]]))
        lo, hi = self.geometry.swing_limits_rad
        if not lo <= new["swing"] <= hi:
            raise CommandError(f"swing target {new['swing']:.6g} rad outside {lo:.3f}..{hi:.3f}"
                               " rad (swing.limits_rad in config/excavator.yaml)")
        try:
            self.linkage.check_joints(new["boom"], new["arm"], new["bucket"])
        except KinematicsError as exc:
            raise CommandError(f"{exc}; the previous setpoint is kept") from exc
        caps: dict[str, float] = {}
        for name, value in (velocities or {}).items():
            if name not in ACTIVE_JOINTS:
                raise CommandError(f"unknown joint {name!r} in the velocities: expected names "
                                   f"among {list(ACTIVE_JOINTS)}")
            v = abs(float(value))
            if not math.isfinite(v):
                raise CommandError(f"{name} velocity is {value}: velocities must be finite "
                                   "[rad/s]")
            if v > 0.0:
                caps[name] = v
        self._targets = new
        self._speed_caps = caps
        self._axis_targets = self._axis_targets_from_joints(new)

    def set_track_speeds(self, left: float, right: float) -> None:
        """Left/right track speeds [m/s] (forward positive), held until replaced
        (``drive_mode`` kinematic; refused in plant mode, where the drive train moves the base
        under :meth:`set_drive_command`)."""
        if self.wheeled is not None or self.kinematic_wheels is not None:
            raise CommandError("track speeds refused: this is a wheeled machine (drive_mode "
                               "plant: the PLC's plant/actuation, wheel torques and steering "
                               "rates; kinematic: wheel speeds and steering angles, "
                               "set_wheel_command)")
        if self.drivetrain is not None:
            raise CommandError("track speeds refused: drive_mode is plant (the drive train "
                               "moves the base from the PLC's plant/actuation); set drive_mode "
                               "kinematic to drive the tracks by speed")
        limit = self.config.hydraulics.tracks.speed_limit_m_s
        for name, v in (("track_left", left), ("track_right", right)):
            if not math.isfinite(float(v)):
                raise CommandError(f"{name} speed is {v}: must be a finite number [m/s]")
            if abs(v) > limit:
                raise CommandError(f"{name} speed {v:.6g} m/s beyond the limit {limit} m/s "
                                   "(tracks.speed_limit_m_s in config/sim.yaml)")
        self._track_speeds = (float(left), float(right))

    def set_wheel_command(self, speeds: Mapping[str, float], angles: Mapping[str, float]
                          ) -> None:
        """A wheeled machine's wheel speeds [m/s, r omega] and steering angles [rad] by wheel
        name (``drive_mode`` kinematic: :class:`KinematicWheels`), held until replaced."""
        if self.kinematic_wheels is None:
            raise CommandError(
                "wheel command refused: " + (
                    "this machine runs on tracks (set_track_speeds)" if self.wheeled is None
                    and self.config.undercarriage is None else
                    "drive_mode is plant (the drive train moves the wheels from the PLC's "
                    "plant/actuation); set drive_mode kinematic to drive the wheels by speed "
                    "and angle"))
        self.kinematic_wheels.command(speeds, angles)

    def stop_wheels(self) -> None:
        """Wheel speeds 0, steering held (a kinematic wheeled machine's stale command)."""
        if self.kinematic_wheels is not None:
            self.kinematic_wheels.stop()

    def set_drive_command(self, command: DriveCommand) -> None:
        """The PLC's actuation of the drives (``drive_mode`` plant), acting from the next
        control period until replaced: torque set-points at the sprockets [N m] (clipped at the
        relief limit), drive enable, brake. ``SAFE_COMMAND`` brakes."""
        if self.wheeled is not None:
            raise CommandError("track drive command refused: this is a wheeled machine; "
                               "send a WheeledCommand (set_wheeled_command)")
        if self.drivetrain is None:
            raise CommandError("drive command refused: drive_mode is kinematic (the base "
                               "follows the track speeds); set drive_mode plant for the drive "
                               "train")
        for name, v in (("torque_left_nm", command.torque_left_nm),
                        ("torque_right_nm", command.torque_right_nm)):
            if not math.isfinite(v):
                raise CommandError(f"drive command {name} is {v}: must be finite [N m]")
        self._drive_command = command

    @property
    def drive_command(self) -> DriveCommand:
        """The drive command acting (drive_mode plant)."""
        return self._drive_command

    def set_wheeled_command(self, command: WheeledCommand) -> None:
        """A wheeled machine's actuation by the PLC, acting from the next control period until
        replaced: torque set-points of the driven wheels [N m at the wheel] and steering rate
        commands [rad/s] (in the drive train's ``driven``/``steered`` order), drive enable,
        brake. ``SAFE_WHEELED_COMMAND`` brakes and closes the steering valves."""
        if self.wheeled is None:
            raise CommandError("wheeled command refused: this machine runs on tracks; choose a "
                               "wheeled machine preset (sim_node parameter machine)")
        p = self.wheeled.params
        for what, values, names, unit in (("torque", command.torques_nm, p.driven, "N m"),
                                          ("steering rate", command.steer_rates_rad_s,
                                           p.steered, "rad/s")):
            if len(values) > len(names):
                raise CommandError(f"wheeled command: {len(values)} {what}s for the "
                                   f"{len(names)} wheels {list(names)}: send one per wheel")
            for name, v in zip(names, values, strict=False):
                if not math.isfinite(v):
                    raise CommandError(f"wheeled command: {what} of wheel {name} is {v}: must "
                                       f"be finite [{unit}]")
        self._wheeled_command = command

    @property
    def wheeled_command(self) -> WheeledCommand:
        """The wheeled machine's command acting."""
        return self._wheeled_command

    def apply_bucket_wrench(self, force_world: ArrayLike, torque_world: ArrayLike) -> None:
        """Force [N] and torque [N m] in ``world`` at the bucket origin M, held until replaced."""
        f = np.asarray(force_world, dtype=float).reshape(3)
        t = np.asarray(torque_world, dtype=float).reshape(3)
        if not (np.all(np.isfinite(f)) and np.all(np.isfinite(t))):
            raise CommandError(f"bucket wrench force={fmt_vector(f)} torque={fmt_vector(t)} has "
                               "NaN/inf: pass finite values [N], [N m]; the last valid wrench "
                               "is kept")
        reason = self.envelope.check_wrench(f, t)
        if reason is not None:
            raise CommandError(f"{reason}; the last valid wrench is kept")
        self._wrench = np.concatenate([f, t])
        self._wrench_active = True  # applied (or cleared) on the next control update

    def set_bucket_payload(self, mass_kg: float, centre_bucket_m: ArrayLike,
                           inertia_kg_m2: ArrayLike) -> None:
        """The soil carried in the bucket as mass on the bucket body, held until replaced:
        ``mass_kg`` at ``centre_bucket_m`` [m] with ``inertia_kg_m2`` (3x3, about that centre)
        in the bucket frame (origin M, the frame of :meth:`bucket_pose`). Gravity then pulls
        the load at its own centre (through the front to the cylinders, the swing and the
        tracks) and its inertia slows the swing and the front. The soil's wrench must then
        leave the load's weight out (``DiMaioForceModel.step(weight_on_body=True)``). Mass 0
        restores the empty bucket exactly. Implausible input raises ``CommandError`` (the last
        payload kept)."""
        c = np.asarray(centre_bucket_m, dtype=float)
        il = np.asarray(inertia_kg_m2, dtype=float)
        ml = float(mass_kg)
        last = self._payload_set
        if (last is not None and last[0] == ml and np.array_equal(last[1], c)
                and np.array_equal(last[2], il)):
            return  # unchanged (a carried load): checked when it came, the model holds it
        reason = self.envelope.check_payload(ml, c, il, float(-self.model.opt.gravity[2]))
        if reason is not None:
            raise CommandError(f"{reason}; the last payload is kept")
        self._payload_set = (ml, c.copy(), il.copy())
        m, b = self.model, self._bucket_body
        m0, c0, i0, q0 = self._bucket_mass0
        if ml <= 0.0:
            mass, ipos, inertia, iquat = m0, c0, i0, q0
        else:
            r0 = np.empty(9)
            mujoco.mju_quat2Mat(r0, q0)
            r0m = r0.reshape(3, 3)
            mass = m0 + ml
            ipos = (m0 * c0 + ml * c) / mass
            d0, dl = c0 - ipos, c - ipos
            eye = np.eye(3)
            full = (r0m @ np.diag(i0) @ r0m.T + m0 * (d0 @ d0 * eye - np.outer(d0, d0))
                    + 0.5 * (il + il.T) + ml * (dl @ dl * eye - np.outer(dl, dl)))
            w, v = np.linalg.eigh(full)
            if np.linalg.det(v) < 0.0:
                v[:, 2] = -v[:, 2]
            inertia = np.maximum(w, 1e-9)
            iquat = np.empty(4)
            mujoco.mju_mat2Quat(iquat, v.ravel())
        m.body_subtreemass[self._bucket_chain] = self._bucket_subtree0 + (mass - m0)
        m.body_mass[b] = mass
        m.body_ipos[b] = ipos
        m.body_inertia[b] = inertia
        m.body_iquat[b] = iquat
        self.payload_kg = max(ml, 0.0)

    # --- stepping ------------------------------------------------------------------------
    def step(self, n: int = 1) -> None:
        """Advance ``n`` physics steps, updating the outer loop every ``control_period``.

        After every control period the state is checked (:meth:`_check_state`); a diverged
        one is replaced by the last good state, the bucket wrench is dropped, the event is
        appended to :attr:`divergences` (the latest 100; :attr:`divergence_count` counts all),
        and the clock still advances by the period: simulated
        time never stops and never goes back."""
        remaining = int(n)
        while remaining > 0:
            k = min(self._steps_per_control, remaining)
            t_end = self.data.time + k * self.timestep
            self._update_controls(k * self.timestep)
            mujoco.mj_step(self.model, self.data, k)
            cause = self._check_state(t_end)
            if cause is None:
                mujoco.mj_getState(self.model, self.data, self._good_state, _STATE)
                self._consecutive_divergences = 0
            else:
                self._recover(cause, t_end)
            remaining -= k
            self._integrate_tracks(k * self.timestep)

    # --- state guard ---------------------------------------------------------------------
    def _check_state(self, t_end: float) -> str | None:
        """None if the state after a control period is sound, else what is wrong: one of
        MuJoCo's divergence warnings (it then resets mjData, time included), a non-finite
        qpos/qvel/act/qacc, or a degree of freedom faster than ``STATE_SPEED_FACTOR`` times the
        machine's top speeds (``excavator_sim.plausibility``)."""
        d = self.data
        for w in _DIVERGENCE_WARNINGS:
            info = d.warning[w]
            if info.number:
                info.number = 0
                return (f"MuJoCo {mujoco.mjtWarning(w).name} (NaN, inf or huge value): the "
                        "integrator went unstable")
        if abs(d.time - t_end) > 0.5 * self.timestep:
            return f"simulated time {d.time:.6g} s instead of {t_end:.6g} s (mjData was reset)"
        for name, arr in (("qpos", d.qpos), ("qvel", d.qvel), ("act", d.act), ("qacc", d.qacc)):
            if not np.all(np.isfinite(arr)):
                return f"non-finite {name} {fmt_vector(arr)}"
        fast = np.abs(d.qvel) > self._qvel_limit
        if fast.any():
            k = int(np.argmax(fast))
            unit = "m/s" if self._qvel_limit[k] == self.envelope.state_speed_limits[0] \
                else "rad/s"
            return (f"{self._dof_name(k)} moves at {float(d.qvel[k]):.6g} {unit}, beyond "
                    f"{float(self._qvel_limit[k]):.6g} {unit} ({STATE_SPEED_FACTOR:g} x the "
                    "machine's top speed): the state exploded")
        return None

    def _dof_name(self, dof: int) -> str:
        if 0 <= dof < self.model.nv:
            return f"joint {self.model.joint(int(self.model.dof_jntid[dof])).name!r}"
        return f"dof {dof}"

    def _recover(self, cause: str, t_end: float) -> None:
        """Back to the last good state at ``t_end``, without the bucket wrench; after two
        divergences in a row also at rest, holding the joints where they are."""
        m, d = self.model, self.data
        dropped = ""
        if self._wrench.any():
            dropped = (f"bucket wrench force={fmt_vector(self._wrench[:3])} N torque="
                       f"{fmt_vector(self._wrench[3:])} N m")
        mujoco.mj_setState(m, d, self._good_state, _STATE)
        self._wrench[:] = 0.0
        self._wrench_active = False
        d.xfrc_applied[:] = 0.0
        self._consecutive_divergences += 1
        if self._consecutive_divergences >= 2:  # the good state itself goes wrong: stop
            d.qvel[:] = 0.0
            for _, _, qadr, _, actadr, *_ in self._axes:
                d.act[actadr] = d.qpos[qadr]
            for _, qadr, _, actadr, *_ in self._base_axes:
                d.act[actadr] = d.qpos[qadr]
            self._targets = {n: float(d.qpos[self._q_adr[n]]) for n in ACTIVE_JOINTS}
            self._swing_released = None
            self._swing_braking = 0.0
            self._swing_check = False
            self._speed_caps = {}
            self._axis_targets = self._axis_targets_from_joints(self._targets)
            self._track_speeds = (0.0, 0.0)
            if self.vehicle is not None:
                self.vehicle.velocity[:] = 0.0
        d.time = t_end
        for w in _DIVERGENCE_WARNINGS:
            d.warning[w].number = 0
        mujoco.mj_forward(m, d)
        for a in self._reference:
            self._reference[a] = (float(d.qpos[self._q_adr[a]]), 0.0)
        self.divergences.append(Divergence(t_end, cause, dropped))
        self.divergence_count += 1

    def _axis_targets_from_joints(self, targets: Mapping[str, float]) -> dict[str, float]:
        ext = self.linkage.extensions(targets["boom"], targets["arm"], targets["bucket"],
                                      check=False)
        out = {n: float(e) for n, e in zip(CYLINDER_ACTUATORS, ext, strict=True)}
        out["swing"] = float(targets["swing"])
        return out

    def _axis_speed_cap(self, axis: str) -> float:
        joint = "swing" if axis == "swing" else axis.removesuffix("_cylinder")
        cap = self._speed_caps.get(joint)
        if cap is None:
            return math.inf
        if axis == "swing":
            return cap
        q = float(self.data.qpos[self._q_adr[joint]])
        h = 1e-4
        de = self.linkage.extensions_from_joint(joint, np.array([q - h, q + h]))
        return cap * abs(float(de[1] - de[0])) / (2 * h)

    def _compliance_offsets(self) -> dict[str, float]:
        q = self.data.qpos
        kin = self.linkage.extensions(q[self._q_adr["boom"]], q[self._q_adr["arm"]],
                                      q[self._q_adr["bucket"]], check=False)
        return {n: float(q[self._q_adr[n]]) - float(e)
                for n, e in zip(CYLINDER_ACTUATORS, kin, strict=True)}

    def _update_controls(self, period: float) -> None:
        d = self.data
        # The compliance moves slowly (filtered over 0.1 s): refresh it every few periods only,
        # the linkage's closed form costs about as much as the ten physics steps.
        self._compliance_wait -= period
        if self._compliance_wait <= 0.0:
            blend = min(1.0, (COMPLIANCE_REFRESH_S - self._compliance_wait)
                        / COMPLIANCE_FILTER_S)
            self._compliance_wait += COMPLIANCE_REFRESH_S
            for axis, off in self._compliance_offsets().items():
                self._compliance[axis] += blend * (off - self._compliance[axis])
        gain = self.config.hydraulics.position_gain_1_s
        # Plain floats: this runs every control period, numpy scalar access would dominate.
        qpos, qvel, act_state = d.qpos.tolist(), d.qvel.tolist(), d.act.tolist()
        for axis, aid, qadr, vadr, actadr, lo, hi, f_lo, f_hi, kp, kv in self._axes:
            accel, decel = CYLINDER_ACCEL_M_S2, 0.0
            # Reference trajectory toward the target: flow-limited speed, acceleration-limited,
            # slowing down so it stops exactly at the target.
            ref, ref_speed = self._reference[axis]
            if axis == "swing":
                torque = self.config.hydraulics.swing.torque_limit_nm
                inertia = max(float(d.M[self._swing_madr]), 1.0)
                self.swing_inertia_kg_m2 = inertia
                accel, decel = 0.5 * torque / inertia, SWING_BRAKE_SHARE * torque / inertia
                self._swing_accel = accel
                # A target inside the stopping distance (the joystick released while the house
                # turns): the valve closes, the crossover relief brakes the house at its torque
                # until it stops, and it stays there (:func:`swing_stop`).
                q_sw, v_sw = qpos[qadr], qvel[vadr]
                if self._swing_check:
                    self._swing_check = False
                    # a house at rest (or creeping) has nothing to brake: the target stands
                    held = (swing_stop(q_sw, v_sw, self._axis_targets[axis], decel)
                            if abs(v_sw) > SWING_STOP_SPEED_RAD_S else self._axis_targets[axis])
                    if held != self._axis_targets[axis]:
                        self._swing_released = self._targets["swing"]
                        self._swing_braking = math.copysign(1.0, v_sw)
                        self.swing_stops += 1
                if self._swing_braking != 0.0:
                    if v_sw * self._swing_braking > SWING_STOP_SPEED_RAD_S:
                        # Valve closed: no flow, the held oil column slips at the relief (the
                        # anti-windup bound below), i.e. the drive brakes at its torque limit.
                        held_now, speed = act_state[actadr], qvel[vadr]
                        ahead = q_sw + speed * period
                        held = min(max(held_now, ahead + (1.2 * f_lo + kv * speed) / kp),
                                   ahead + (1.2 * f_hi + kv * speed) / kp)
                        d.ctrl[aid] = min(max((held - held_now) / period, lo), hi)
                        self._reference[axis] = (q_sw, 0.0)
                        continue
                    # Stopped: the anti-swing-back valve bleeds the trapped pressure; the house
                    # is held where it stopped (the position loop from here on).
                    self._swing_braking = 0.0
                    lo_q, hi_q = self.geometry.swing_limits_rad
                    stop = min(max(q_sw + v_sw * abs(v_sw) / (2.0 * decel), lo_q), hi_q)
                    self._axis_targets[axis] = self._targets["swing"] = stop
                    self._reference[axis] = (q_sw, v_sw)
                    ref, ref_speed = self._reference[axis]
            cap = self._axis_speed_cap(axis) if self._speed_caps else math.inf
            target = self._axis_targets[axis] + self._compliance.get(axis, 0.0)
            new_ref, ref_speed = reference_step(ref, ref_speed, target, lo, hi, accel, period,
                                                cap, decel)
            self._reference[axis] = (new_ref, ref_speed)
            # Valve speed: feed-forward + proportional on the measured rod position. Acting on
            # the measurement (not the held setpoint) also removes the oil column's compression.
            measured = qpos[qadr]
            v = ref_speed + gain * (new_ref - measured)
            # Anti-windup: past the deflection at which the force saturates, a held setpoint
            # further ahead of the rod adds no force, only overshoot later.
            # Bounds around where the rod will be at the end of this period.
            held_now, speed = act_state[actadr], qvel[vadr]
            ahead = measured + speed * period
            held = min(max(held_now + v * period, ahead + (1.2 * f_lo + kv * speed) / kp),
                       ahead + (1.2 * f_hi + kv * speed) / kp)
            d.ctrl[aid] = min(max((held - held_now) / period, lo), hi)
            if aid in self._dampers:
                d.ctrl[self._dampers[aid]] = d.ctrl[aid]
        if self.wheeled is not None:
            self._step_wheeled(period)
        elif self.kinematic_wheels is not None:
            self._kinematic_wheels(period, qpos, qvel, act_state)
        elif self.drivetrain is not None:
            self._step_drivetrain(period)
        else:
            self._kinematic_base(period, qpos, qvel, act_state)
        self._apply_wrench()

    def _kinematic_wheels(self, period: float, qpos: list[float], qvel: list[float],
                          act_state: list[float]) -> None:
        """A wheeled machine in kinematic mode: the base follows the wheels' twist (the
        grip servos as for the tracks), the wheel and steering joints set from them."""
        w = self.kinematic_wheels
        assert w is not None
        vx, vy, wz = w.step(period)
        yaw = qpos[self._q_adr["base_yaw"]]
        c, s = math.cos(yaw), math.sin(yaw)
        self._base_servos((c * vx - s * vy, s * vx + c * vy, wz), period, qpos, qvel,
                          act_state)
        d = self.data
        d.qpos[self._wheel_qadr] = w.positions()
        d.qvel[self._wheel_vadr] = 0.0

    def _kinematic_base(self, period: float, qpos: list[float], qvel: list[float],
                        act_state: list[float]) -> None:
        # Tracks: skid-steer kinematics -> world-frame velocities of the planar base, held by
        # the grip servos (same anti-windup: a base pushed at its traction limit slips).
        left, right = self._track_speeds
        width = self.config.hydraulics.tracks.track_width_m
        yaw = qpos[self._q_adr["base_yaw"]]
        forward = 0.5 * (left + right)
        self._base_servos((forward * math.cos(yaw), forward * math.sin(yaw),
                           (right - left) / width), period, qpos, qvel, act_state)

    def _base_servos(self, speeds: tuple[float, float, float], period: float,
                     qpos: list[float], qvel: list[float], act_state: list[float]) -> None:
        """The planar base's grip servos toward world-frame velocities (x, y [m/s], yaw
        [rad/s])."""
        d = self.data
        for (aid, qadr, vadr, actadr, lo, hi, f_lim, kp, kv), v in zip(self._base_axes, speeds,
                                                                       strict=True):
            held_now, speed = act_state[actadr], qvel[vadr]
            ahead = qpos[qadr] + speed * period
            held = min(max(held_now + v * period, ahead + (kv * speed - 1.2 * f_lim) / kp),
                       ahead + (kv * speed + 1.2 * f_lim) / kp)
            d.ctrl[aid] = min(max((held - held_now) / period, lo), hi)

    def _step_drivetrain(self, period: float) -> None:
        """drive_mode plant: one step of the drive train over the coming period (on the
        ground under it, with the bucket's soil force), then the base's servos set to follow
        its pose: held position = its pose now plus the servo's steady lag ``kv v / kp``, speed
        = its mean velocity over the period (the MuJoCo base tracks it within millimetres)."""
        v = self.drivetrain
        assert v is not None and self._ground is not None
        v.mass_kg, v.yaw_inertia_kg_m2 = self.base_inertia()
        before = (v.x, v.y, v.yaw)
        ground = self._ground
        v.step(period, self._drive_command, ground, self._bucket_load(ground.attitude))
        self._attitude_before = ground.attitude
        self._ground = self.ground_under(v.x, v.y, v.yaw)
        self._follow_base(period, before, (v.x, v.y, v.yaw))

    def _follow_base(self, period: float, before: tuple[float, float, float],
                     after: tuple[float, float, float]) -> None:
        """The base's servos set to follow the drive train from ``before`` to ``after``."""
        d = self.data
        for (aid, _qadr, _vadr, actadr, lo, hi, _f, kp, kv), start, end in zip(
                self._base_axes, before, after, strict=True):
            speed = (end - start) / period
            d.act[actadr] = start + kv * speed / kp
            d.ctrl[aid] = min(max(speed, lo), hi)

    def _step_wheeled(self, period: float) -> None:
        """A wheeled machine: as :meth:`_step_drivetrain`, then its wheel and steering joints
        set to the drive train's (angle = travel / r; at rest in MuJoCo: the drive train, not
        MuJoCo, integrates them, and their speeds are published from it)."""
        v = self.wheeled
        assert v is not None and self._wheeled_ground is not None
        v.mass_kg, v.yaw_inertia_kg_m2 = self.base_inertia()
        before = (v.x, v.y, v.yaw)
        ground = self._wheeled_ground
        v.step(period, self._wheeled_command, ground, self._bucket_load(ground.attitude))
        self._attitude_before = ground.attitude
        self._wheeled_ground = self.wheeled_ground_under(v.x, v.y, v.yaw)
        self._follow_base(period, before, (v.x, v.y, v.yaw))
        d = self.data
        d.qpos[self._wheel_qadr] = self._wheel_positions()
        d.qvel[self._wheel_vadr] = 0.0

    def _wheel_positions(self) -> list[float]:
        """The wheels' angles [rad] (travel / rolling radius) and the steering angles [rad]."""
        v = self.wheeled
        assert v is not None
        r = v.params.geometry.wheel_radius_m
        return ([v.wheels[w].travel_m / r for w in WHEELS]
                + v.steer_angles(v.params.steered))

    def _wheel_velocities(self) -> list[float]:
        """The wheels' speeds [rad/s] and the steering rates [rad/s]."""
        v = self.wheeled
        assert v is not None
        return ([float(x) for x in v.velocity[3:7]]
                + [v.steering[w].rate_rad_s for w in v.params.steered])

    def _bucket_load(self, attitude_now: np.ndarray) -> ExternalLoad | None:
        """The bucket wrench (soil on the bucket) as a load on the machine: force in base_link's
        axes and its yaw moment about the base origin."""
        if not self._wrench.any():
            return None
        d = self.data
        force = self._wrench[:3]
        arm = d.xpos[self._bucket_body] - d.xpos[self._base_body]
        moment = self._wrench[3:] + np.cross(arm, force)
        fb = attitude_now.T @ force
        return ExternalLoad((float(fb[0]), float(fb[1]), float(fb[2])),
                            float((attitude_now.T @ moment)[2]))

    def base_inertia(self) -> tuple[float, float]:
        """(mass [kg], yaw inertia about the base origin [kg m^2]) of the whole machine on the
        base's planar joints, from MuJoCo's mass matrix (the pose of the front included)."""
        m_full = np.zeros((self.model.nv, self.model.nv))
        mujoco.mj_fullM(self.model, self.data, m_full)
        x, yaw = self._v_adr["base_x"], self._v_adr["base_yaw"]
        return float(m_full[x, x]), float(m_full[yaw, yaw])

    def ground_under(self, x: float, y: float, yaw: float) -> Ground:
        """base_link's attitude on the terrain at (x, y, yaw) and the soil under each track
        (at the track's centre; ``traction.soil`` or a patch)."""
        assert self.config.drivetrain is not None
        params = self.config.drivetrain.params.tracks
        normal = ground_normal(self.terrain.height_at_point, x, y, yaw, params.contact_length_m,
                               params.gauge_m)
        half = 0.5 * params.gauge_m
        c, s = math.cos(yaw), math.sin(yaw)
        soils: tuple[TractionSoil, TractionSoil] = (
            self.config.drivetrain.soils.soil_at(x - s * half, y + c * half),
            self.config.drivetrain.soils.soil_at(x + s * half, y - c * half))
        return Ground(attitude(yaw, normal), soils)

    @property
    def ground(self) -> Ground | None:
        """The ground under the drive train now (drive_mode plant), else None."""
        return self._ground

    def wheeled_ground_under(self, x: float, y: float, yaw: float) -> WheeledGround:
        """A wheeled machine's attitude on the terrain at (x, y, yaw): the plane under its four
        wheels (the tyre's own friction)."""
        assert self.config.undercarriage is not None
        geo = self.config.undercarriage.params.geometry
        normal = ground_normal(self.terrain.height_at_point, x, y, yaw, geo.wheelbase_m,
                               geo.track_m)
        return WheeledGround(attitude(yaw, normal))

    @property
    def wheeled_ground(self) -> WheeledGround | None:
        """The ground under a wheeled machine now, else None."""
        return self._wheeled_ground

    def _apply_wrench(self) -> None:
        d = self.data
        # Bucket wrench at M: MuJoCo applies xfrc_applied at the body's centre of mass, so add
        # the moment of the force about the centre of mass.
        if self._wrench_active:
            b = self._bucket_body
            fx, fy, fz, tx, ty, tz = self._wrench.tolist()
            mx, my, mz = d.xpos[b].tolist()
            cx, cy, cz = d.xipos[b].tolist()
            rx, ry, rz = mx - cx, my - cy, mz - cz
            d.xfrc_applied[b] = (fx, fy, fz, tx + ry * fz - rz * fy, ty + rz * fx - rx * fz,
                                 tz + rx * fy - ry * fx)
            self._wrench_active = any(self._wrench.tolist())

    def _integrate_tracks(self, period: float) -> None:
        if self.vehicle is not None:   # the drive train integrates its own
            return
        left, right = self._measured_track_speeds()
        if left != 0.0 or right != 0.0:
            self._track_travel[0] += left * period
            self._track_travel[1] += right * period

    def _measured_track_speeds(self) -> tuple[float, float]:
        if self.drivetrain is not None:
            left, right = self.drivetrain.tracks
            return left.speed_m_s, right.speed_m_s
        d = self.data
        yaw = float(d.qpos[self._q_adr["base_yaw"]])
        vx, vy = float(d.qvel[self._v_adr["base_x"]]), float(d.qvel[self._v_adr["base_y"]])
        w = float(d.qvel[self._v_adr["base_yaw"]])
        forward = vx * math.cos(yaw) + vy * math.sin(yaw)
        half = 0.5 * self.config.hydraulics.tracks.track_width_m
        return forward - w * half, forward + w * half

    # --- state ---------------------------------------------------------------------------
    def joint_state(self) -> JointStateSnapshot:
        """Every named joint: swing/boom/arm/bucket [rad, rad/s], *_cylinder extensions [m, m/s],
        track_left/right (position = travelled distance [m], velocity [m/s]; a wheeled machine:
        ``wheel_<w>`` wheel angle [rad] and speed [rad/s], ``steer_<w>`` steering angle [rad]
        and rate [rad/s], the URDF's joints), the passive
        joints (cylinder pivots, h_link, side_link) [rad, rad/s] and the base's planar joints
        ``base_x``, ``base_y`` [m, m/s] (position in ``world``) and ``base_yaw`` [rad, rad/s]
        (heading about z; not wrapped, as MuJoCo integrates it)."""
        d = self.data
        joints = self.state_joints
        pos = np.empty(len(joints))
        vel = np.empty(len(joints))
        pos[self._state_mj] = d.qpos[self._state_qadr]
        vel[self._state_mj] = d.qvel[self._state_vadr]
        if self.wheeled is not None or self.kinematic_wheels is not None:
            wheel_and_steer = np.concatenate([self._wheel_state, self._steer_state])
            w = self.kinematic_wheels
            pos[wheel_and_steer] = self._wheel_positions() if w is None else w.positions()
            vel[wheel_and_steer] = self._wheel_velocities() if w is None else w.velocities()
            return JointStateSnapshot(joints, pos, vel)
        if self.drivetrain is not None:
            pos[self._state_tracks] = [t.travel_m for t in self.drivetrain.tracks]
        else:
            pos[self._state_tracks] = self._track_travel
        vel[self._state_tracks] = self._measured_track_speeds()
        return JointStateSnapshot(joints, pos, vel)

    def joint_positions(self) -> dict[str, float]:
        """swing/boom/arm/bucket [rad] and the three extensions [m]."""
        return {n: float(self.data.qpos[self._q_adr[n]]) for n in (*ACTIVE_JOINTS,
                                                                    *CYLINDER_JOINTS)}

    def forget_imu(self) -> None:
        """The IMU was not read this period (nobody subscribed): the next reading starts
        afresh, as the first one does, instead of differencing across the gap."""
        self._imu_memory = None

    def imu(self) -> ImuReading:
        """What an IMU on base_link reads now (REP-145). drive_mode plant: the drive train's
        attitude on the terrain, its rates over the last period and its specific force.
        kinematic: the MuJoCo base's heading on the terrain's grade, rates and acceleration by
        difference since the previous call (call it once per publish period)."""
        if self.drivetrain is not None and self._ground is not None:
            return imu_reading(self._attitude_before, self._ground.attitude,
                               self.config.control_period, self.drivetrain.specific_force)
        if self.wheeled is not None and self._wheeled_ground is not None:
            return imu_reading(self._attitude_before, self._wheeled_ground.attitude,
                               self.config.control_period, self.wheeled.specific_force)
        d = self.data
        x, y, yaw = (float(d.qpos[self._q_adr[n]]) for n in BASE_JOINTS)
        velocity = np.array([float(d.qvel[self._v_adr["base_x"]]),
                             float(d.qvel[self._v_adr["base_y"]]), 0.0])
        tracks = self.config.hydraulics.tracks
        length = (self.config.drivetrain.params.tracks.contact_length_m
                  if self.config.drivetrain is not None else 2.0)
        now = attitude(yaw, ground_normal(self.terrain.height_at_point, x, y, yaw, length,
                                          tracks.track_width_m))
        t = self.time
        before = self._imu_memory
        self._imu_memory = (t, now, velocity)
        if before is None or t <= before[0]:
            return imu_reading(now, now, 0.0, specific_force(now, np.zeros(3), GRAVITY_M_S2))
        dt = t - before[0]
        accel = (velocity - before[2]) / dt
        return imu_reading(before[1], now, dt, specific_force(now, accel, GRAVITY_M_S2))

    def bucket_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Bucket frame (origin M) in ``world``: position [m], quaternion (w, x, y, z)."""
        return (self.data.xpos[self._bucket_body].copy(),
                self.data.xquat[self._bucket_body].copy())

    def bucket_twist(self) -> tuple[np.ndarray, np.ndarray]:
        """Bucket origin velocity in ``world``: linear [m/s], angular [rad/s]."""
        res = np.zeros(6)
        # mjOBJ_XBODY: at the body frame's origin (mjOBJ_BODY would be the centre of mass).
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_XBODY,
                                 self._bucket_body, res, 0)
        return res[3:].copy(), res[:3].copy()

    def bucket_tip(self) -> np.ndarray:
        """Bucket tip (teeth edge centre) in ``world`` [m]."""
        return np.array(self.data.site("bucket_tip").xpos, dtype=float)   # a copy

    def base_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """``base_link`` in ``world``: position [m], quaternion (w, x, y, z)."""
        return (self.data.xpos[self._base_body].copy(),
                self.data.xquat[self._base_body].copy())

    def constraint_residual(self) -> float:
        """Largest loop-closure gap [m] over the four connect constraints."""
        return float(loop_residuals(self.model, self.data).max())

    def contacts(self) -> list[tuple[str, str]]:
        """Geom name pairs of the active contacts."""
        out = []
        for i in range(self.data.ncon):
            c = self.data.contact[i]
            out.append((self.model.geom(c.geom1).name, self.model.geom(c.geom2).name))
        return out
