"""What the machine can physically do: the plausibility bounds of the simulator's inputs and
state, derived from the geometry and the hydraulics (no ROS, no MuJoCo state).

A value beyond these bounds cannot come from a working upstream node (a soil model, a bag, a
test script): it is invalid input, rejected with the bound named, never clamped.

- **Tip speed** [m/s]: every joint at once at its top speed, each moving the tip on the longest
  lever it can have, plus the tracks: ``v = w_swing (x_C + L_boom + L_arm + L_bucket) +
  w_boom (L_boom + L_arm + L_bucket) + w_arm (L_arm + L_bucket) + w_bucket L_bucket + v_track``.
  A joint's top rate is its cylinder's flow-limited speed (``Q / A``, the faster of extend and
  retract) over the smallest ``de/dq`` of the linkage within the joint's range. A sum of
  maxima: an upper bound no real motion reaches. The bucket origin M moves slower than the tip.
- **Angular speed** [rad/s]: the sum of the joint rates plus the tracks' yaw rate.
- **Digging force** [N]: the larger of the bucket digging (breakout) force and the arm crowd
  force in the sense of ISO 6015: the cylinder's force at relief pressure times the largest
  ``de/dq`` of its joint (the largest moment it can apply), over the radius from the joint to
  the teeth (``L_bucket`` for the bucket cylinder, ``L_arm + L_bucket`` for the arm cylinder).
- **Wrench limit**: ``WRENCH_FACTOR`` times the digging force, and that force on the bucket's
  longest lever for the torque. A soil reaction above what the cylinders can push against
  stalls the machine in reality; a few times more than that is a fault upstream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.forward_kinematics import ForwardKinematics
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_sim.hydraulics import Hydraulics
from excavator_sim.soil.plausibility import SoilLimits

# Multiples of the machine's limits that are still plausible input (dynamic overshoot, a soil
# model's stiff contact, a twist measured at the tip instead of M, numerical noise).
WRENCH_FACTOR = 3.0
SPEED_FACTOR = 2.0
# State guard of the simulation: a degree of freedom faster than this multiple of the machine's
# top speeds (the fastest rod or track [m/s] for slides, the summed joint rates [rad/s] for
# hinges) has diverged.
STATE_SPEED_FACTOR = 10.0
_SAMPLES = 400


@dataclass(frozen=True)
class MachineEnvelope:
    """The machine's physical limits (SI) and the plausibility limits derived from them."""

    joint_rate_rad_s: dict[str, float]  # top rate of swing, boom, arm, bucket [rad/s]
    max_tip_speed_m_s: float
    max_angular_speed_rad_s: float
    bucket_digging_force_n: float  # ISO 6015 bucket breakout force
    arm_crowd_force_n: float  # ISO 6015 arm crowd force
    bucket_lever_m: float  # longest distance from the bucket origin M to a bucket point [m]
    reach_m: float  # largest horizontal distance of the tip from the swing axis [m]
    dig_depth_m: float  # deepest tip below the track ground (base_link z = 0) [m]
    tip_height_m: float  # highest tip above the track ground [m]
    max_slide_speed_m_s: float  # fastest cylinder rod or track [m/s]

    @property
    def state_speed_limits(self) -> tuple[float, float]:
        """(slide [m/s], hinge [rad/s]) speed beyond which a simulated degree of freedom has
        diverged."""
        return (STATE_SPEED_FACTOR * self.max_slide_speed_m_s,
                STATE_SPEED_FACTOR * self.max_angular_speed_rad_s)

    @property
    def max_digging_force_n(self) -> float:
        return max(self.bucket_digging_force_n, self.arm_crowd_force_n)

    @property
    def wrench_force_limit_n(self) -> float:
        """Largest plausible bucket force [N]."""
        return WRENCH_FACTOR * self.max_digging_force_n

    @property
    def wrench_torque_limit_nm(self) -> float:
        """Largest plausible bucket torque about M [N m]."""
        return self.wrench_force_limit_n * self.bucket_lever_m

    @property
    def linear_speed_limit_m_s(self) -> float:
        """Largest plausible bucket speed [m/s]."""
        return SPEED_FACTOR * self.max_tip_speed_m_s

    @property
    def angular_speed_limit_rad_s(self) -> float:
        """Largest plausible bucket angular speed [rad/s]."""
        return SPEED_FACTOR * self.max_angular_speed_rad_s

    @classmethod
    def from_machine(cls, geometry: ExcavatorGeometry, hydraulics: Hydraulics,
                     linkage: Linkage | None = None) -> MachineEnvelope:
        g = geometry
        link = linkage if linkage is not None else Linkage(geometry)
        l_boom, l_arm = math.hypot(*g.H), math.hypot(*g.M)
        l_bucket = math.hypot(*g.tip)
        lever = math.hypot(max(math.hypot(*p) for p in (g.tip, g.bucket_base, g.L)),
                           0.5 * g.bucket_width_m)
        rates = {"swing": float(hydraulics.swing.speed_limit_rad_s)}
        moment_arm = {}  # largest de/dq [m/rad]
        slide = hydraulics.tracks.speed_limit_m_s
        for joint in ("boom", "arm", "bucket"):
            lo, hi = link.joint_limits[joint]
            q = np.linspace(lo, hi, _SAMPLES)
            de_dq = np.abs(np.gradient(link.extensions_from_joint(joint, q), q))
            cyl = hydraulics.cylinders[f"{joint}_cylinder"]
            speed = max(cyl.extend_speed_m_s, cyl.retract_speed_m_s)
            rates[joint] = speed / float(max(de_dq.min(), 1e-6))
            slide = max(slide, speed)
            moment_arm[joint] = float(de_dq.max())

        def force(joint: str) -> float:
            cyl = hydraulics.cylinders[f"{joint}_cylinder"]
            return max(cyl.push_force_n(hydraulics.pressure_pa),
                       cyl.pull_force_n(hydraulics.pressure_pa))

        reach = abs(g.C[0]) + l_boom + l_arm + l_bucket
        grids = [np.linspace(*link.joint_limits[j], 25) for j in ("boom", "arm", "bucket")]
        q = np.stack(np.meshgrid(*grids, indexing="ij"), axis=-1).reshape(-1, 3)
        tip_z = ForwardKinematics(geometry, link).tip(
            np.concatenate((np.zeros((len(q), 1)), q), axis=1))[:, 2]
        tracks = hydraulics.tracks
        tip = (rates["swing"] * reach + rates["boom"] * (l_boom + l_arm + l_bucket)
               + rates["arm"] * (l_arm + l_bucket) + rates["bucket"] * l_bucket
               + tracks.speed_limit_m_s)
        angular = sum(rates.values()) + 2.0 * tracks.speed_limit_m_s / tracks.track_width_m
        return cls(joint_rate_rad_s=rates, max_tip_speed_m_s=tip,
                   max_angular_speed_rad_s=angular,
                   bucket_digging_force_n=force("bucket") * moment_arm["bucket"] / l_bucket,
                   arm_crowd_force_n=force("arm") * moment_arm["arm"] / (l_arm + l_bucket),
                   bucket_lever_m=lever, reach_m=reach, dig_depth_m=float(-tip_z.min()),
                   tip_height_m=float(tip_z.max()), max_slide_speed_m_s=slide)

    def soil_limits(self) -> SoilLimits:
        """The soil model's plausibility limits for this machine: the wrench and speed limits
        above; the terrain extent plus the reach; for a bucket corner below the local surface: the
        digging depth plus the dump height (the highest pile the machine can build beside its
        trench) plus the bucket's size; above it: the tip height plus the reach."""
        return SoilLimits(
            linear_speed_m_s=self.linear_speed_limit_m_s,
            angular_speed_rad_s=self.angular_speed_limit_rad_s,
            force_n=self.wrench_force_limit_n, torque_nm=self.wrench_torque_limit_nm,
            margin_xy_m=self.reach_m, max_depth_m=(self.dig_depth_m + self.tip_height_m
                         + self.bucket_lever_m),
            max_height_m=self.tip_height_m + self.reach_m,
            source=f"{SPEED_FACTOR:g} x the machine's top speeds from its pump flows and linkage")

    def check_wrench(self, force_n: np.ndarray, torque_nm: np.ndarray) -> str | None:
        """None if the bucket wrench is plausible, else the reason (value, limit, fix)."""
        if not (np.all(np.isfinite(force_n)) and np.all(np.isfinite(torque_nm))):
            return (f"bucket wrench force={fmt_vector(force_n)} N torque={fmt_vector(torque_nm)}"
                    " N m is not finite: send finite values")
        f, t = safe_norm(force_n), safe_norm(torque_nm)
        if f > self.wrench_force_limit_n:
            return (f"bucket force |f| = {f:.6g} N exceeds the plausible limit "
                    f"{self.wrench_force_limit_n:.6g} N ({WRENCH_FACTOR:g} x the machine's "
                    f"maximum digging force {self.max_digging_force_n:.6g} N): check the soil "
                    "model's parameters and inputs")
        if t > self.wrench_torque_limit_nm:
            return (f"bucket torque |tau| = {t:.6g} N m exceeds the plausible limit "
                    f"{self.wrench_torque_limit_nm:.6g} N m (the force limit on the bucket's "
                    f"{self.bucket_lever_m:.3f} m lever): check the soil model's parameters and "
                    "inputs")
        return None


    def check_payload(self, mass_kg: float, centre_m: np.ndarray, inertia_kg_m2: np.ndarray,
                      gravity_m_s2: float = 9.81) -> str | None:
        """None if the bucket's payload (the carried soil as mass, bucket frame) is plausible,
        else the reason: its weight within the wrench's force limit (the same weight as a
        wrench would be held to it), its centre within the bucket's lever of M, its inertia a
        finite symmetric positive semi-definite tensor."""
        c = np.asarray(centre_m, dtype=float)
        inertia = np.asarray(inertia_kg_m2, dtype=float)
        if not (math.isfinite(mass_kg) and c.shape == (3,) and inertia.shape == (3, 3)
                and np.all(np.isfinite(c)) and np.all(np.isfinite(inertia))):
            return (f"bucket payload mass={mass_kg!r} kg centre={c.tolist()} m inertia "
                    f"{inertia.tolist()} kg m^2 is not finite or not shaped (3,), (3, 3): "
                    "send finite values in the bucket frame")
        if not 0.0 <= mass_kg * gravity_m_s2 <= self.wrench_force_limit_n:
            return (f"bucket payload mass {mass_kg:.6g} kg is outside [0, "
                    f"{self.wrench_force_limit_n / gravity_m_s2:.6g}] kg (its weight within "
                    "the plausible bucket force): check the soil's density and load")
        if safe_norm(c) > self.bucket_lever_m:
            return (f"bucket payload centre {fmt_vector(c)} m lies {safe_norm(c):.3f} m from "
                    f"the bucket origin M, beyond the bucket's {self.bucket_lever_m:.3f} m: "
                    "send it in the bucket frame")
        sym = 0.5 * (inertia + inertia.T)
        scale = max(1.0, float(np.abs(sym).max()))
        if (float(np.abs(inertia - sym).max()) > 1e-9 * scale
                or float(np.linalg.eigvalsh(sym).min()) < -1e-9 * scale):
            return (f"bucket payload inertia {inertia.tolist()} kg m^2 is not symmetric "
                    "positive semi-definite: send the tensor about the centre of mass")
        return None


def shipped_machine_envelope() -> MachineEnvelope:
    """The envelope of the shipped machine (``config/excavator.yaml`` + ``config/sim.yaml``):
    what soil_node, which does not see the simulator's parameters, checks against."""
    from excavator_sim.sim_config import load_sim_config

    return MachineEnvelope.from_machine(default_geometry(), load_sim_config().hydraulics)


def safe_norm(values: np.ndarray | list[float] | tuple[float, ...]) -> float:
    """Euclidean norm that does not overflow for finite input: [1e307] * 3 -> 1.73e307."""
    a = np.abs(np.asarray(values, dtype=float).ravel())
    m = float(a.max()) if a.size else 0.0
    if m == 0.0 or not math.isfinite(m):
        return m
    return m * float(np.sqrt(np.sum((a / m) ** 2)))


def fmt_vector(values: np.ndarray | list[float] | tuple[float, ...]) -> str:
    """``[1e+308, nan, 0]``-style text of a vector: ``:.6g`` per element, never 309 digits."""
    return "[" + ", ".join(f"{float(v):.6g}" for v in np.ravel(values)) + "]"
