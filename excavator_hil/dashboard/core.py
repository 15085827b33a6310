"""The dashboard's pure core: the view model, tested without ROS, Redis or a browser.

- ``TargetChecker``: a bucket-tip target + pitch -> the IK's own verdict (``solve_batch`` status
  and message: the limit it hits) before anything is sent, and the ``target_pose`` to send;
  ``verdict`` takes the page's fields as a client sent them (any JSON value: strings, NaN, a
  list...) and refuses what is no number or outside a field's range, naming the range.
- ``JointReadout``: ``joint_states`` names/positions -> joint angles, cylinder extensions, the
  base pose in ``world``, and the tip/pitch by forward kinematics.
- ``SideView``: the linkage drawn in the boom plane (FK points of ``Linkage.points``).
- ``TerrainGrid``: the soil grid, kept up to date from ``soil/terrain_patch``; heights by
  bilinear interpolation, the profile under the boom, a coarse grid for the 3D view.
- ``RollingSeries``: the last minute of a signal, thinned to a maximum rate (the charts).
- ``BridgeWatch``/``BridgeView``: the Redis keys of the PLC bridge -> status, reason, state
  bits, counters, rates and a clear "bridge down" / "PLC down" verdict.
- ``DriveLimits``: the twist sliders' envelope (the bridge's ``max_*``) and the Redis values.

Units: SI (m, rad, s, m/s, rad/s, N, m^3) everywhere; degrees only in text for people.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from excavator_kinematics.bucket_orientation import bucket_quaternion
from excavator_kinematics.errors import fmt_number
from excavator_kinematics.geometry import CYLINDER_NAMES, ExcavatorGeometry
from excavator_kinematics.inverse_kinematics import ACTIVE_JOINTS, IKStatus, InverseKinematics
from excavator_sim.terrain_patch import flat_to_patch
from plc_bridge import redis_keys as keys

# --- targets ------------------------------------------------------------------------------------

# What each IK status means for the operator: the limit that the target hits.
LIMIT_NAMES: dict[IKStatus, str] = {
    IKStatus.OK: "",
    IKStatus.NOT_FINITE: "input (NaN/inf)",
    IKStatus.OUT_OF_REACH: "reach (arm cylinder stroke)",
    IKStatus.SWING_LIMIT: "swing limits",
    IKStatus.BOOM_LIMIT: "boom cylinder stroke",
    IKStatus.ARM_LIMIT: "arm cylinder stroke",
    IKStatus.BUCKET_LIMIT: "bucket cylinder stroke / four-bar toggle",
}


# Verdicts on the input itself, before any reach: shown as "refused", not "unreachable".
NOT_A_NUMBER = "NOT_A_NUMBER"    # a field holds no number (empty, text, a list, true...)
OUT_OF_RANGE = "OUT_OF_RANGE"    # a number outside its field's range (never clamped into it)
INPUT_STATUSES = (NOT_A_NUMBER, OUT_OF_RANGE, IKStatus.NOT_FINITE.name)


@dataclass(frozen=True)
class Reachability:
    """The verdict on one target, before it is sent: the input's own (a field that holds no
    number or one outside its range) or else the IK's."""

    ok: bool
    status: str                 # IKStatus name (OK, OUT_OF_REACH, ...), NOT_A_NUMBER, OUT_OF_RANGE
    limit: str                  # the limit it hits ("" when reachable)
    message: str                # the IK's own explanation (value and limit), or a summary
    q: tuple[float, ...] | None = None            # swing, boom, arm, bucket [rad]
    extensions: tuple[float, ...] | None = None   # boom, arm, bucket cylinder [m]
    # x, y, z [m], pitch [rad] of the fields, when each is a finite number within its range
    target: tuple[float, float, float, float] | None = None

    @property
    def headline(self) -> str:
        """The page's one-line verdict."""
        if self.ok:
            return "reachable"
        kind = "refused" if self.status in INPUT_STATUSES else "unreachable"
        return f"{kind}: {self.status} ({self.limit})"

    @property
    def detail(self) -> str:
        """The line under it: the IK's message (and the cylinders it would command), or why
        the input is refused."""
        if not self.ok:
            return self.message
        return f"{self.message}; cylinders {', '.join(f'{v:.3f}' for v in self.extensions or ())} m"


@dataclass(frozen=True)
class TargetField:
    """One of the page's target fields: its range in the unit it is typed in."""

    name: str           # x, y, z, pitch
    unit: str           # m or deg
    low: float
    high: float
    si_per_unit: float = 1.0   # the field's unit in SI (deg -> rad)

    @property
    def range_text(self) -> str:
        return f"{self.low:.2f}..{self.high:.2f} {self.unit}"


