"""The excavator linkage in closed form: joint angles <-> cylinder lengths, every linkage point.

Conventions (docs/kinematics.md):
- Side view, x forward, z up, in the chassis frame (origin B on the swing axis).
- Joint angles are relative, child to parent, positive counter-clockwise seen with x to the right
  and z up (joint axis (0, -1, 0)): ``boom`` = angle of CH against the chassis' horizontal,
  ``arm`` = angle of HM against CH, ``bucket`` = angle of ML against HM.
- Absolute angles (the seed's convention) are angles against the horizontal:
  ``boom_abs = boom``, ``arm_abs = boom + arm``, ``bucket_abs = boom + arm + bucket``.

The seed computes piston directions with arcsin/arccos, which picks the wrong quadrant when the
arm points steeply down, and then makes the bucket cylinder length depend on the arm's absolute
angle. Here every loop is solved in the frame of the part that carries both of its ground pivots,
with atan2: each cylinder length depends only on its own joint's relative angle.

Every function takes floats or numpy arrays (broadcast elementwise) and returns the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.errors import (
    InvalidInputError,
    LinkageClosureError,
    StrokeLimitError,
    fmt_number,
)
from excavator_kinematics.geometry import CYLINDER_NAMES, Cylinder, ExcavatorGeometry, Vec2

ArrayLike = float | np.ndarray

JOINT_NAMES: tuple[str, str, str] = ("boom", "arm", "bucket")


def _circle_intersection(
    x0: ArrayLike, z0: ArrayLike, r0: ArrayLike, x1: ArrayLike, z1: ArrayLike, r1: ArrayLike,
    left: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intersection of circle (P0, r0) and circle (P1, r1).

    Returns ``(x, z, h2)``: the point on the left of P0->P1 (``left=True``) or on its right, and
    ``h2``, the squared half-chord; ``h2 < 0`` means the circles do not meet (the point is then
    NaN).
    """
    dx = np.subtract(x1, x0)
    dz = np.subtract(z1, z0)
    d2 = dx * dx + dz * dz
    d = np.sqrt(d2)
    a = (np.square(r0) - np.square(r1) + d2) / (2.0 * d)
    h2 = np.square(r0) - a * a
    with np.errstate(invalid="ignore"):
        h = np.sqrt(h2)
    if not left:
        h = -h
    ux, uz = dx / d, dz / d
    return x0 + a * ux - h * uz, z0 + a * uz + h * ux, h2


@dataclass(frozen=True)
class PinTriangle:
    """A cylinder between a pivot A on the parent and an eye B on the child, both hinged at P.

    ``a`` = A - P in the parent frame, ``b`` = B - P in the child frame at joint angle 0. The
    cylinder length is ``|R(q) b - a|``; the inverse is the law of cosines in the triangle
    P-A-B. ``branch`` (+1 / -1) says on which side of P->A the eye B lies in the assembled
    machine (an assembly mode, not derivable from the points alone).
    """

    cylinder: Cylinder
    joint: str
    a: Vec2
    b: Vec2
    branch: int

    @property
    def _pa(self) -> float:
        return math.hypot(*self.a)

    @property
    def _pb(self) -> float:
        return math.hypot(*self.b)

    def length(self, q: ArrayLike) -> np.ndarray:
        """Pin-to-pin length [m] at relative joint angle ``q`` [rad]."""
        c, s = np.cos(q), np.sin(q)
        bx = c * self.b[0] - s * self.b[1]
        bz = s * self.b[0] + c * self.b[1]
        return np.hypot(bx - self.a[0], bz - self.a[1])

    def angle(self, length: ArrayLike) -> np.ndarray:
        """Relative joint angle [rad] for a pin-to-pin length [m] (law of cosines)."""
        pa, pb = self._pa, self._pb
        cos_g = (pa * pa + pb * pb - np.square(length)) / (2.0 * pa * pb)
        bad = np.abs(cos_g) > 1.0
        if np.any(bad):
            worst = float(np.asarray(length)[bad].flat[0]) if np.ndim(length) else float(length)
            raise LinkageClosureError(
                f"{self.cylinder.name} length {worst:.4f} m cannot close the triangle: it must "
                f"lie within {abs(pa - pb):.4f}..{pa + pb:.4f} m"
            )
        gamma = np.arccos(cos_g)
        return (math.atan2(self.a[1], self.a[0]) + self.branch * gamma
                - math.atan2(self.b[1], self.b[0]))


