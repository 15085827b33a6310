"""Impedance teleoperation after DiMaio et al. 1998, eq. (1), and the operator's force feedback.

Eq. (1), per task coordinate of ``X = (r, z, alpha)`` (:mod:`.jacobian`)::

    M_d s^2 X = F_0 - F_e + (B_d s + K_d)(X_0 - X)

``X_0`` is the set-point (the hand controller's pose, scaled), ``F_0`` a commanded force,
``F_e`` the force the bucket exerts on the environment: the soil's wrench on the bucket is
``-F_e``. Table 1 of the paper gives the excavator's measured ``B = 5000 N s/m`` and
``K = 1e4..1e5 N/m`` with ``M_d`` the machine's mass (their Takeuchi TB035, ~3.5 t); it has no
angular values (defaults in :class:`ImpedanceParams`). The model is integrated exactly for
inputs held over a step (zero-order hold, the matrix exponential of the 2x2 system; see
:class:`ImpedanceModel` for how the ``B_d s X_0`` term is kept step-invariant); in contact the
steady state is ``X = X_0 + (F_0 - F_e) / K_d``.

The soil wrench (``soil/wrench``: force and torque in ``world`` at the bucket origin M) becomes
generalised forces on X by virtual work at the tip: ``F_r = f . e_r``, ``F_z = f . e_z``,
``F_alpha = (tau + (M - tip) x f) . e_alpha`` with ``e_r`` the boom plane's horizontal direction,
``e_alpha = -y`` of the boom plane (positive alpha = bucket curling out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.errors import ConfigError, InvalidInputError


@dataclass(frozen=True)
class ImpedanceParams:
    """Desired impedance per task coordinate (r, z share the translational values).

    Defaults: Table 1 of DiMaio et al. 1998 (B = 5000 N s/m, K = 1e5 N/m, the upper end of the
    measured 1e4..1e5) with M_d = 3500 kg (the paper's TB035 mini-excavator, "M_d equal to the
    excavator mass"). Angular values are not in the paper: chosen as the translational ones times
    (0.5 m)^2, which gives the same natural frequency (5.3 rad/s) and damping ratio (0.13)."""

    mass_kg: float = 3500.0
    damping_n_s_per_m: float = 5000.0
    stiffness_n_per_m: float = 1.0e5
    inertia_kg_m2: float = 875.0
    angular_damping_nm_s_per_rad: float = 1250.0
    angular_stiffness_nm_per_rad: float = 2.5e4

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not math.isfinite(value) or value <= 0.0:
                raise ConfigError(f"impedance.{name} = {value:.6g} must be a positive number")

    @property
    def m(self) -> np.ndarray:
        return np.array([self.mass_kg, self.mass_kg, self.inertia_kg_m2])

    @property
    def b(self) -> np.ndarray:
        return np.array([self.damping_n_s_per_m, self.damping_n_s_per_m,
                         self.angular_damping_nm_s_per_rad])

    @property
    def k(self) -> np.ndarray:
        return np.array([self.stiffness_n_per_m, self.stiffness_n_per_m,
                         self.angular_stiffness_nm_per_rad])


class ImpedanceModel:
    """The discrete model of eq. (1): X [m, m, rad] and its rate, per axis.

    ``X = (B_d s + K_d)/(M_d s^2 + B_d s + K_d) X_0 + 1/(M_d s^2 + B_d s + K_d) (F_0 - F_e)``
    is realised as ``X = B_d xi' + K_d xi + y`` with ``M_d xi'' + B_d xi' + K_d xi = X_0`` and
    ``M_d y'' + B_d y' + K_d y = F_0 - F_e``: the set-point enters without its derivative, so the
    zero-order-hold discretisation is step-invariant (a set-point step is reproduced exactly at
    the sample times, whatever the control rate)."""

    def __init__(self, params: ImpedanceParams, x: np.ndarray | None = None):
        self.params = params
        self._s = np.zeros((3, 4))  # per axis: xi, xi', y, y'
        self._x0 = np.zeros(3)
        self._cache: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        self.reset(np.zeros(3) if x is None else x)

    @property
    def x(self) -> np.ndarray:
        """X = (r [m], z [m], alpha [rad])."""
        p = self.params
        return p.b * self._s[:, 1] + p.k * self._s[:, 0] + self._s[:, 2]

    @property
    def v(self) -> np.ndarray:
        """dX/dt with the last set-point."""
        p = self.params
        xi_dd = (self._x0 - p.b * self._s[:, 1] - p.k * self._s[:, 0]) / p.m
        rate: np.ndarray = p.b * xi_dd + p.k * self._s[:, 1] + self._s[:, 3]
        return rate

    def reset(self, x: np.ndarray, v: np.ndarray | None = None) -> None:
        """Rest at X = ``x`` (set-point there too), with rate ``v`` if given."""
        x = np.asarray(x, dtype=float).reshape(3)
        self._s = np.zeros((3, 4))
        self._s[:, 0] = x / self.params.k
        if v is not None:
            self._s[:, 3] = np.asarray(v, dtype=float).reshape(3)
        self._x0 = x.copy()

    def _discrete(self, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Per axis: Ad (3, 2, 2), Bd (3, 2) of ``m q'' + b q' + k q = u`` over ``dt``."""
        hit = self._cache.get(dt)
        if hit is not None:
            return hit
        # here, not at the top: scipy.linalg is a third of teleop_node's start-up (~0.2 s of
        # CPU, seconds on a loaded host) and only the impedance mode needs it
        from scipy.linalg import expm

        ads, bds = [], []
        for m, b, k in zip(self.params.m, self.params.b, self.params.k, strict=True):
            big = np.zeros((3, 3))
            big[0, 1] = 1.0
            big[1] = [-k / m, -b / m, 1.0 / m]
            e = expm(big * dt)
            ads.append(e[:2, :2])
            bds.append(e[:2, 2])
        out = (np.array(ads), np.array(bds))
        if len(self._cache) > 8:
            self._cache.clear()
        self._cache[dt] = out
        return out

    def step(self, x0: np.ndarray, soil_force: np.ndarray, dt: float,
             commanded_force: np.ndarray | None = None) -> np.ndarray:
        """Advance ``dt`` [s] with the set-point ``x0``, the soil's generalised force on the
        bucket (``-F_e``) and ``F_0``, all held over the step; returns X."""
        if not (math.isfinite(dt) and dt > 0.0):
            raise InvalidInputError(f"impedance step dt = {dt:.6g} s must be > 0")
        f0 = np.zeros(3) if commanded_force is None else np.asarray(commanded_force, float)
        x0 = np.asarray(x0, float).reshape(3)
        force = np.asarray(soil_force, float).reshape(3) + f0
        if not (np.all(np.isfinite(x0)) and np.all(np.isfinite(force))):
            raise InvalidInputError(f"impedance inputs have NaN/inf: set-point {x0.tolist()}, "
                                    f"force {force.tolist()}")
        ad, bd = self._discrete(float(dt))
        xi = np.einsum("aij,aj->ai", ad, self._s[:, :2]) + bd * x0[:, None]
        y = np.einsum("aij,aj->ai", ad, self._s[:, 2:]) + bd * force[:, None]
        self._s = np.concatenate([xi, y], axis=1)
        self._x0 = x0.copy()
        return self.x

    def steady_state(self, x0: np.ndarray, soil_force: np.ndarray,
                     commanded_force: np.ndarray | None = None) -> np.ndarray:
        """Where the model settles: ``X_0 + (F_0 - F_e) / K_d``."""
        f0 = np.zeros(3) if commanded_force is None else np.asarray(commanded_force, float)
        settled: np.ndarray = (np.asarray(x0, float)
                               + (np.asarray(soil_force, float) + f0) / self.params.k)
        return settled


def soil_force_in_task(force_world: np.ndarray, torque_world: np.ndarray,
                       bucket_origin_world: np.ndarray, tip_world: np.ndarray,
                       heading_rad: float) -> np.ndarray:
    """The soil's wrench on the bucket (force [N] and torque [N m] in ``world`` at the bucket
    origin M) as generalised forces on X = (r, z, alpha): (N, N, N m)."""
    f = np.asarray(force_world, float).reshape(3)
    tau = np.asarray(torque_world, float).reshape(3)
    c, s = math.cos(heading_rad), math.sin(heading_rad)
    e_r = np.array([c, s, 0.0])
    e_alpha = np.array([s, -c, 0.0])  # -y of the boom plane
    moment = tau + np.cross(np.asarray(bucket_origin_world, float)
                            - np.asarray(tip_world, float), f)
    return np.array([f @ e_r, f[2], moment @ e_alpha])


@dataclass(frozen=True)
class FeedbackScaling:
    """Machine -> hand controller: device force [N] per machine force [N], device torque [N m]
    per machine torque [N m], and the device's range (saturation)."""

    force_scale: float = 1.0e-3
    torque_scale: float = 1.0e-3
    max_force_n: float = 10.0
    max_torque_nm: float = 1.0

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not math.isfinite(value) or value < 0.0:
                raise ConfigError(f"feedback.{name} = {value:.6g} must be >= 0")

    def device_wrench(self, task_force: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """Generalised soil force on X -> (force (x, y, z) [N], torque (x, y, z) [N m]) for the
        device, whose x = r (out), z = up and pitch about -y = alpha; and whether it saturated.
        The force saturates on its magnitude (its direction is kept)."""
        fr, fz, fa = (float(v) for v in task_force)
        force = np.array([fr, 0.0, fz]) * self.force_scale
        saturated = False
        norm = float(np.hypot(force[0], force[2]))
        if norm > self.max_force_n:
            force *= self.max_force_n / norm
            saturated = True
        t = fa * self.torque_scale
        if abs(t) > self.max_torque_nm:
            t = math.copysign(self.max_torque_nm, t)
            saturated = True
        return force, np.array([0.0, -t, 0.0]), saturated


@dataclass
class HandMapping:
    """Hand controller pose -> set-point X_0 with indexing (a clutch): at engagement the
    current hand pose is paired with the machine's current X, then
    ``X_0 = X_ref + scale * (P - P_ref)`` with ``P = (x, z, pitch about -y)`` of the device."""

    position_scale: float = 10.0
    angle_scale: float = 1.0
    _ref_hand: np.ndarray | None = None
    _ref_task: np.ndarray | None = None

    @property
    def engaged(self) -> bool:
        return self._ref_hand is not None

    def engage(self, hand: np.ndarray, task: np.ndarray) -> None:
        self._ref_hand = np.asarray(hand, float).copy()
        self._ref_task = np.asarray(task, float).copy()

    def release(self) -> None:
        self._ref_hand = self._ref_task = None

    def setpoint(self, hand: np.ndarray) -> np.ndarray:
        if self._ref_hand is None or self._ref_task is None:
            raise InvalidInputError("hand mapping not engaged: call engage() first")
        scale = np.array([self.position_scale, self.position_scale, self.angle_scale])
        task: np.ndarray = self._ref_task + scale * (np.asarray(hand, float) - self._ref_hand)
        return task


def hand_coordinates(position: tuple[float, float, float],
                     quaternion_xyzw: tuple[float, float, float, float]) -> np.ndarray:
    """Device pose -> P = (x [m], z [m], pitch [rad]), pitch = the angle of the device's
    rotated x axis above its x-y plane, i.e. the rotation about -y (counter-clockwise seen with
    x right, z up: the sign of alpha)."""
    x, y, z, w = quaternion_xyzw
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if not math.isfinite(n) or n < 1e-9:
        raise InvalidInputError(f"hand pose orientation {quaternion_xyzw} is not a rotation "
                                "(zero or NaN quaternion)")
    x, y, z, w = x / n, y / n, z / n, w / n
    # Rotated x axis: first column of the rotation matrix.
    ax = 1.0 - 2.0 * (y * y + z * z)
    ay = 2.0 * (x * y + w * z)
    az = 2.0 * (x * z - w * y)
    pitch = math.atan2(az, math.hypot(ax, ay))
    px, _, pz = (float(v) for v in position)
    return np.array([px, pz, pitch])
