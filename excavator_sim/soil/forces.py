"""Bucket-soil forces after DiMaio et al. (1998), "A Virtual Excavator for Controller
Development and Evaluation", section 4, integrated over the bucket width (their section 4.6).

Cutting frame (paper Fig. 4), in the vertical plane of the bucket: r the horizontal direction
the teeth point to, z up, alpha the angle of attack (cutting plate T-B against the horizontal,
positive when the teeth point down), t = (cos a, -sin a) along the plate towards the teeth,
n = (sin a, cos a) its normal. The cutting edge is cut into ``slices`` strips across the width;
each strip has its own penetration, stiffness centre and shear failure, so uneven ground gives
an uneven force and a yaw moment. Per strip (share 1/N of every bucket constant):

1. viscous friction  f = -R(a) diag(s_p b_t0, s_p b_n0) R(a)^T v,  tau = -s_p b_a0 a_dot
2. stiffness about the centre (x_c, a_c): (f_t, f_n) = diag(k_t, k_n) R^T (x_c - x),
   tau = -k_a (a - a_c); shear failure when |f_n| >= S (w/N) d_p resets the centre to the
   current pose: the saw-tooth of soil failing in chunks. The paper writes one scalar k; a
   diagonal k in the cutting frame (like its B) with k_t < k_n lets a flat plate slice (low
   tangential resistance) and a steep one push (high normal resistance), which is what gives
   the paper's Fig. 7 (larger radial force at 40 deg than at 10 deg). k_t = k_n is the paper's.
3. load  f = (-eps V sgn(v_r), -rho g V) with V the real load volume from the terrain model
   (not the paper's 2D integral); the churning term eps V opposes the radial motion and acts
   only while cutting; the weight always. It acts at the middle of the cutting plate (the
   paper's torque 0.5 s_bucket (f_z cos a - f_r sin a) is the moment of that placement).
   With the load's mass on the simulator's bucket body (``weight_on_body``: the per-cell
   bucket soil) the weight is left out of the wrench: gravity pulls that mass at its own
   centre, and moves it with its inertia.
4. Coulomb friction  f_t = -mu sgn(v_t) |f_bn + f_kn + f_ln| along the plate, while cutting.

Penetration: d_p is the depth of the strip's tip below the ground surface, taken as the highest
terrain just ahead of the tip (at the tip, lookahead/2 and lookahead along the tip's horizontal
motion): the terrain model has already removed the soil inside the bucket, so the undisturbed
surface the edge is cutting into lies ahead of it. s_p = min(s_bucket, d_p / sin a) is the
submerged plate length (all of it when a <= 0).

Output: the resultant wrench on the bucket, in ``world``, about the bucket origin.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.errors import SoilInputError

GRAVITY_M_S2 = 9.81
SurfaceFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # world x, y [m] -> height [m]


@dataclass(frozen=True)
class DiMaioParams:
    """Constants of the force model for the whole bucket (SI)."""

    damping_tangential_n_s_m2: float = 2000.0  # b_t0 [N s/m per m of penetration]
    damping_normal_n_s_m2: float = 1000.0  # b_n0
    damping_rotational_n_m_s_rad_m: float = 2000.0  # b_a0 [N m s/rad per m]
    stiffness_tangential_n_m: float = 5.0e3  # k_t
    stiffness_normal_n_m: float = 2.0e5  # k_n
    stiffness_rotational_n_m_rad: float = 2.0e4  # k_a
    shear_strength_pa: float = 8.5e4  # S (recalibrated to the complete FEE, docs/soil.md)
    accumulation_n_m3: float = 2.0e3  # eps
    density_kg_m3: float = 1800.0  # rho
    bucket_friction: float = 0.3  # mu [-]
    slices: int = 8
    lookahead_m: float = 0.1
    velocity_epsilon_m_s: float = 1e-3  # sgn(v) = v / max(|v|, eps): no chatter at rest
    gravity_m_s2: float = GRAVITY_M_S2


@dataclass
class ForceResult:
    """One evaluation. Forces [N] and torque [N m] in ``world``, torque about the bucket
    origin. ``components`` holds each of the paper's four force terms (world, [N])."""

    force: np.ndarray
    torque: np.ndarray
    components: dict[str, np.ndarray]
    radial_dir: np.ndarray  # unit horizontal r [-]
    attack_rad: float
    depth_m: np.ndarray  # d_p per slice
    penetration_m: np.ndarray  # s_p per slice
    shear_failures: int  # slices that failed in this step
    in_contact: bool
    extras: dict[str, float] = field(default_factory=dict)

    @property
    def radial_n(self) -> float:
        return float(self.force @ self.radial_dir)

    @property
    def vertical_n(self) -> float:
        return float(self.force[2])


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise a x b for (..., 3) arrays (np.cross costs ~20 us of axis handling per call)."""
    ax, ay, az = a[..., 0], a[..., 1], a[..., 2]
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]
    return np.stack((ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx), axis=-1)


class DiMaioForceModel:
    """Stateful (stiffness centres) force model for one bucket."""

    def __init__(self, params: DiMaioParams, bucket: BucketPrism) -> None:
        self.params = params
        self.bucket = bucket
        n = params.slices
        self._centre = np.full((n, 3), np.nan)
        self._alpha_c = np.full(n, np.nan)

    def reset(self) -> None:
        self._centre[:] = np.nan
        self._alpha_c[:] = np.nan

    def step(
        self,
        pose: BucketPose,
        linear_velocity: np.ndarray,
        angular_velocity: np.ndarray,
        surface: SurfaceFn,
        load_volume_m3: float,
        weight_on_body: bool = False,
    ) -> ForceResult:
        """Wrench on the bucket at ``pose`` moving with the bucket origin's linear velocity
        [m/s] and angular velocity [rad/s] (world), over the ground ``surface``, carrying
        ``load_volume_m3`` of soil. ``weight_on_body``: the load's mass is on the simulator's
        bucket body (the per-cell bucket soil, ``Terrain.load_payload``), so gravity already
        pulls it there; the wrench then leaves the weight ``-rho g V`` out (it would count
        twice) but keeps what the weight does to the soil: the plate's Coulomb friction."""
        p = self.params
        v0 = np.asarray(linear_velocity, dtype=float).reshape(3)
        w0 = np.asarray(angular_velocity, dtype=float).reshape(3)
        if not (np.all(np.isfinite(v0)) and np.all(np.isfinite(w0))):
            raise SoilInputError(
                f"bucket twist linear={v0.tolist()} m/s angular={w0.tolist()} rad/s is not "
                "finite; send finite velocities of the bucket origin in world"
            )
        if not (math.isfinite(load_volume_m3) and load_volume_m3 >= 0.0):
            raise SoilInputError(f"bucket load volume {load_volume_m3!r} m^3 must be finite "
                                 "and >= 0")
        rot = pose.rotation()
        origin = pose.position
        b_local = np.array(self.bucket.b)
        t_local = np.array(self.bucket.t)
        tip = rot @ t_local + origin
        plate = rot @ (t_local - b_local)  # B -> T
        s_bucket = float(np.linalg.norm(plate))
        t_hat = plate / s_bucket
        lateral = rot[:, 1]
        horiz = math.hypot(t_hat[0], t_hat[1])
        if horiz > 1e-9:
            r_hat = np.array([t_hat[0] / horiz, t_hat[1] / horiz, 0.0])
        else:  # plate vertical: r is the bucket's heading
            r_hat = np.array([math.cos(pose.yaw), math.sin(pose.yaw), 0.0])
        alpha = math.atan2(-t_hat[2], horiz)
        ca, sa = math.cos(alpha), math.sin(alpha)
        z_hat = np.array([0.0, 0.0, 1.0])
        t_hat = ca * r_hat - sa * z_hat
        n_hat = sa * r_hat + ca * z_hat
        e_alpha = np.array([-r_hat[1], r_hat[0], 0.0])  # z x r  # rotation about it increases alpha
        alpha_dot = float(w0 @ e_alpha)

        n = p.slices
        share = 1.0 / n
        offsets = ((np.arange(n) + 0.5) / n - 0.5) * self.bucket.width_m
        points = tip + offsets[:, None] * lateral  # slice tips
        vel = v0 + _cross(w0, points - origin)
        tip_v = vel.mean(axis=0)
        vh = math.hypot(tip_v[0], tip_v[1])
        ahead = (np.array([tip_v[0] / vh, tip_v[1] / vh, 0.0]) if vh > 1e-3 else r_hat)
        look = np.concatenate((points, points + 0.5 * p.lookahead_m * ahead,
                               points + p.lookahead_m * ahead))
        ground = np.asarray(surface(look[:, 0], look[:, 1]), dtype=float).reshape(3, n).max(0)
        depth = np.maximum(ground - points[:, 2], 0.0)
        if sa > 1e-6:
            pen = np.minimum(s_bucket, depth / sa)
        else:
            pen = np.where(depth > 0.0, s_bucket, 0.0)
        contact = depth > 0.0

        # every slice at once (arrays over the N strips)
        vt = vel @ t_hat
        vn = vel @ n_hat
        vr = vel @ r_hat
        eps_v = p.velocity_epsilon_m_s
        any_contact = bool(contact.any())
        # 3. load: the weight always, the churning while cutting; at the plate's middle
        load_v = load_volume_m3 * share
        fl_z = -p.density_kg_m3 * p.gravity_m_s2 * load_v
        fl_r = (-p.accumulation_n_m3 * load_v * vr / np.maximum(np.abs(vr), eps_v)
                if any_contact else np.zeros(n))
        fl = fl_r[:, None] * r_hat + fl_z * z_hat
        mid = points - 0.5 * s_bucket * t_hat
        # what acts on the bucket: without the weight when the mass is on the body
        fl_out = fl_r[:, None] * r_hat if weight_on_body else fl
        f_load = fl_out.sum(axis=0)
        # 1. viscous friction
        fb_t = np.where(contact, -pen * p.damping_tangential_n_s_m2 * share * vt, 0.0)
        fb_n = np.where(contact, -pen * p.damping_normal_n_s_m2 * share * vn, 0.0)
        tau_alpha = float(-(pen[contact]).sum() * p.damping_rotational_n_m_s_rad_m * share
                          * alpha_dot)
        # 2. stiffness about the centres, with shear failure
        self._centre[~contact] = np.nan  # out of the soil: no stored stiffness
        fresh = contact & np.isnan(self._centre[:, 0])
        self._centre[fresh] = points[fresh]
        self._alpha_c[fresh] = alpha
        d = self._centre - points
        fk_t = np.where(contact, p.stiffness_tangential_n_m * share * (d @ t_hat), 0.0)
        fk_n = np.where(contact, p.stiffness_normal_n_m * share * (d @ n_hat), 0.0)
        fail = contact & (np.abs(fk_n) >= p.shear_strength_pa * self.bucket.width_m * share
                          * depth)
        failures = int(fail.sum())
        self._centre[fail] = points[fail]
        self._alpha_c[fail] = alpha
        fk_t[fail] = 0.0
        fk_n[fail] = 0.0
        if any_contact:
            tau_alpha += float(-p.stiffness_rotational_n_m_rad * share
                               * (alpha - self._alpha_c[contact]).sum())
        # 4. Coulomb friction on the plate's normal load
        fl_n = fl @ n_hat
        fc_t = np.where(contact, -p.bucket_friction * vt / np.maximum(np.abs(vt), eps_v)
                        * np.abs(fb_n + fk_n + fl_n), 0.0)
        fv = fb_t[:, None] * t_hat + fb_n[:, None] * n_hat
        fs = fk_t[:, None] * t_hat + fk_n[:, None] * n_hat
        fc = fc_t[:, None] * t_hat
        at = points - 0.5 * pen[:, None] * t_hat  # middle of the submerged plate
        arms = np.concatenate((mid - origin, at - origin))
        torque = _cross(arms, np.concatenate((fl_out, fv + fs + fc))).sum(axis=0)
        f_visc = fv.sum(axis=0)
        f_stiff = fs.sum(axis=0)
        f_coul = fc.sum(axis=0)
        torque += tau_alpha * e_alpha
        force = f_visc + f_stiff + f_load + f_coul
        return ForceResult(
            force=force,
            torque=torque,
            components={"viscous": f_visc, "stiffness": f_stiff, "load": f_load,
                        "coulomb": f_coul},
            radial_dir=r_hat,
            attack_rad=alpha,
            depth_m=depth,
            penetration_m=pen,
            shear_failures=failures,
            in_contact=any_contact,
            extras={"tau_alpha_n_m": tau_alpha, "alpha_dot_rad_s": alpha_dot},
        )
