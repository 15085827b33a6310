"""Machine figures computed from the model the way spec sheets state them.

- **Bucket digging force** (ISO 6015, SAE J1179): the force the bucket cylinder(s) produce at the
  bucket tip at the relief pressure, tangent to the arc of radius |M T| (bucket pivot to tip),
  the largest over the bucket's range. Here the bucket curls (teeth towards the machine) when
  its cylinder extends, so the bore side works: ``F = p A_bore |de/dq| / |M T|``.
- **Arm crowd force** (ISO 6015): the force the arm cylinder(s) produce at the tip, tangent to
  the arc of radius |H T| (arm pivot to tip), at the relief pressure, the largest over the arm's
  range, with the bucket set for the largest radius |H T| (the convention most sheets follow:
  the smallest force over the bucket's angles, i.e. a lower bound).
- **Cylinder times**: a full stroke at the pump flow (``stroke / (Q / A)``), the figure a
  service manual's "cylinder speed check" measures; the machine's own axis times follow from
  the flow limits.
- **Operating weight**: the model's total mass (upper structure, undercarriage, front).

``de/dq`` is the linkage's closed-form extension derivative, so every figure is a function of
config/excavator.yaml (geometry, masses) and config/sim.yaml (hydraulics) only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.geometry import ExcavatorGeometry
from excavator_kinematics.linkage import Linkage
from excavator_sim.hydraulics import Hydraulics

GRAVITY_M_S2 = 9.81


@dataclass(frozen=True)
class MachineFigures:
    """Spec-sheet figures of one model: forces [N], times [s], mass [kg], radii [m]."""

    operating_weight_kg: float
    bucket_digging_force_n: float
    bucket_digging_at_rad: float
    arm_crowd_force_n: float
    arm_crowd_at_rad: float
    bucket_radius_m: float
    arm_radius_m: float
    boom_raise_s: float
    boom_lower_s: float
    arm_in_s: float
    arm_out_s: float
    bucket_curl_s: float
    bucket_dump_s: float
    swing_torque_nm: float
    relief_pressure_pa: float

    def rows(self) -> list[tuple[str, str]]:
        """(figure, value with unit) for a validation table."""
        return [
            ("operating weight", f"{self.operating_weight_kg / 1e3:.2f} t"),
            ("bucket digging force (ISO 6015)", f"{self.bucket_digging_force_n / 1e3:.1f} kN"),
            ("arm crowd force (ISO 6015)", f"{self.arm_crowd_force_n / 1e3:.1f} kN"),
            ("relief pressure", f"{self.relief_pressure_pa / 1e6:.1f} MPa"),
            ("swing torque", f"{self.swing_torque_nm / 1e3:.0f} kN m"),
            ("boom cylinder out / in", f"{self.boom_raise_s:.2f} / {self.boom_lower_s:.2f} s"),
            ("arm cylinder out / in", f"{self.arm_in_s:.2f} / {self.arm_out_s:.2f} s"),
            ("bucket cylinder out / in", f"{self.bucket_curl_s:.2f} / {self.bucket_dump_s:.2f} s"),
        ]


def _tip_in_arm(geometry: ExcavatorGeometry, bucket_rad: np.ndarray) -> np.ndarray:
    """Bucket tip T in the arm frame (origin H) for relative bucket angles [rad], shape (n, 2)."""
    c, s = np.cos(bucket_rad), np.sin(bucket_rad)
    tx, tz = geometry.tip
    mx, mz = geometry.M
    return np.stack([mx + c * tx - s * tz, mz + s * tx + c * tz], axis=-1)


def machine_figures(geometry: ExcavatorGeometry, hydraulics: Hydraulics,
                    linkage: Linkage | None = None, samples: int = 2001) -> MachineFigures:
    """Compute the spec-sheet figures of the model (see the module docstring)."""
    linkage = linkage if linkage is not None else Linkage(geometry)
    p = hydraulics.pressure_pa
    cyl = hydraulics.cylinders
    lim = linkage.joint_limits
    h = 1e-6

    def lever(joint: str, q: np.ndarray) -> np.ndarray:
        """|de/dq| [m/rad] of the joint's cylinder."""
        slope: np.ndarray = np.abs(linkage.extensions_from_joint(joint, q + h)
                                   - linkage.extensions_from_joint(joint, q - h)) / (2 * h)
        return slope

    qb = np.linspace(lim["bucket"][0], lim["bucket"][1], samples)
    r_bucket = math.hypot(*geometry.tip)
    f_bucket = cyl["bucket_cylinder"].push_force_n(p) * lever("bucket", qb) / r_bucket
    kb = int(np.argmax(f_bucket))

    r_arm = float(np.linalg.norm(_tip_in_arm(geometry, qb), axis=-1).max())
    qa = np.linspace(lim["arm"][0], lim["arm"][1], samples)
    f_arm = cyl["arm_cylinder"].push_force_n(p) * lever("arm", qa) / r_arm
    ka = int(np.argmax(f_arm))

    def stroke(name: str) -> float:
        c = geometry.cylinders[name]
        return c.stroke_max_m - c.stroke_min_m

    return MachineFigures(
        operating_weight_kg=float(sum(geometry.masses_kg.values())),
        bucket_digging_force_n=float(f_bucket[kb]), bucket_digging_at_rad=float(qb[kb]),
        arm_crowd_force_n=float(f_arm[ka]), arm_crowd_at_rad=float(qa[ka]),
        bucket_radius_m=r_bucket, arm_radius_m=r_arm,
        boom_raise_s=stroke("boom_cylinder") / cyl["boom_cylinder"].extend_speed_m_s,
        boom_lower_s=stroke("boom_cylinder") / cyl["boom_cylinder"].retract_speed_m_s,
        arm_in_s=stroke("arm_cylinder") / cyl["arm_cylinder"].extend_speed_m_s,
        arm_out_s=stroke("arm_cylinder") / cyl["arm_cylinder"].retract_speed_m_s,
        bucket_curl_s=stroke("bucket_cylinder") / cyl["bucket_cylinder"].extend_speed_m_s,
        bucket_dump_s=stroke("bucket_cylinder") / cyl["bucket_cylinder"].retract_speed_m_s,
        swing_torque_nm=hydraulics.swing.torque_limit_nm, relief_pressure_pa=p,
    )