def read_number(value: object) -> float | None:
    """The number a field's value holds, as the number input reads it: an int or float (not a
    bool), or a string that ``float`` reads ("6.5", " 7", "1e999", "nan"); None for anything
    else (None, "", "abc", a list, an object). NaN and inf come through: the IK refuses them."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:   # an int beyond the float range: as "1e999" reads
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str) and len(value) <= 400:   # a longer one is no typed number
        try:
            return float(value)
        except ValueError:
            return None
    return None


def shown(value: object) -> str:
    """A field's value in a message: numbers short (never 309 digits), the rest repr'd and cut."""
    number = read_number(value) if isinstance(value, int | float) else None
    if number is not None:
        return fmt_number(number, ".2f")
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class TargetRange:
    """Slider ranges [m], [rad] derived from the geometry's reach."""

    x: tuple[float, float]
    y: tuple[float, float]
    z: tuple[float, float]
    pitch: tuple[float, float]


class TargetChecker:
    """Reachability by the IK itself (``excavator_kinematics.inverse_kinematics``)."""

    def __init__(self, geometry: ExcavatorGeometry):
        self.geometry = geometry
        self.ik = InverseKinematics(geometry)

    def check(self, x: float, y: float, z: float, pitch: float) -> Reachability:
        """The verdict for a tip target (x, y, z) [m] in ``base_link`` and bucket pitch [rad]."""
        batch = self.ik.solve_batch(np.array([[x, y, z]], dtype=float), np.array([pitch]))
        code = IKStatus(int(batch.status[0]))
        if code is IKStatus.OK:
            q = tuple(float(v) for v in batch.q[0])
            ext = tuple(float(v) for v in batch.extensions[0])
            deg = ", ".join(f"{n} {math.degrees(v):.1f}" for n, v in zip(ACTIVE_JOINTS, q,
                                                                          strict=True))
            return Reachability(True, code.name, "", f"reachable: {deg} deg", q, ext)
        return Reachability(False, code.name, LIMIT_NAMES[code], batch.message(0) or code.name)

    def pose(self, x: float, y: float, z: float, pitch: float
             ) -> tuple[tuple[float, float, float], tuple[float, float, float, float]]:
        """Position and orientation (x, y, z, w) of the ``target_pose`` the ik_node reads: the
        bucket frame is the swing towards the target, then the pitch about -y."""
        swing = math.atan2(y, x) if math.hypot(x, y) > 1e-9 else 0.0
        return (x, y, z), bucket_quaternion(swing, pitch)

    def fields(self) -> dict[str, TargetField]:
        """The page's target fields: x, y, z [m] over the reach, pitch [deg] over a turn."""
        rng = self.ranges()
        return {"x": TargetField("x", "m", *rng.x), "y": TargetField("y", "m", *rng.y),
                "z": TargetField("z", "m", *rng.z),
                "pitch": TargetField("pitch", "deg", -180.0, 180.0, math.pi / 180.0)}

    def field_problem(self, name: str, value: object) -> Reachability | None:
        """The refusal of one field's value on its own (no number, NaN or inf, outside the
        field's range), or None: the message the field shows under itself."""
        f = self.fields()[name]
        number = read_number(value)
        if number is None:
            what = "is empty" if value in (None, "") else f"= {shown(value)} is not a number"
            return Reachability(False, NOT_A_NUMBER, f"{name}: a number",
                                f"{name} {what}: type a number in {f.range_text}")
        if not math.isfinite(number):
            return Reachability(False, IKStatus.NOT_FINITE.name, LIMIT_NAMES[IKStatus.NOT_FINITE],
                                f"{name} = {shown(number)} is not a finite number: type a "
                                f"number in {f.range_text}")
        if not f.low <= number <= f.high:
            return Reachability(
                False, OUT_OF_RANGE, f"{name} range {f.range_text}",
                f"{name} = {fmt_number(number, '.2f')} {f.unit} is outside the field's range "
                f"{f.range_text}: refused, not clamped; type a value within the range")
        return None

    def verdict(self, values: Mapping[str, object]) -> Reachability:
        """The verdict on the page's fields as a client sent them (any JSON value): a field
        that holds no number is refused (NOT_A_NUMBER), then NaN or inf in any field is the
        IK's own refusal (NOT_FINITE, with its message), then a number outside its field's
        range is refused naming the range (OUT_OF_RANGE: never clamped into it), then the IK's
        verdict (``check``) on the target in SI units, which it carries as ``target``."""
        fields = self.fields()
        numbers: dict[str, float] = {}
        for name in fields:
            number = read_number(values.get(name))
            if number is None:
                problem = self.field_problem(name, values.get(name))
                assert problem is not None
                return problem
            numbers[name] = number
        x, y, z, pitch = (numbers[n] * f.si_per_unit for n, f in fields.items())
        if not all(math.isfinite(v) for v in (x, y, z, pitch)):
            return self.check(x, y, z, pitch)   # the IK's own refusal of NaN and inf
        for name in fields:
            problem = self.field_problem(name, numbers[name])
            if problem is not None:
                return problem
        return dataclasses.replace(self.check(x, y, z, pitch), target=(x, y, z, pitch))

    def ranges(self) -> TargetRange:
        g = self.geometry
        arm = self.ik.reach_range_m[1] + math.hypot(*g.tip)   # boom foot C -> tip, longest
        r = math.ceil((g.B[0] + g.C[0] + arm) * 2) / 2
        up = math.ceil((g.B[1] + g.C[1] + arm) * 2) / 2
        down = math.ceil((arm - g.B[1] - g.C[1]) * 2) / 2
        return TargetRange((-r, r), (-r, r), (-down, up), (-math.pi, math.pi))


