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
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import mujoco
import numpy as np

from excavator_kinematics.errors import ConfigError, KinematicsError
from excavator_kinematics.forward_kinematics import ForwardKinematics
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_sim.heightfield import HeightField
from excavator_sim.hydraulics import BASE_ACTUATORS, CYLINDER_ACTUATORS
from excavator_sim.model_builder import (
    ACTIVE_JOINTS,
    BASE_JOINTS,
    CYLINDER_JOINTS,
    PASSIVE_JOINTS,
    BuiltModel,
    ModelOptions,
    build_model,
    loop_residuals,
)
from excavator_sim.plausibility import STATE_SPEED_FACTOR, MachineEnvelope, fmt_vector
from excavator_sim.sim_config import SimConfig, load_sim_config

TRACK_JOINTS = ("track_left", "track_right")
# Every joint of joint_state(), in this order: every movable joint of the URDF (the base's planar
# joints included, so robot_state_publisher can pose the machine in world) plus the tracks.
STATE_JOINTS = (*ACTIVE_JOINTS, *CYLINDER_JOINTS, *TRACK_JOINTS, *PASSIVE_JOINTS, *BASE_JOINTS)
# Valve opening rate: the cylinder speed command may change by at most this per second [m/s^2].
CYLINDER_ACCEL_M_S2 = 3.0
# MuJoCo's own divergence warnings: each resets mjData (time to 0) when it fires.
_DIVERGENCE_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS,
                        mujoco.mjtWarning.mjWARN_BADQVEL)
_STATE = mujoco.mjtState.mjSTATE_INTEGRATION


def model_options(config: SimConfig) -> ModelOptions:
    """The model builder's options for a simulation configured by ``config``."""
    return ModelOptions(hydraulics=config.hydraulics, terrain=config.terrain,
                        terrain_contact=config.terrain_contact, initial=config.initial,
                        timestep=config.timestep)