class Linkage:
    """Closed-form boom/arm/bucket linkage of one excavator geometry."""

    def __init__(self, geometry: ExcavatorGeometry, bucket_toggle_margin_rad: float = 0.0175):
        self.geometry = g = geometry
        # Boom cylinder D->E: pivot C, D on the chassis, E on the boom. Assembled with E
        # counter-clockwise of C->D (the cylinder lifts the boom from below).
        self.boom_triangle = PinTriangle(
            g.cylinders["boom_cylinder"], "boom", (g.D[0] - g.C[0], g.D[1] - g.C[1]), g.E, +1
        )
        # Arm cylinder F->G: pivot H, F on the boom, G on the arm (behind H). Assembled with G
        # clockwise of H->F: the digging range (arm folded down) lies on that side.
        self.arm_triangle = PinTriangle(
            g.cylinders["arm_cylinder"], "arm", (g.F[0] - g.H[0], g.F[1] - g.H[1]), g.G, -1
        )
        self.bucket_cylinder = g.cylinders["bucket_cylinder"]
        self._toggle_q, self._toggle_length = self._bucket_toggle()
        self.bucket_toggle_margin_rad = bucket_toggle_margin_rad
        self.joint_limits: dict[str, tuple[float, float]] = self._joint_limits()
        self.extension_limits: dict[str, tuple[float, float]] = {
            name: tuple(sorted(float(e) for e in self.extensions_from_joint(name, np.array(lim))))
            for name, lim in zip(CYLINDER_NAMES, self.joint_limits.values(), strict=True)
        }

    # --- bucket four-bar (M-L-J-K on the arm, crank ML on the bucket) --------------------
    def bucket_points(self, q3: ArrayLike) -> tuple[np.ndarray, ...]:
        """``(Lx, Lz, Jx, Jz)`` in the arm frame [m] for a relative bucket angle ``q3`` [rad]."""
        g = self.geometry
        c, s = np.cos(q3), np.sin(q3)
        lx = g.M[0] + c * g.L[0] - s * g.L[1]
        lz = g.M[1] + s * g.L[0] + c * g.L[1]
        # J lies on the left of K->L (the seed's angle_JKL added to the direction of KL).
        jx, jz, h2 = _circle_intersection(g.K[0], g.K[1], g.JK, lx, lz, g.JL, left=True)
        if np.any(h2 < 0.0):
            q = np.broadcast_to(q3, np.shape(h2))[h2 < 0.0].flat[0] if np.ndim(h2) else q3
            raise LinkageClosureError(
                f"bucket angle {math.degrees(float(q)):.1f} deg: the side link ({g.JL} m) and "
                f"H link ({g.JK} m) cannot close the four-bar"
            )
        return lx, lz, jx, jz

    def _bucket_length(self, q3: ArrayLike) -> np.ndarray:
        g = self.geometry
        _, _, jx, jz = self.bucket_points(q3)
        return np.hypot(jx - g.I[0], jz - g.I[1])

    def _bucket_angle(self, length: ArrayLike) -> np.ndarray:
        g = self.geometry
        # J: on the circle about I (cylinder) and about K (H link), left of I->K.
        jx, jz, h2 = _circle_intersection(g.I[0], g.I[1], length, g.K[0], g.K[1], g.JK, True)
        # L: on the circle about M (bucket) and about J (side link), on the near side of the
        # toggle, i.e. right of M->J (J left of M->L).
        lx, lz, h2b = _circle_intersection(g.M[0], g.M[1], g.LM, jx, jz, g.JL, left=False)
        bad = (h2 < 0.0) | (h2b < 0.0) | np.isnan(h2b)
        if np.any(bad):
            worst = np.broadcast_to(length, np.shape(bad))[bad].flat[0] if np.ndim(bad) else length
            raise LinkageClosureError(
                f"bucket_cylinder length {float(worst):.4f} m cannot close the four-bar: the "
                f"extension must lie within {self.extension_limits['bucket_cylinder'][0]:.3f}.."
                f"{self.extension_limits['bucket_cylinder'][1]:.3f} m"
                if hasattr(self, "extension_limits") else
                f"bucket_cylinder length {float(worst):.4f} m cannot close the four-bar"
            )
        return np.arctan2(lz - g.M[1], lx - g.M[0]) - math.atan2(g.L[1], g.L[0])

    def _bucket_toggle(self) -> tuple[float, float]:
        """The four-bar's toggle: M, L, J collinear (|MJ| = LM + JL). Past it the bucket
        cylinder length repeats for a second angle. Returns (q3 [rad], cylinder length [m])."""
        g = self.geometry
        reach = g.LM + g.JL
        for left in (True, False):
            jx, jz, h2 = _circle_intersection(g.M[0], g.M[1], reach, g.K[0], g.K[1], g.JK, left)
            if h2 < 0.0:
                continue
            q = float(np.arctan2(jz - g.M[1], jx - g.M[0]) - math.atan2(g.L[1], g.L[0]))
            q = math.atan2(math.sin(q), math.cos(q))
            # Keep the candidate that the forward four-bar reproduces (the assembled branch).
            try:
                _, _, fx, fz = self.bucket_points(q)
            except LinkageClosureError:
                continue
            if math.hypot(float(fx) - float(jx), float(fz) - float(jz)) < 1e-6:
                return q, float(math.hypot(float(jx) - g.I[0], float(jz) - g.I[1]))
        raise LinkageClosureError("the bucket four-bar has no toggle pose: check links.side_link_m,"
                                  " links.h_link_m and points.arm.K / points.bucket.L")

    @property
    def bucket_toggle_angle(self) -> float:
        """Relative bucket angle [rad] at the four-bar's toggle (M, L, J collinear)."""
        return self._toggle_q

    @property
    def bucket_toggle_extension(self) -> float:
        """Bucket cylinder extension [m] at the toggle: its shortest on the usable branch."""
        return float(self.bucket_cylinder.extension(self._toggle_length))

    # --- limits --------------------------------------------------------------------------
    def _joint_limits(self) -> dict[str, tuple[float, float]]:
        limits: dict[str, tuple[float, float]] = {}
        for tri in (self.boom_triangle, self.arm_triangle):
            cyl = tri.cylinder
            ends = tri.angle(np.array([cyl.length(cyl.stroke_min_m), cyl.length(cyl.stroke_max_m)]))
            limits[tri.joint] = (float(ends.min()), float(ends.max()))
        cyl = self.bucket_cylinder
        q_long = float(self._bucket_angle(cyl.length(cyl.stroke_max_m)))
        q_hi = self._toggle_q - self.bucket_toggle_margin_rad
        if cyl.extension(self._toggle_length) < cyl.stroke_min_m:
            q_hi = min(q_hi, float(self._bucket_angle(cyl.length(cyl.stroke_min_m))))
        limits["bucket"] = (min(q_long, q_hi), max(q_long, q_hi))
        return limits

    def check_joints(self, boom: ArrayLike, arm: ArrayLike, bucket: ArrayLike) -> None:
        """Raise if a relative joint angle is NaN/inf or outside the range the strokes allow."""
        for name, value in zip(JOINT_NAMES, (boom, arm, bucket), strict=True):
            v = _first_outside(value, self.joint_limits[name], f"{name} joint angle", "rad")
            if v is not None:
                lo, hi = self.joint_limits[name]
                cyl = CYLINDER_NAMES[JOINT_NAMES.index(name)]
                raise StrokeLimitError(
                    f"{name} joint {fmt_number(math.degrees(v), '.1f')} deg outside "
                    f"{math.degrees(lo):.1f}..{math.degrees(hi):.1f} deg, the range the "
                    f"{cyl} stroke allows" + (self._toggle_note() if name == "bucket" else "")
                )

    def _toggle_note(self) -> str:
        return (f" (the upper end is {math.degrees(self.bucket_toggle_margin_rad):.1f} deg "
                f"short of the four-bar's toggle at {math.degrees(self._toggle_q):.1f} deg, past "
                "which the bucket cylinder loses control of the bucket)")

    def check_extensions(self, boom: ArrayLike, arm: ArrayLike, bucket: ArrayLike) -> None:
        """Raise if an extension is NaN/inf or outside its usable stroke range."""
        for name, value in zip(CYLINDER_NAMES, (boom, arm, bucket), strict=True):
            v = _first_outside(value, self.extension_limits[name], f"{name} extension", "m")
            if v is not None:
                lo, hi = self.extension_limits[name]
                cyl = self.geometry.cylinders[name]
                note = (f" (stroke {cyl.stroke_range}; below {lo:.3f} m the bucket four-bar is "
                        "past its toggle)" if name == "bucket_cylinder" and lo > cyl.stroke_min_m
                        else "")
                raise StrokeLimitError(f"{name} extension {fmt_number(v)} m outside "
                                       f"{lo:.3f}..{hi:.3f} m" + note)

    # --- joints <-> cylinders ------------------------------------------------------------
    def extensions_from_joint(self, joint_or_cylinder: str, q: ArrayLike) -> np.ndarray:
        """Extension [m] of one cylinder from its own relative joint angle [rad] (unchecked)."""
        name = joint_or_cylinder.removesuffix("_cylinder")
        if name == "boom":
            return self.boom_triangle.length(q) - self.boom_triangle.cylinder.rod_length_m
        if name == "arm":
            return self.arm_triangle.length(q) - self.arm_triangle.cylinder.rod_length_m
        if name == "bucket":
            return self._bucket_length(q) - self.bucket_cylinder.rod_length_m
        raise KeyError(f"unknown joint {joint_or_cylinder!r}; expected one of {JOINT_NAMES}")

    def joint_from_extension(self, joint_or_cylinder: str, extension: ArrayLike) -> np.ndarray:
        """Relative joint angle [rad] of one joint from its cylinder's extension [m] (unchecked)."""
        name = joint_or_cylinder.removesuffix("_cylinder")
        if name == "boom":
            return self.boom_triangle.angle(self.boom_triangle.cylinder.length(extension))
        if name == "arm":
            return self.arm_triangle.angle(self.arm_triangle.cylinder.length(extension))
        if name == "bucket":
            return self._bucket_angle(self.bucket_cylinder.length(extension))
        raise KeyError(f"unknown joint {joint_or_cylinder!r}; expected one of {JOINT_NAMES}")

    def extensions(
        self, boom: ArrayLike, arm: ArrayLike, bucket: ArrayLike, check: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cylinder extensions [m] (boom, arm, bucket) from relative joint angles [rad]."""
        if check:
            self.check_joints(boom, arm, bucket)
        return (self.extensions_from_joint("boom", boom), self.extensions_from_joint("arm", arm),
                self.extensions_from_joint("bucket", bucket))

    def joints(
        self, boom_ext: ArrayLike, arm_ext: ArrayLike, bucket_ext: ArrayLike, check: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Relative joint angles [rad] (boom, arm, bucket) from cylinder extensions [m]."""
        if check:
            self.check_extensions(boom_ext, arm_ext, bucket_ext)
        return (self.joint_from_extension("boom", boom_ext),
                self.joint_from_extension("arm", arm_ext),
                self.joint_from_extension("bucket", bucket_ext))

    # --- points --------------------------------------------------------------------------
    def points(self, boom: ArrayLike, arm: ArrayLike, bucket: ArrayLike) -> dict[str, np.ndarray]:
        """Every linkage point in the chassis frame, side view, as arrays ``[..., 2]`` (x, z) [m].

        Keys: C D E F H G I K M L J tip base (the seed's letters; tip = teeth T, base = bucket
        base corner).
        """
        g = self.geometry
        boom, arm, bucket = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                                  for v in (boom, arm, bucket)))
        out: dict[str, np.ndarray] = {"C": _stack(g.C[0] + 0 * boom, g.C[1] + 0 * boom),
                                      "D": _stack(g.D[0] + 0 * boom, g.D[1] + 0 * boom)}
        cb, sb = np.cos(boom), np.sin(boom)

        def in_boom(p: Vec2) -> np.ndarray:
            return _stack(g.C[0] + cb * p[0] - sb * p[1], g.C[1] + sb * p[0] + cb * p[1])

        for name in ("E", "F", "H"):
            out[name] = in_boom(getattr(g, name))
        a_abs = boom + arm
        ca, sa = np.cos(a_abs), np.sin(a_abs)
        hx, hz = out["H"][..., 0], out["H"][..., 1]

        def in_arm(x: ArrayLike, z: ArrayLike) -> np.ndarray:
            return _stack(hx + ca * x - sa * z, hz + sa * x + ca * z)

        for name in ("G", "I", "K", "M"):
            p = getattr(g, name)
            out[name] = in_arm(p[0], p[1])
        lx, lz, jx, jz = self.bucket_points(bucket)
        out["L"] = in_arm(lx, lz)
        out["J"] = in_arm(jx, jz)
        k_abs = a_abs + bucket
        ck, sk = np.cos(k_abs), np.sin(k_abs)
        mx, mz = out["M"][..., 0], out["M"][..., 1]
        for key, p in (("tip", g.tip), ("base", g.bucket_base)):
            out[key] = _stack(mx + ck * p[0] - sk * p[1], mz + sk * p[0] + ck * p[1])
        return out