# --- joint states -------------------------------------------------------------------------------

BASE_JOINTS = ("base_x", "base_y", "base_yaw")


@dataclass(frozen=True)
class JointReadout:
    """What ``joint_states`` says, in the dashboard's terms."""

    q: tuple[float, float, float, float]            # swing, boom, arm, bucket [rad]
    extensions: tuple[float, float, float]          # boom, arm, bucket cylinders [m]
    base: tuple[float, float, float]                # base_x, base_y [m], base_yaw [rad] in world
    tip: tuple[float, float, float]                 # bucket tip in base_link by FK [m]
    pitch: float                                    # bucket pitch by FK [rad]
    stamp_s: float                                  # header stamp [s]
    # a wheeled machine (issue 28): its steering angles [rad] (steer_<w>) and wheel speeds
    # [rad/s] (wheel_<w>) by wheel name, WHEEL_ORDER; empty on tracks
    steering: tuple[tuple[str, float], ...] = ()
    wheel_speeds: tuple[tuple[str, float], ...] = ()

    def as_dict(self) -> dict[str, float]:
        return dict(zip(ACTIVE_JOINTS + CYLINDER_NAMES, self.q + self.extensions, strict=True))


WHEEL_ORDER = ("fl", "fr", "rl", "rr")


def joint_readout(checker: TargetChecker, names: Sequence[str], positions: Sequence[float],
                  stamp_s: float = 0.0, velocities: Sequence[float] = ()
                  ) -> JointReadout | None:
    """A ``JointReadout`` from a JointState's names, positions and velocities (None if a joint
    is missing); a wheeled machine's ``steer_<w>`` positions and ``wheel_<w>`` velocities
    too."""
    pos = dict(zip(names, positions, strict=False))
    vel = dict(zip(names, velocities, strict=False))
    try:
        q = tuple(float(pos[n]) for n in ACTIVE_JOINTS)
        ext = tuple(float(pos[n]) for n in CYLINDER_NAMES)
    except KeyError:
        return None
    base = tuple(float(pos.get(n, 0.0)) for n in BASE_JOINTS)
    fk = checker.ik.fk
    tip = tuple(float(v) for v in fk.tip(np.array(q)))
    steering = tuple((w, float(pos[f"steer_{w}"])) for w in WHEEL_ORDER if f"steer_{w}" in pos)
    wheels = tuple((w, float(vel[f"wheel_{w}"])) for w in WHEEL_ORDER if f"wheel_{w}" in vel)
    return JointReadout(q, ext, base, tip, float(fk.bucket_pitch(np.array(q))),  # type: ignore[arg-type]
                        stamp_s, steering, wheels)


