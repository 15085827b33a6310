"""Scripted bucket motions shared by the soil tests, benchmark and plots (no ROS, no MuJoCo).

- the reference scoop of ``design/soil.md`` (the upstream library's benchmark scoop);
- a straight cut of the excavator's bucket at a fixed angle of attack (the paper's Fig. 7);
- a dig-swing-dump cycle.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.earthmoving import FeeSoil, fee_blade_force
from excavator_sim.soil.forces import DiMaioForceModel, DiMaioParams
from excavator_sim.soil.terrain import Terrain, bucket_capacity_m2
from excavator_sim.soil.terrain_config import TerrainConfig

# --- the reference scoop (design/soil.md) -------------------------------------------------
REFERENCE_GRID = TerrainConfig(size_x_m=8.0, size_y_m=8.0, cell_xy_m=0.05, cell_z_m=0.01,
                               repose_angle_rad=0.85, relax_iterations=3, margin_cells=4)
REFERENCE_BUCKET = BucketPrism(j=(0.0, 0.0, 0.0), b=(0.0, 0.0, -0.5), t=(0.7, 0.0, -0.5),
                               width_m=0.5)


def reference_scoop_poses(n: int = 10_000) -> list[BucketPose]:
    """The bucket origin on the parabola z = 0.25 + a (x - 0.1)^2 from (-2.0, 1.5) through the
    vertex (0.1, 0.25) and up again symmetrically, ``n`` poses evenly in x; the teeth follow the
    path (pitch = -atan(dz/dx), REP-103 sign)."""
    a = (1.5 - 0.25) / (0.1 - (-2.0)) ** 2
    xs = np.linspace(-2.0, 2.2, n)
    poses = []
    for x in xs:
        slope = 2.0 * a * (x - 0.1)
        poses.append(BucketPose(float(x), 0.0, 0.25 + a * (x - 0.1) ** 2, -math.atan(slope), 0.0))
    return poses


# --- helpers for the excavator bucket -----------------------------------------------------
def pitch_for_attack(bucket: BucketPrism, attack_rad: float) -> float:
    """Pitch [rad] that puts the cutting plate B->T at ``attack_rad`` below the horizontal,
    teeth pointing towards -x (towards the machine, as when an excavator pulls a cut)."""
    tb = np.array(bucket.t) - np.array(bucket.b)
    body_angle = math.atan2(tb[2], tb[0])  # direction of B->T in the side view
    target = -(math.pi - attack_rad)  # pointing -x and down by attack
    return body_angle - target  # Ry(pitch) turns side-view angles by -pitch


def pose_for_tip(bucket: BucketPrism, tip: np.ndarray, pitch: float, yaw: float) -> BucketPose:
    """Bucket pose whose teeth centre T is at ``tip`` [m, world]."""
    probe = BucketPose(0.0, 0.0, 0.0, pitch, yaw)
    off = probe.rotation() @ np.array(bucket.t)
    return BucketPose(float(tip[0] - off[0]), float(tip[1] - off[1]), float(tip[2] - off[2]),
                      pitch, yaw)


@dataclass
class CutSample:
    """One step of a scripted cut: time [s], tip x [m], DiMaio and FEE forces [N]."""

    t: float
    tip_x: float
    depth_m: float
    radial_n: float
    vertical_n: float
    fee_radial_n: float
    fee_vertical_n: float
    load_m3: float
    shear_failures: int
    components: dict[str, np.ndarray]


def cut_tip_path(depth_m: float, x_start: float = 6.0, length_m: float = 1.5,
                 speed_m_s: float = 0.5, dt: float = 0.002) -> Iterator[tuple[float, np.ndarray,
                                                                             np.ndarray]]:
    """(t, tip position, tip velocity) of a cut towards -x: a 30 deg descent from 0.1 m above
    the ground to ``depth_m``, a horizontal drag of ``length_m``, a 30 deg climb out."""
    descent = (depth_m + 0.1) / math.tan(math.radians(30.0))
    legs = [
        (np.array([x_start, 0.0, 0.1]), np.array([x_start - descent, 0.0, -depth_m])),
        (np.array([x_start - descent, 0.0, -depth_m]),
         np.array([x_start - descent - length_m, 0.0, -depth_m])),
        (np.array([x_start - descent - length_m, 0.0, -depth_m]),
         np.array([x_start - 2 * descent - length_m, 0.0, 0.1])),
    ]
    t = 0.0
    for a, b in legs:
        seg = b - a
        dist = float(np.linalg.norm(seg))
        steps = max(1, round(dist / (speed_m_s * dt)))
        vel = seg / dist * speed_m_s
        for k in range(steps):
            yield t, a + seg * (k / steps), vel
            t += dt


def run_cut(bucket: BucketPrism, params: DiMaioParams, fee: FeeSoil, terrain: Terrain | None,
            attack_deg: float, depth_m: float, **path: float) -> list[CutSample]:
    """Drive the bucket along ``cut_tip_path`` at a fixed angle of attack. With a ``terrain``
    the soil is dug and the load is the real one; without, the ground is flat at z = 0 and the
    bucket carries nothing (the FEE's steady flat-blade cut)."""
    model = DiMaioForceModel(params, bucket)
    pitch = pitch_for_attack(bucket, math.radians(attack_deg))

    def flat(x: np.ndarray, _y: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(x))

    surface = terrain.height_at if terrain is not None else flat
    out: list[CutSample] = []
    for t, tip, vel in cut_tip_path(depth_m, **path):
        pose = pose_for_tip(bucket, tip, pitch, 0.0)
        if terrain is not None:
            terrain.update(pose)
        load = terrain.load_volume_m3 if terrain is not None else 0.0
        res = model.step(pose, vel, np.zeros(3), surface, load)
        d = float(res.depth_m.mean())
        fee_r = fee_v = 0.0
        if d > 0.0:
            f = fee_blade_force(fee, bucket.width_m, d, math.radians(attack_deg))
            fee_r, fee_v = -f.horizontal_n, -f.vertical_n  # against travel (+r), downwards
        out.append(CutSample(t, float(tip[0]), d, res.radial_n, res.vertical_n, fee_r, fee_v,
                             load, res.shear_failures, res.components))
    return out


# --- dig, swing, dump ---------------------------------------------------------------------
def best_carry_pitch(bucket: BucketPrism, repose_rad: float) -> float:
    """The pitch [rad] at which the bucket holds the most soil."""
    best, best_area = 0.0, -1.0
    for p in np.linspace(-math.pi, math.pi, 721):
        cp, sp = math.cos(p), math.sin(p)
        uz = [(x * cp + z * sp, -x * sp + z * cp) for x, z in bucket.side_view]
        area = bucket_capacity_m2(uz[0], uz[1], uz[2], repose_rad)[0]
        if area > best_area:
            best, best_area = float(p), area
    return best


def dump_pitch(bucket: BucketPrism, repose_rad: float, carry: float) -> float:
    """The first pitch past ``carry`` (turning the teeth down) at which the bucket holds
    nothing, plus 10 deg to be sure."""
    for p in np.linspace(carry, carry + 2 * math.pi, 721):
        cp, sp = math.cos(p), math.sin(p)
        uz = [(x * cp + z * sp, -x * sp + z * cp) for x, z in bucket.side_view]
        if bucket_capacity_m2(uz[0], uz[1], uz[2], repose_rad)[0] < 1e-12:
            return float(p) + math.radians(10.0)
    raise ValueError("this bucket never empties")  # a triangle always does; kept for safety


def dig_swing_dump(terrain: Terrain, bucket: BucketPrism, dt: float = 0.01,
                   swing_rate_rad_s: float = 0.5) -> Iterator[tuple[str, BucketPose]]:
    """Phases ('dig', 'curl', 'swing', 'dump') and poses of one excavator work cycle around a
    machine at the world origin: a 0.35 m deep cut towards the machine at 30 deg attack, curl
    and lift to 1 m, swing 90 deg left at ``swing_rate_rad_s``, open the bucket to dump."""
    attack = pitch_for_attack(bucket, math.radians(30.0))
    for _t, tip, _v in cut_tip_path(0.35, x_start=6.0, length_m=1.2, speed_m_s=0.5, dt=dt):
        if tip[2] > 0.05 and _t > 1.0:
            break  # stop at the start of the climb: curl instead
        yield "dig", pose_for_tip(bucket, tip, attack, 0.0)
    carry = best_carry_pitch(bucket, terrain.config.repose_angle_rad)
    start = tip.copy()
    n = round(1.5 / dt)
    for k in range(1, n + 1):
        s = k / n
        pitch = attack + (carry - attack) * s
        tip_k = start + np.array([0.0, 0.0, 1.3 * s])
        yield "curl", pose_for_tip(bucket, tip_k, pitch, 0.0)
    last = pose_for_tip(bucket, start + np.array([0.0, 0.0, 1.3]), carry, 0.0)
    radius = math.hypot(last.x, last.y)
    n = round((math.pi / 2) / swing_rate_rad_s / dt)
    for k in range(1, n + 1):
        yaw = (math.pi / 2) * k / n
        yield "swing", BucketPose(radius * math.cos(yaw), radius * math.sin(yaw), last.z,
                                  carry, yaw)
    dump = dump_pitch(bucket, terrain.config.repose_angle_rad, carry)
    n = round(1.5 / dt)
    for k in range(1, n + 1):
        pitch = carry + (dump - carry) * k / n  # teeth over: the opening turns down
        yield "dump", BucketPose(0.0, radius, last.z, pitch, math.pi / 2)


def warm_up(terrain_config: TerrainConfig, params: DiMaioParams, bucket: BucketPrism,
            dt: float = 0.1) -> float:
    """One coarse dig-swing-dump cycle on a throwaway terrain, with the forces of every pose:
    the numba kernels load (or compile) now, not at the first pose of a live run (1-3 s on a
    2-core host: the first wrench would answer a pose that old). Returns the peak load [m^3]
    (> 0: the cut, the carry and the dump kernels all ran). The throwaway grid has the user's
    cells and soil but its own extent, around the cycle (any user grid works)."""
    import dataclasses

    grid = dataclasses.replace(terrain_config, size_x_m=8.0, size_y_m=8.0, centre_x_m=3.5,
                               centre_y_m=3.0, initial_height_m=0.0)
    terrain = Terrain(grid, bucket)
    forces = DiMaioForceModel(params, bucket)
    peak = 0.0
    zero = np.zeros(3)
    for _phase, pose in dig_swing_dump(terrain, bucket, dt=dt):
        terrain.update(pose)
        forces.step(pose, zero, zero, terrain.surface_m, terrain.load_volume_m3)
        peak = max(peak, float(terrain.load_volume_m3))
    return peak