def _first_outside(value: ArrayLike, limits: tuple[float, float], what: str, unit: str
                   ) -> float | None:
    """The first element outside ``limits`` (None if all inside); NaN/inf raise at once."""
    a = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(a)):
        raise InvalidInputError(f"{what} is {a[~np.isfinite(a)].flat[0]}: it must be a finite "
                                f"number [{unit}]")
    bad = (a < limits[0] - 1e-12) | (a > limits[1] + 1e-12)
    return float(a[bad].flat[0]) if np.any(bad) else None


def _stack(x: ArrayLike, z: ArrayLike) -> np.ndarray:
    return np.stack(np.broadcast_arrays(x, z), axis=-1)


def absolute_to_joint(
    boom_abs: ArrayLike, arm_abs: ArrayLike, bucket_abs: ArrayLike
) -> tuple[ArrayLike, ArrayLike, ArrayLike]:
    """Seed convention (angles of CH, HM, ML against the horizontal) -> relative joint angles."""
    return boom_abs, np.subtract(arm_abs, boom_abs), np.subtract(bucket_abs, arm_abs)


def joint_to_absolute(
    boom: ArrayLike, arm: ArrayLike, bucket: ArrayLike
) -> tuple[ArrayLike, ArrayLike, ArrayLike]:
    """Relative joint angles -> seed convention (angles against the horizontal)."""
    arm_abs = np.add(boom, arm)
    return boom, arm_abs, np.add(arm_abs, bucket)