@dataclass(frozen=True)
class WheelLayout:
    """A wheeled machine's wheels as its URDF (``robot_description``) places them: each
    wheel's centre (x, y) in base_link [m] (the origin of its ``steer_<w>`` joint, or of
    ``wheel_<w>`` on an unsteered one), the rolling radius [m] (the centre's height) and
    which wheels steer. ``None`` from a URDF without wheels (a tracked machine)."""

    positions: Mapping[str, tuple[float, float]]
    radius_m: float
    steered: tuple[str, ...]

    @classmethod
    def from_urdf(cls, text: str) -> WheelLayout | None:
        import xml.etree.ElementTree as ET

        root = ET.fromstring(text)
        positions: dict[str, tuple[float, float]] = {}
        steered: list[str] = []
        radius = 0.0
        for joint in root.iter("joint"):
            name = joint.get("name", "")
            kind, _, wheel = name.partition("_")
            parent = joint.find("parent")
            origin = joint.find("origin")
            if wheel not in WHEEL_ORDER or kind not in ("steer", "wheel") or origin is None \
                    or parent is None or not parent.get("link", "").endswith("base_link"):
                continue
            x, y, z = (float(v) for v in origin.get("xyz", "0 0 0").split())
            positions[wheel] = (x, y)
            radius = max(radius, z)
            if kind == "steer":
                steered.append(wheel)
        if not positions:
            return None
        return cls({w: positions[w] for w in WHEEL_ORDER if w in positions}, radius,
                   tuple(w for w in WHEEL_ORDER if w in steered))

    def plan_lines(self, angles: Mapping[str, float], width_m: float = 0.4,
                   decimals: int = 3) -> dict[str, list[float]]:
        """The plan view (from above, base_link x forward, y left) of each wheel: a closed
        outline ``[x0, y0, x1, y1, ...]`` [m], ``2 r`` long and ``width_m`` wide, turned by its
        steering angle ``angles[w]`` [rad] (0 for a wheel not given or not steered)."""
        out = {}
        r, h = self.radius_m, 0.5 * width_m
        for w, (x, y) in self.positions.items():
            a = float(angles.get(w, 0.0)) if w in self.steered else 0.0
            c, s = math.cos(a), math.sin(a)
            corners = [(r, h), (-r, h), (-r, -h), (r, -h), (r, h)]
            out[w] = [round(v, decimals) for dx, dy in corners
                      for v in (x + c * dx - s * dy, y + s * dx + c * dy)]
        return out

    def plan_svg(self, angles: Mapping[str, float], size_px: int = 220) -> str:
        """The plan view as a small SVG (x forward drawn up, y left drawn left): the wheel
        rectangle's outline, each wheel turned by its steering angle, the steered ones in the
        machine's colour; classes ``dash-wheel-<w>`` for tests and styling."""
        xs = [x for x, _ in self.positions.values()]
        ys = [y for _, y in self.positions.values()]
        reach = max(*map(abs, xs), *map(abs, ys)) + self.radius_m + 0.3
        body = " ".join(f"{-y:.3f},{-x:.3f}" for x, y in
                        ((max(xs), max(ys)), (min(xs), max(ys)), (min(xs), min(ys)),
                         (max(xs), min(ys)), (max(xs), max(ys))))
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size_px}" '
                 f'height="{size_px}" viewBox="{-reach:.3f} {-reach:.3f} {2 * reach:.3f} '
                 f'{2 * reach:.3f}">',
                 f'<polyline class="dash-wheel-frame" points="{body}" fill="none" '
                 'stroke="#999" stroke-width="0.05"/>',
                 f'<polygon points="0,{-reach + 0.05:.3f} -0.15,{-reach + 0.35:.3f} '
                 f'0.15,{-reach + 0.35:.3f}" fill="#555"/>']   # forward
        for w, line in self.plan_lines(angles).items():
            pts = " ".join(f"{-line[k + 1]:.3f},{-line[k]:.3f}" for k in range(0, len(line), 2))
            colour = "#e0a000" if w in self.steered else "#444"
            angle = math.degrees(float(angles.get(w, 0.0))) if w in self.steered else 0.0
            parts.append(f'<polygon class="dash-wheel-{w}" data-angle-deg="{angle:.1f}" '
                         f'points="{pts}" fill="{colour}" stroke="#222" '
                         'stroke-width="0.03"/>')
        parts.append("</svg>")
        return "".join(parts)


# --- side view ----------------------------------------------------------------------------------

class SideView:
    """The machine in the boom plane: horizontal distance from the swing axis [m], height above
    the ground under the swing axis [m]. Polylines per part, from ``Linkage.points``."""

    PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("boom", ("C", "E", "F", "H", "C")),
        ("arm", ("G", "I", "K", "M", "H", "G")),
        ("bucket", ("M", "L", "base", "tip", "M")),
        ("boom_cylinder", ("D", "E")),
        ("arm_cylinder", ("F", "G")),
        ("bucket_cylinder", ("I", "J")),
        ("links", ("K", "J", "L")),
    )

    def __init__(self, geometry: ExcavatorGeometry):
        self.geometry = geometry
        from excavator_kinematics.linkage import Linkage

        self.linkage = Linkage(geometry)

    def lines(self, q: Sequence[float]) -> dict[str, list[list[float]]]:
        """Polylines ``{part: [[r, z], ...]}`` [m] for q = (swing, boom, arm, bucket) [rad]."""
        g = self.geometry
        pts = self.linkage.points(q[1], q[2], q[3])
        bx, bz = g.B

        def p(name: str) -> list[float]:
            x, z = pts[name]
            return [round(float(x) + bx, 4), round(float(z) + bz, 4)]

        out = {part: [p(n) for n in names] for part, names in self.PARTS}
        # undercarriage and upper structure outlines (schematic, from the pin positions)
        half = max(1.6, g.D[0] + 1.2)
        out["undercarriage"] = [[-half, 0.0], [half, 0.0], [half, bz * 0.55], [-half, bz * 0.55],
                                [-half, 0.0]]
        top = bz + g.C[1] + 1.4
        out["chassis"] = [[-1.5, bz], [g.D[0] + 0.2, bz], [g.C[0] + 0.6, bz + g.C[1] + 0.2],
                          [g.C[0] + 0.2, top], [-0.8, top], [-1.5, bz + 0.8], [-1.5, bz]]
        return out

    def tip(self, q: Sequence[float]) -> tuple[float, float]:
        """The tip in the side view [m] (r, z)."""
        return tuple(self.lines(q)["bucket"][3])  # type: ignore[return-value]

    def flat_lines(self, q: Sequence[float], decimals: int = 3) -> dict[str, list[float]]:
        """``lines(q)`` as the page's wire format: ``{part: [r0, z0, r1, z1, ...]}`` [m],
        rounded to ``decimals`` (mm by default: the same pose gives the same frame, so an idle
        machine sends nothing)."""
        return {part: [round(v, decimals) for point in line for v in point]
                for part, line in self.lines(q).items()}


