"""Hydraulic actuation of the excavator model: cylinders, swing motor, track drive.

Each cylinder is a MuJoCo ``intvelocity`` actuator on its rod's slide joint: the control is the
valve's commanded rod speed [m/s], the actuator's activation integrates it into the rod position
the oil column holds, and the force is ``kp * (activation - extension) - c_f * speed`` (c_f the
seals' small viscous friction), clamped to what the pressure can push or pull. This gives,
without any Python in the loop:

- zero command holds position: the activation stays put and the stiff oil column holds the load
  (kp = the column's stiffness from the oil's bulk modulus);
- speed limited by the pump flow: the control range is ``[-Q / A_annulus, Q / A_bore]``;
- force limited by the relief pressure: ``forcerange = [-p * A_annulus, p * A_bore]``;
- never past a stroke limit: the activation range is the usable stroke widened by the column's
  compression at the force limit (``actlimited``), the slide and joint ranges are hard stops;
- damped: a second actuator per cylinder, on the same control, gives the valve's damping on the
  rod speed relative to the commanded one, ``kv (u - v)``; the joint's ``actfrcrange`` clamps the
  sum to the pressure's force.

The swing motor is the same on the swing hinge (speed and torque limits); the tracks drive the
caterpillar's planar joints the same way (holding at zero speed, force limited by traction).
The outer position loop (joint targets -> valve speeds) lives in :mod:`excavator_sim.simulation`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import mujoco

from excavator_kinematics.geometry import LPM_TO_M3S, CylinderFlow

__all__ = ["LPM_TO_M3S", "SWING_BRAKE_SHARE", "SWING_STOP_SPEED_RAD_S", "CylinderHydraulics",
           "Hydraulics", "SwingDrive", "TrackDrive", "add_actuators", "reference_step",
           "swing_stop"]


@dataclass(frozen=True)
class CylinderHydraulics(CylinderFlow):
    """One hydraulic function: ``count`` identical cylinders in parallel on one valve.

    Areas, flow and the flow-limited speeds come from
    :class:`excavator_kinematics.geometry.CylinderFlow` (bores and rod diameters [m], flow
    [L/min]; shared with the teleop valves). Here: dead volume [m^3] (hoses + end volumes, per
    chamber), damping [N s/m], armature [kg]: mass added to the rod's slide degree of freedom.
    The rod alone (4-30 kg) against the oil column's stiffness (~1e7-1e8 N/m) would ring at
    ~2000 rad/s, beyond what a 1 ms step resolves; the armature moves that mode to a few hundred
    rad/s while adding only a little to the linkage's own mass reflected to the rod.
    """

    name: str = ""
    damping_n_s_per_m: float = 0.0
    armature_kg: float = 0.0
    friction_n_s_per_m: float = 2.0e4

    def push_force_n(self, pressure_pa: float) -> float:
        """Largest extending force [N] at the relief pressure."""
        return pressure_pa * self.bore_area_m2

    def pull_force_n(self, pressure_pa: float) -> float:
        """Largest retracting force [N] at the relief pressure."""
        return pressure_pa * self.annulus_area_m2

    def stiffness_n_per_m(self, bulk_modulus_pa: float, stroke_m: float,
                          dead_volume_m3: float) -> float:
        """Oil-column stiffness [N/m] at mid-stroke: ``beta * (A_b^2 / V_b + A_r^2 / V_r)``.

        Both chambers are closed by the valve at zero command; each acts as a spring of
        ``beta A^2 / V`` (hydraulic stiffness, e.g. Merritt, Hydraulic Control Systems, 1967).
        """
        a_b, a_r = self.bore_area_m2, self.annulus_area_m2
        v_b = a_b * 0.5 * stroke_m + dead_volume_m3
        v_r = a_r * 0.5 * stroke_m + dead_volume_m3
        return bulk_modulus_pa * (a_b * a_b / v_b + a_r * a_r / v_r)


@dataclass(frozen=True)
class SwingDrive:
    """Swing motor + reduction: torque [N m], speed [rad/s], holding stiffness and damping."""

    torque_limit_nm: float
    speed_limit_rad_s: float
    stiffness_nm_per_rad: float
    damping_nm_s_per_rad: float


@dataclass(frozen=True)
class TrackDrive:
    """Skid-steer track drive: gauge (track centre to centre) [m], speed [m/s], traction [N],
    ground stiffness [N/m] and damping [N s/m] of the tracks' grip (static friction: the base
    holds its place against swing reactions until the traction limit)."""

    track_width_m: float
    speed_limit_m_s: float
    traction_force_n: float
    damping_n_s_per_m: float
    stiffness_n_per_m: float


@dataclass(frozen=True)
class Hydraulics:
    """All actuation parameters (see ``config/sim.yaml`` for the chosen values and sources)."""

    pressure_pa: float
    bulk_modulus_pa: float
    dead_volume_m3: float
    position_gain_1_s: float
    cylinders: Mapping[str, CylinderHydraulics]
    swing: SwingDrive
    tracks: TrackDrive


# Valve opening rate: the cylinder speed reference may change by at most this per second
# [m/s^2]. 1.5 m/s^2 takes a boom from rest to full flow in ~0.2 s, as a main valve's spool does
# (3 m/s^2 before issue 14 asked the boom for more force than its relief pressure gives when
# stopping, so it overshot).
CYLINDER_ACCEL_M_S2 = 1.5
# Time constant [s] of the last part of the approach to the flow-limited speed: the speed
# reference eases into its limit instead of reaching it at full acceleration, so the oil
# column's acceleration load is released slowly and the rod does not outrun the flow while
# it decompresses (needs >= 1/omega_h, ~0.03 s here).
SPEED_APPROACH_S = 0.1


def reference_step(ref: float, ref_speed: float, target: float, speed_lo: float,
                   speed_hi: float, accel: float, period: float,
                   cap: float = math.inf, decel: float = 0.0) -> tuple[float, float]:
    """One ``period`` [s] of an axis' reference trajectory toward ``target``: flow-limited
    speed (``-speed_lo`` .. ``speed_hi``, ``speed_lo`` < 0, and ``cap``), acceleration-limited
    (``accel``), easing into the top speed (``SPEED_APPROACH_S``) and slowing down so it stops
    exactly at the target (never past it). ``decel`` (> ``accel``) lets it brake harder than
    it plans to when a target appears inside its stopping distance (the swing's crossover
    relief: :func:`swing_stop`). Returns the new (position, speed)."""
    err = target - ref
    if err == 0.0 and ref_speed == 0.0:
        return ref, 0.0
    stop = math.sqrt(2.0 * accel * abs(err))
    limit = speed_hi if err > 0.0 else -speed_lo
    want = math.copysign(min(stop, limit, cap), err)
    if abs(want) > abs(ref_speed) and want * ref_speed >= 0.0:
        # speeding up: at most accel, and ease into the wanted speed
        gap = abs(want) - abs(ref_speed)
        step = min(accel * period, gap * min(1.0, period / SPEED_APPROACH_S),
                   gap if gap < 1e-4 else math.inf)
        ref_speed = ref_speed + math.copysign(step, want)
    else:
        brake = max(accel, decel) if want * ref_speed >= 0.0 else accel
        ref_speed = min(max(want, ref_speed - brake * period), ref_speed + brake * period)
    new_ref = ref + ref_speed * period
    if (target - new_ref) * err <= 0.0:  # arrived: no overshoot
        return target, 0.0
    return new_ref, ref_speed


# The swing's braking deceleration as a share of the crossover relief torque over the upper
# structure's inertia: the remaining 20 % is the position loop's margin for the inertia's change
# with the front's pose and the bucket's load (docs/simulation.md, "Swing drive").
SWING_BRAKE_SHARE = 0.8
# Below this speed [rad/s] a released, braking house counts as stopped: it is held there.
SWING_STOP_SPEED_RAD_S = 0.02


def swing_stop(ref: float, ref_speed: float, target: float, decel: float) -> float:
    """The swing target the drive can hold: ``target``, or, if it lies ahead in the direction of
    motion but inside the stopping distance at ``decel`` [rad/s^2], the point where the house
    stops. A swing valve closed while the house turns (joystick released) blocks both motor
    ports: the crossover relief valves brake the house at their pressure until its inertia is
    spent, and nothing swings it back (JCB JS70 manual, swing brake operation; Mustang ME8003
    service manual: the anti-swing-back valve bleeds the pressure left trapped at the stop).
    A target behind the house (the lever reversed) is commanded motion: it is kept."""
    if ref_speed == 0.0 or decel <= 0.0:
        return target
    ahead = (target - ref) * ref_speed
    stopping = ref_speed * abs(ref_speed) / (2.0 * decel)
    if 0.0 <= ahead < stopping * ref_speed:
        return ref + stopping
    return target


def damper_name(cylinder: str) -> str:
    """Name of the valve-damping actuator of ``cylinder`` (same control as the cylinder)."""
    return f"{cylinder}_valve_damping"


# Actuator names in the MuJoCo model, in control order.
CYLINDER_ACTUATORS = ("boom_cylinder", "arm_cylinder", "bucket_cylinder")
SWING_ACTUATOR = "swing"
BASE_ACTUATORS = ("base_x", "base_y", "base_yaw")


def add_actuators(spec: mujoco.MjSpec, hydraulics: Hydraulics,
                  usable_strokes: Mapping[str, tuple[float, float]],
                  swing_limits_rad: tuple[float, float]) -> None:
    """Add the cylinder, swing and track actuators to ``spec`` (joints must exist already).

    ``usable_strokes`` [m] per cylinder bound each activation (the held rod position), so no
    command can drive a rod past its stroke or the bucket four-bar past its toggle.
    """
    p = hydraulics.pressure_pa
    for name in CYLINDER_ACTUATORS:
        cyl = hydraulics.cylinders[name]
        lo, hi = usable_strokes[name]
        act = spec.add_actuator()
        act.name = name
        act.target = name
        act.trntype = mujoco.mjtTrn.mjTRN_JOINT
        kp = cyl.stiffness_n_per_m(hydraulics.bulk_modulus_pa, hi - lo,
                                   hydraulics.dead_volume_m3)
        act.set_to_intvelocity(kp=kp, kv=cyl.friction_n_s_per_m)
        joint = spec.joint(name)
        joint.armature = cyl.armature_kg
        # The total force on the rod (column + valve damping) is what the pressure can give.
        joint.actfrclimited = mujoco.mjtLimited.mjLIMITED_TRUE
        joint.actfrcrange = [-cyl.pull_force_n(p), cyl.push_force_n(p)]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = [-cyl.retract_speed_m_s, cyl.extend_speed_m_s]
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-cyl.pull_force_n(p), cyl.push_force_n(p)]
        act.actlimited = mujoco.mjtLimited.mjLIMITED_TRUE
        # The held position may lie beyond the usable stroke by the column's compression at the
        # force limit: a rod held at the end of its range under load sits at the end, not
        # F / kp short of it (before issue 14 the bucket stopped 1 deg short of its limit near
        # the four-bar's toggle, where 1 mm of rod is 2.5 deg). The rod itself cannot pass: the
        # slide's stroke range and the joints' limit ranges are hard stops in the model.
        act.actrange = [lo - cyl.pull_force_n(p) / kp, hi + cyl.push_force_n(p) / kp]
        # The valve's damping acts on the rod's speed relative to the commanded one (the same
        # control as the column's): kv * (u - v). At the commanded speed it costs no force.
        damp = spec.add_actuator()
        damp.name = damper_name(name)
        damp.target = name
        damp.trntype = mujoco.mjtTrn.mjTRN_JOINT
        damp.set_to_velocity(kv=cyl.damping_n_s_per_m)
        damp.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        damp.ctrlrange = [-cyl.retract_speed_m_s, cyl.extend_speed_m_s]
        damp.forcelimited = mujoco.mjtLimited.mjLIMITED_FALSE

    sw = hydraulics.swing
    act = spec.add_actuator()
    act.name = SWING_ACTUATOR
    act.target = "swing"
    act.trntype = mujoco.mjtTrn.mjTRN_JOINT
    act.set_to_intvelocity(kp=sw.stiffness_nm_per_rad, kv=sw.damping_nm_s_per_rad)
    act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
    act.ctrlrange = [-sw.speed_limit_rad_s, sw.speed_limit_rad_s]
    act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
    act.forcerange = [-sw.torque_limit_nm, sw.torque_limit_nm]
    act.actlimited = mujoco.mjtLimited.mjLIMITED_TRUE
    act.actrange = list(swing_limits_rad)

    tr = hydraulics.tracks
    # Planar base: x, y and yaw servos that hold position at zero command (the tracks grip the
    # ground) and follow the skid-steer velocities; force limited by traction.
    arm2 = (tr.track_width_m / 2.0) ** 2
    yaw_torque = tr.traction_force_n * tr.track_width_m / 2.0
    for name, kp, kv, limit, speed in (
        ("base_x", tr.stiffness_n_per_m, tr.damping_n_s_per_m, tr.traction_force_n,
         tr.speed_limit_m_s),
        ("base_y", tr.stiffness_n_per_m, tr.damping_n_s_per_m, tr.traction_force_n,
         tr.speed_limit_m_s),
        ("base_yaw", tr.stiffness_n_per_m * arm2, tr.damping_n_s_per_m * arm2, yaw_torque,
         2.0 * tr.speed_limit_m_s / tr.track_width_m),
    ):
        act = spec.add_actuator()
        act.name = name
        act.target = name
        act.trntype = mujoco.mjtTrn.mjTRN_JOINT
        act.set_to_intvelocity(kp=kp, kv=kv)
        act.actlimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = [-speed, speed]
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-limit, limit]