class CommandError(ValueError):
    """A rejected command; the message names the value, the limit and the fix."""


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
            raise ConfigError(f"initial pose rejected: {exc}; set initial.boom_rad, "
                              "initial.arm_rad, initial.bucket_rad within the limits") from None
        self.model = self.built.model
        self.data = mujoco.MjData(self.model)
        mujoco.mj_resetDataKeyframe(self.model, self.data, 0)
        self.terrain = HeightField(self.model, c.terrain)  # build_model filled it flat
        mujoco.mj_forward(self.model, self.data)

        b = self.built
        self._q_adr = {n: b.qpos_adr[n] for n in (*ACTIVE_JOINTS, *CYLINDER_JOINTS,
                                                   *PASSIVE_JOINTS, *BASE_JOINTS)}
        self._v_adr = {n: b.dof_adr[n] for n in self._q_adr}
        in_mujoco = [k for k, n in enumerate(STATE_JOINTS) if n not in TRACK_JOINTS]
        self._state_mj = np.array(in_mujoco)
        self._state_qadr = np.array([self._q_adr[STATE_JOINTS[k]] for k in in_mujoco])
        self._state_vadr = np.array([self._v_adr[STATE_JOINTS[k]] for k in in_mujoco])
        self._state_tracks = np.array([STATE_JOINTS.index(n) for n in TRACK_JOINTS])
        self._act = {n: b.actuator_id[n] for n in (*CYLINDER_ACTUATORS, "swing",
                                                   *BASE_ACTUATORS)}
        self._act_state = {n: int(self.model.actuator_actadr[self._act[n]])
                           for n in (*CYLINDER_ACTUATORS, "swing")}
        self._bucket_body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "bucket")
        self._base_body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "caterpillar")
        self._steps_per_control = max(1, round(c.control_period / c.timestep))

        # Setpoints: start where the machine is.
        self._targets = {n: float(self.data.qpos[self._q_adr[n]]) for n in ACTIVE_JOINTS}
        self._speed_caps: dict[str, float] = {}
        self._axis_targets = self._axis_targets_from_joints(self._targets)
        self._reference = {a: (float(self.data.qpos[self._q_adr[a]]), 0.0)
                           for a in (*CYLINDER_ACTUATORS, "swing")}
        self._track_speeds = (0.0, 0.0)
        self._track_travel = np.zeros(2)
        self._wrench = np.zeros(6)
        self._wrench_active = False
        self._base_axes = [
            (self._act[a], self._q_adr[a], self._v_adr[a],
             int(self.model.actuator_actadr[self._act[a]]),
             *(float(x) for x in self.model.actuator_ctrlrange[self._act[a]]),
             float(self.model.actuator_forcerange[self._act[a], 1]),
             float(self.model.actuator_gainprm[self._act[a], 0]),
             -float(self.model.actuator_biasprm[self._act[a], 2]))
            for a in BASE_ACTUATORS]
        m = self.model
        # Per axis: (name, actuator, qpos adr, dof adr, act adr, ctrl lo/hi, force lo/hi, kp, kv)
        self._axes = [
            (a, self._act[a], self._q_adr[a], self._v_adr[a], self._act_state[a],
             *(float(x) for x in m.actuator_ctrlrange[self._act[a]]),
             *(float(x) for x in m.actuator_forcerange[self._act[a]]),
             float(m.actuator_gainprm[self._act[a], 0]),
             -float(m.actuator_biasprm[self._act[a], 2]))
            for a in (*CYLINDER_ACTUATORS, "swing")]
        # Swing acceleration limit from the torque limit and the upper structure's inertia.
        m_full = np.zeros((self.model.nv, self.model.nv))
        mujoco.mj_fullM(self.model, self.data, m_full)
        swing_inertia = float(m_full[self._v_adr["swing"], self._v_adr["swing"]])
        self._swing_accel = 0.5 * c.hydraulics.swing.torque_limit_nm / swing_inertia
        self.swing_inertia_kg_m2 = swing_inertia

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
        lo, hi = self.geometry.swing_limits_rad
        if not lo <= new["swing"] <= hi:
            raise CommandError(f"swing target {new['swing']:.6g} rad outside {lo:.3f}..{hi:.3f}"
                               " rad (swing.limits_rad in config/excavator.yaml)")
        try:
            self.linkage.check_joints(new["boom"], new["arm"], new["bucket"])
        except KinematicsError as exc:
            raise CommandError(f"{exc}; the previous setpoint is kept") from None
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
        """Left/right track speeds [m/s] (forward positive), held until replaced."""
        limit = self.config.hydraulics.tracks.speed_limit_m_s
        for name, v in (("track_left", left), ("track_right", right)):
            if not math.isfinite(float(v)):
                raise CommandError(f"{name} speed is {v}: must be a finite number [m/s]")
            if abs(v) > limit:
                raise CommandError(f"{name} speed {v:.6g} m/s beyond the limit {limit} m/s "
                                   "(tracks.speed_limit_m_s in config/sim.yaml)")
        self._track_speeds = (float(left), float(right))

    def apply_bucket_wrench(self, force_world: np.ndarray, torque_world: np.ndarray) -> None:
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
            self._speed_caps = {}
            self._axis_targets = self._axis_targets_from_joints(self._targets)
            self._track_speeds = (0.0, 0.0)
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

    def _update_controls(self, period: float) -> None:
        d = self.data
        gain = self.config.hydraulics.position_gain_1_s
        # Plain floats: this runs every control period, numpy scalar access would dominate.
        qpos, qvel, act_state = d.qpos.tolist(), d.qvel.tolist(), d.act.tolist()
        for axis, aid, qadr, vadr, actadr, lo, hi, f_lo, f_hi, kp, kv in self._axes:
            accel = self._swing_accel if axis == "swing" else CYLINDER_ACCEL_M_S2
            # Reference trajectory toward the target: flow-limited speed, acceleration-limited,
            # slowing down so it stops exactly at the target.
            target = self._axis_targets[axis]
            ref, ref_speed = self._reference[axis]
            err = target - ref
            if err == 0.0 and ref_speed == 0.0:
                new_ref = ref
            else:
                stop = math.sqrt(2.0 * accel * abs(err))
                limit = hi if err > 0.0 else -lo
                cap = self._axis_speed_cap(axis) if self._speed_caps else math.inf
                want = math.copysign(min(stop, limit, cap), err)
                ref_speed = min(max(want, ref_speed - accel * period),
                                ref_speed + accel * period)
                new_ref = ref + ref_speed * period
                if (target - new_ref) * err <= 0.0:  # arrived: no overshoot
                    new_ref, ref_speed = target, 0.0
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
        # Tracks: skid-steer kinematics -> world-frame velocities of the planar base, held by
        # the grip servos (same anti-windup: a base pushed at its traction limit slips).
        left, right = self._track_speeds
        width = self.config.hydraulics.tracks.track_width_m
        yaw = qpos[self._q_adr["base_yaw"]]
        forward = 0.5 * (left + right)
        speeds = (forward * math.cos(yaw), forward * math.sin(yaw), (right - left) / width)
        for (aid, qadr, vadr, actadr, lo, hi, f_lim, kp, kv), v in zip(self._base_axes, speeds,
                                                                       strict=True):
            held_now, speed = act_state[actadr], qvel[vadr]
            ahead = qpos[qadr] + speed * period
            held = min(max(held_now + v * period, ahead + (kv * speed - 1.2 * f_lim) / kp),
                       ahead + (kv * speed + 1.2 * f_lim) / kp)
            d.ctrl[aid] = min(max((held - held_now) / period, lo), hi)
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
        left, right = self._measured_track_speeds()
        if left != 0.0 or right != 0.0:
            self._track_travel[0] += left * period
            self._track_travel[1] += right * period

    def _measured_track_speeds(self) -> tuple[float, float]:
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
        track_left/right (position = travelled distance [m], velocity [m/s]), the passive
        joints (cylinder pivots, h_link, side_link) [rad, rad/s] and the base's planar joints
        ``base_x``, ``base_y`` [m, m/s] (position in ``world``) and ``base_yaw`` [rad, rad/s]
        (heading about z; not wrapped, as MuJoCo integrates it)."""
        d = self.data
        pos = np.empty(len(STATE_JOINTS))
        vel = np.empty(len(STATE_JOINTS))
        pos[self._state_mj] = d.qpos[self._state_qadr]
        vel[self._state_mj] = d.qvel[self._state_vadr]
        pos[self._state_tracks] = self._track_travel
        vel[self._state_tracks] = self._measured_track_speeds()
        return JointStateSnapshot(STATE_JOINTS, pos, vel)

    def joint_positions(self) -> dict[str, float]:
        """swing/boom/arm/bucket [rad] and the three extensions [m]."""
        return {n: float(self.data.qpos[self._q_adr[n]]) for n in (*ACTIVE_JOINTS,
                                                                    *CYLINDER_JOINTS)}

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
        return self.data.site("bucket_tip").xpos.copy()

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