def flat_profile(r: np.ndarray, z: np.ndarray, decimals: int = 2) -> list[float]:
    """A terrain profile as ``[r0, z0, r1, z1, ...]`` [m] over its finite heights (the side
    view's wire format), rounded to ``decimals`` (cm by default)."""
    ok = np.isfinite(z)
    pairs = np.stack([np.asarray(r, dtype=float)[ok], np.asarray(z, dtype=float)[ok]], axis=1)
    return [float(v) for v in np.round(pairs, decimals).ravel()]


# --- terrain ------------------------------------------------------------------------------------

@dataclass
class TerrainGrid:
    """Heights ``z[i, j]`` [m] over the axes ``xs`` (i), ``ys`` (j) [m] in ``world``."""

    xs: np.ndarray
    ys: np.ndarray
    z: np.ndarray

    @classmethod
    def from_cells(cls, x0: float, y0: float, cell_m: float, nx: int, ny: int,
                   height_m: float = math.nan) -> TerrainGrid:
        """The soil grid (``terrain.*`` of config/soil.yaml): cell (i, j) has its centre at
        ``(x0 + (i + 0.5) cell, y0 + (j + 0.5) cell)`` [m]; heights start at ``height_m``."""
        return cls(x0 + (np.arange(nx) + 0.5) * cell_m, y0 + (np.arange(ny) + 0.5) * cell_m,
                   np.full((nx, ny), height_m))

    def apply_patch(self, ni: int, nj: int, data: Sequence[float] | np.ndarray) -> None:
        """Write a ``soil/terrain_patch`` (dims ni, nj; data ``[i0, j0, heights...]`` [m], the
        wire format of ``excavator_sim.terrain_patch``). ValueError names a patch that does not
        fit this grid (another grid than the configured one)."""
        i0, j0, new = flat_to_patch(ni, nj, data)   # HeightFieldError (a ValueError): sizes
        nx, ny = self.z.shape
        if i0 < 0 or j0 < 0 or i0 + ni > nx or j0 + nj > ny:
            raise ValueError(f"terrain patch [{i0}:{i0 + ni}, {j0}:{j0 + nj}] outside the "
                             f"configured {nx} x {ny} grid: pass the soil_node's parameter file "
                             "as --soil-config")
        self.z[i0:i0 + ni, j0:j0 + nj] = new

    def height_at(self, x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """Bilinear height [m] at world points; NaN outside the grid."""
        x = np.atleast_1d(np.asarray(x, dtype=float))
        y = np.atleast_1d(np.asarray(y, dtype=float))
        out = np.full(np.broadcast(x, y).shape, np.nan)
        x, y = np.broadcast_arrays(x, y)
        if len(self.xs) < 2 or len(self.ys) < 2:
            return out
        inside = ((x >= self.xs[0]) & (x <= self.xs[-1]) & (y >= self.ys[0])
                  & (y <= self.ys[-1]))
        xi, yi = x[inside], y[inside]
        i = np.clip(np.searchsorted(self.xs, xi) - 1, 0, len(self.xs) - 2)
        j = np.clip(np.searchsorted(self.ys, yi) - 1, 0, len(self.ys) - 2)
        tx = (xi - self.xs[i]) / (self.xs[i + 1] - self.xs[i])
        ty = (yi - self.ys[j]) / (self.ys[j + 1] - self.ys[j])
        z = self.z
        out[inside] = ((1 - tx) * (1 - ty) * z[i, j] + tx * (1 - ty) * z[i + 1, j]
                       + (1 - tx) * ty * z[i, j + 1] + tx * ty * z[i + 1, j + 1])
        return out

    def profile(self, base: Sequence[float], heading: float, r: np.ndarray) -> np.ndarray:
        """Heights [m] along the boom plane at distances ``r`` [m] from the swing axis: the
        base at (base_x, base_y) [m] in ``world``, the boom at ``heading`` = base_yaw + swing."""
        r = np.asarray(r, dtype=float)
        return self.height_at(base[0] + r * math.cos(heading), base[1] + r * math.sin(heading))

    def coarse(self, max_nodes: int = 40) -> TerrainGrid:
        """Every k-th node so that neither side has more than ``max_nodes`` (the 3D view)."""
        k = max(1, math.ceil(max(len(self.xs), len(self.ys)) / max_nodes))
        return TerrainGrid(self.xs[::k], self.ys[::k], self.z[::k, ::k])

    def cloud(self, max_nodes: int = 32, decimals: int = 2
              ) -> tuple[list[list[float]], list[list[float]]]:
        """The 3D view's terrain: the finite nodes of ``coarse(max_nodes)`` as points
        ``[[x, y, z], ...]`` [m] in ``world`` (rounded to ``decimals``) and their colours
        ``[[r, g, b], ...]`` (0..1, lighter the higher)."""
        grid = self.coarse(max_nodes)
        xx, yy = np.meshgrid(grid.xs, grid.ys, indexing="ij")
        ok = np.isfinite(grid.z)
        if not ok.any():
            return [], []
        zz = grid.z[ok]
        lo, hi = float(zz.min()), float(zz.max())
        t = (zz - lo) / max(hi - lo, 1e-6)
        colours = np.stack([0.45 + 0.35 * t, 0.33 + 0.3 * t, 0.2 + 0.2 * t], axis=1)
        points = np.stack([xx[ok], yy[ok], zz], axis=1)
        return np.round(points, decimals).tolist(), np.round(colours, 2).tolist()


# --- time series --------------------------------------------------------------------------------

@dataclass
class RollingSeries:
    """The last ``window_s`` [s] of a signal, at most ``max_rate_hz`` samples a second."""

    window_s: float = 60.0
    max_rate_hz: float = 10.0
    _data: deque[tuple[float, float]] = field(default_factory=deque)
    _slot: int = -(2**62)
    _lock: threading.Lock = field(default_factory=threading.Lock)   # writer and readers differ

    def add(self, t_s: float, value: float) -> bool:
        """Add a sample at time ``t_s`` [s] (monotonic); False when thinned out (one sample per
        ``1 / max_rate_hz`` slot: the first one in it) or not finite."""
        if not math.isfinite(value) or not math.isfinite(t_s):
            return False
        with self._lock:
            return self._add(t_s, float(value))

    def _add(self, t_s: float, value: float) -> bool:
        if self._data and t_s < self._data[-1][0]:
            self._data.clear()   # time went backwards (a restarted source): start again
            self._slot = -(2**62)
        slot = math.floor(t_s * self.max_rate_hz)
        if slot == self._slot:
            return False
        self._slot = slot
        self._data.append((t_s, value))
        while self._data and self._data[0][0] < t_s - self.window_s:
            self._data.popleft()
        return True

    def accepts(self, t_s: float) -> bool:
        """Whether ``add`` at ``t_s`` [s] would keep the sample (a new slot): a caller can skip
        decoding a message that would be thinned out anyway."""
        return math.isfinite(t_s) and (math.floor(t_s * self.max_rate_hz) != self._slot
                                       or bool(self._data and t_s < self._data[-1][0]))

    def points(self, now_s: float, every_s: float = 0.0, decimals: int | None = None
               ) -> list[list[float]]:
        """``[[t - now (<= 0) [s], value], ...]`` over the window; with ``every_s`` > 0 at most
        one sample (the first) per ``every_s`` slot of time (what a chart needs), values
        rounded to ``decimals`` (None: as stored)."""
        with self._lock:
            data = list(self._data)
        out: list[list[float]] = []
        slot = None
        for t, v in data:
            if t < now_s - self.window_s:
                continue
            if every_s > 0.0:
                s = math.floor(t / every_s)
                if s == slot:
                    continue
                slot = s
            out.append([round(t - now_s, 2 if every_s > 0.0 else 3),
                        v if decimals is None else round(v, decimals)])
        return out

    def last(self) -> float | None:
        return self._data[-1][1] if self._data else None

    def __len__(self) -> int:
        return len(self._data)


# --- the PLC bridge -----------------------------------------------------------------------------

def bridge_keys(wheels: Sequence[str], steering: Sequence[str]) -> list[str]:
    """Every Redis key the dashboard reads (one MGET)."""
    return [keys.BRIDGE_STATUS, keys.BRIDGE_DETAIL, keys.BRIDGE_ALIVE,
            *keys.CONTROL_KEYS,
            keys.MON_LONGITUDINAL, keys.MON_LATERAL, keys.MON_ANGULAR,
            *(keys.wheel_speed_key(w) for w in wheels),
            *(keys.wheel_angle_key(s) for s in steering),
            keys.STATE_VALID, keys.STATE_PLC_ALIVE,
            *(keys.state_key(b) for b in keys.STATE_BITS),
            *(keys.counter_key(c) for c in keys.COUNTERS)]


# Fault reasons of the bridge status, in words (docs/plc_bridge.md, fail-safe table).
REASONS: dict[str, str] = {
    "starting": "bridge starting",
    "waiting_heartbeat": "waiting for a heartbeat toggle (press Drive)",
    "waiting_heartbeat_edge": "waiting for a fresh heartbeat toggle after a stop (press Drive)",
    "heartbeat_stale": "heartbeat not toggled within heartbeat_timeout",
    "invalid_input": "a control value was invalid (see detail)",
    "infeasible_command": "the vehicle model cannot do the command",
    "plc_fault": "PLC fault bit set",
    "plc_plant_lost": "HIL: the simulation stopped answering the PLC (drives in their safe "
                      "state)",
    "plc_drive_fault": "HIL: a drive in fault (the simulation refused an actuation; drives in "
                       "their safe state)",
    "plc_refused": "the PLC refuses the bridge's commands (its reason in the detail)",
    "plc_setpoint_fault": "the PLC refused a setpoint (NaN/inf/out of range)",
    "plc_watchdog": "the PLC's watchdog tripped (the bridge or its link stalled)",
    "plc_estop": "PLC emergency stop",
    "plc_not_ready": "PLC not ready",
    "plc_manual": "PLC not in auto mode",
    "plc_alive_stale": "PLC alive counter not changing",
    "plc_cpu_stop": "PLC CPU in STOP",
    "plc_feedback_invalid": "PLC measured values NaN/inf",
    "plc_link_lost": "PLC link lost (reconnecting)",
    "redis_lost": "Redis was lost (reconnecting)",
    "deactivated": "bridge node deactivated",
    "shutdown": "bridge shut down",
    "internal_error": "bridge internal error",
}

PLC_DOWN_REASONS = frozenset({"plc_link_lost", "plc_alive_stale", "plc_feedback_invalid"})


@dataclass(frozen=True)
class BridgeView:
    """What the PLC panel shows."""

    status: str                       # "running", "stopped", "unknown" (no key), "redis down"
    reason: str                       # the stop reason key ("" while running)
    reason_text: str
    detail: str
    bridge_down: bool
    plc_down: bool
    banner: str                       # one line for the operator; "" when all is well
    control: dict[str, str]           # the plc.control.* keys as stored
    monitor: dict[str, float | None]  # plc.monitor.* floats (None missing, nan invalid)
    state_bits: dict[str, bool | None]
    plc_alive: str | None
    counters: dict[str, int | None]
    cycle_rate_hz: float | None       # the bridge's cycles per second, from its counter
    plc_alive_age_s: float | None     # since the PLC's alive counter last changed
    redis_rtt_ms: float | None        # round trip of the dashboard's MGET


def _as_float(v: str | None) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        return math.nan


def _as_bool(v: str | None) -> bool | None:
    if v is None:
        return None
    return v.strip().lower() in ("true", "1")


def _as_int(v: str | None) -> int | None:
    try:
        return None if v is None else int(v)
    except ValueError:
        return None


class BridgeWatch:
    """Turns successive MGET snapshots of the bridge's keys into ``BridgeView``s.

    The bridge is *down* when its status key is missing (never written: not running; gone
    after it was seen: it expired, as the bridge rewrites it with a TTL every cycle, so a
    killed bridge's status vanishes), or when its cycle counter has not advanced for
    ``stale_s`` [s] (a frozen bridge, or one whose keys carry no TTL). The
    PLC is *down* when the bridge says so (link lost, alive counter stale, invalid feedback) or
    the monitor is not valid.
    """

    def __init__(self, wheels: Sequence[str], steering: Sequence[str], stale_s: float = 2.0):
        self.wheels = tuple(wheels)
        self.steering = tuple(steering)
        self.keys = bridge_keys(self.wheels, self.steering)
        self.stale_s = stale_s
        self._cycles: list[tuple[float, int]] = []       # (t, cycles) over the last stale_s
        self._cycles_changed_s: float | None = None
        self._alive: str | None = None
        self._alive_changed_s: float | None = None
        self._status_seen = False  # a status was read once: its absence now means it expired

    def update(self, values: Sequence[bytes | str | None] | None, now_s: float,
               rtt_ms: float | None = None) -> BridgeView:
        """One snapshot (values in ``self.keys`` order; None: Redis unreachable)."""
        if values is None:
            self._cycles.clear()
            self._cycles_changed_s = None
            return BridgeView("redis down", "", "", "", True, True,
                              "Redis unreachable: bridge and PLC state unknown",
                              {}, {}, {}, None, {}, None, None, None)
        v = dict(zip(self.keys, (x.decode() if isinstance(x, bytes) else x for x in values),
                     strict=True))
        status_raw = v[keys.BRIDGE_STATUS]
        expired = status_raw is None and self._status_seen
        self._status_seen = self._status_seen or status_raw is not None
        if status_raw is None:
            status, reason = "unknown", ""
        elif status_raw.startswith("stopped:"):
            status, reason = "stopped", status_raw.split(":", 1)[1]
        else:
            status, reason = status_raw, ""
        counters = {c: _as_int(v[keys.counter_key(c)]) for c in keys.COUNTERS}

        # cycle rate and staleness from the counter
        cycles = counters["cycles"]
        if cycles is not None:
            if not self._cycles or self._cycles[-1][1] != cycles:
                self._cycles_changed_s = now_s
            self._cycles.append((now_s, cycles))
            while len(self._cycles) > 2 and self._cycles[0][0] < now_s - self.stale_s:
                self._cycles.pop(0)
        rate = None
        if len(self._cycles) >= 2 and self._cycles[-1][0] > self._cycles[0][0]:
            (t0, c0), (t1, c1) = self._cycles[0], self._cycles[-1]
            rate = max(0.0, (c1 - c0) / (t1 - t0))
        alive = v[keys.STATE_PLC_ALIVE]
        if alive != self._alive:
            self._alive, self._alive_changed_s = alive, now_s
        alive_age = None if self._alive_changed_s is None else now_s - self._alive_changed_s

        frozen_s = 0.0 if self._cycles_changed_s is None else now_s - self._cycles_changed_s
        frozen = self._cycles_changed_s is not None and frozen_s > self.stale_s
        bridge_down = status_raw is None or cycles is None or frozen
        valid = _as_bool(v[keys.STATE_VALID])
        plc_down = reason in PLC_DOWN_REASONS or valid is not True
        if expired:
            banner = ("PLC bridge down: its status expired in Redis (the bridge stopped "
                      "refreshing it: killed, or cut from Redis)")
        elif status_raw is None:
            banner = "PLC bridge not running: no plc.bridge.status in Redis"
        elif frozen:
            banner = (f"PLC bridge down: its cycle counter has not advanced for "
                      f"{frozen_s:.1f} s (last status {status_raw})")
        elif plc_down:
            banner = f"PLC down: {REASONS.get(reason, reason) or 'monitor values not valid'}"
        else:
            banner = ""
        monitor_keys = [keys.MON_LONGITUDINAL, keys.MON_LATERAL, keys.MON_ANGULAR,
                        *(keys.wheel_speed_key(w) for w in self.wheels),
                        *(keys.wheel_angle_key(s) for s in self.steering)]
        return BridgeView(
            status=status, reason=reason, reason_text=REASONS.get(reason, reason),
            detail=v[keys.BRIDGE_DETAIL] or "", bridge_down=bridge_down, plc_down=plc_down,
            banner=banner,
            control={k: "(missing)" if (x := v[k]) is None else x for k in keys.CONTROL_KEYS},
            monitor={k: _as_float(v[k]) for k in monitor_keys},
            state_bits={b: _as_bool(v[keys.state_key(b)]) for b in ("valid", *keys.STATE_BITS)},
            plc_alive=alive, counters=counters, cycle_rate_hz=rate, plc_alive_age_s=alive_age,
            redis_rtt_ms=rtt_ms)


# --- driving ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DriveLimits:
    """The bridge's command envelope (config/plc.yaml ``max_*``) and the model's lateral axis."""

    max_longitudinal: float   # [m/s]
    max_lateral: float        # [m/s]; 0 for skid-steer / Ackermann (no lateral motion)
    max_angular: float        # [rad/s]

    @classmethod
    def for_model(cls, model: str, max_longitudinal: float, max_lateral: float,
                  max_angular: float) -> DriveLimits:
        lateral = max_lateral if model == "4wd4ws" else 0.0
        return cls(max_longitudinal, lateral, max_angular)

    def redis_values(self, longitudinal: float, lateral: float, angular: float
                     ) -> dict[str, str]:
        """The three control keys, ARTOF-formatted (10 significant digits). Values outside the
        envelope raise ValueError naming the value and the limit (the sliders never produce
        them; the bridge would reject them with a stop)."""
        out = {}
        for key, value, lim in ((keys.LONGITUDINAL, longitudinal, self.max_longitudinal),
                                (keys.LATERAL, lateral, self.max_lateral),
                                (keys.ANGULAR, angular, self.max_angular)):
            if not math.isfinite(value) or abs(value) > lim + 1e-12:
                raise ValueError(f"{key} = {value:.6g} outside +-{lim:.6g} (the bridge's "
                                 f"envelope in config/plc.yaml)")
            out[key] = f"{value:.10g}"
        return out


def zero_command() -> dict[str, str]:
    """The control keys of a stop: every velocity 0."""
    return {keys.LONGITUDINAL: "0", keys.LATERAL: "0", keys.ANGULAR: "0"}


def fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    """A readout: '-' for missing, 'NaN' for invalid, else fixed digits with the unit."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "NaN"
    return f"{value:.{digits}f}{(' ' + unit) if unit else ''}"


def readout_table(r: JointReadout) -> list[dict[str, str]]:
    """Rows for the joint readout table (deg for angles, m for extensions)."""
    rows = [{"name": n, "value": f"{math.degrees(v):.2f}", "unit": "deg", "rad": f"{v:.4f}"}
            for n, v in zip(ACTIVE_JOINTS, r.q, strict=True)]
    rows += [{"name": n, "value": f"{v:.4f}", "unit": "m", "rad": ""}
             for n, v in zip(CYLINDER_NAMES, r.extensions, strict=True)]
    rows += [{"name": f"steer_{w}", "value": f"{math.degrees(a):.2f}", "unit": "deg",
              "rad": f"{a:.4f}"} for w, a in r.steering]
    rows += [{"name": f"wheel_{w}", "value": f"{v:.3f}", "unit": "rad/s", "rad": ""}
             for w, v in r.wheel_speeds]
    return rows


def mapping_text(m: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in m.items())
