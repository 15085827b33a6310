"""The soil in the bucket as a body of its own: a bucket-frame height grid of whole soil units.

Grid. The opening of the prism (the strike plane through J and T, extruded over the width) is
cut into cells: ``s`` along the chord J -> T, ``w`` across the width (bucket y). Each cell is
the foot of a column that runs along the opening's inward normal, from the bucket's floor (the
back J-B or the base B-T, whichever lies under the cell: ``floor_n`` [m], negative, below the
strike plane) up through the strike plane (n = 0) into the heap above the rim (n > 0). A
column holds a whole number of soil units, the terrain's own unit ``dx * dx * dz``, so one
unit raises it by ``dn = dx^2 dz / (ds dw)``: terrain + bucket + spill is an integer sum and
never drifts.

Carried. The grid is fixed to the bucket: while the effective gravity does not change in the
bucket's frame, nothing moves (the load keeps its shape, rigid with the bucket).

Relaxed (:func:`settle`), as the terrain's ``terrain_kernels.relax``, with "down" the
effective gravity ``g - a`` (``a`` the soil's acceleration; the pseudo-static method: Okabe
1926, Mononobe & Matsuo 1929; a dry slope of inclination beta fails under a horizontal
acceleration above ``g tan(phi - beta)``, Newmark 1965's yield acceleration of a sliding
block). So a swing tilts the soil's "down" outwards (centripetal) and against the start
(angular acceleration). Two regimes, by the opening's tilt against that "down":

- flatter than the repose angle: between 4-neighbour columns whose tops stand steeper than
  repose, half the excess slides over (integer units); at the opening's edges a column whose
  top stands steeper than repose above the rim's edge point loses units over it (over the ends
  J and T the walls fall to nothing, so any soil may go; over the side plates only what stands
  above the rim). The heap stands at the repose angle and slides off where tilt plus slope
  pass it;
- steeper than repose: nothing stands above the strike plane; the bucket holds what lies
  inside it under the repose plane rising inwards from the lip (the opening's lower edge),
  the closed form's held shape (``terrain.held_soil_shape``), or, when the opening faces down
  and runs under that plane, the pocket below the lip's level. The rest leaves over the lip
  (opening up) or through the opening under its column (opening down): the dump follows the
  bucket's angle.

How fast it leaves (given the time between updates, ``elapsed_s``). The pseudo-static rule says
what the bucket cannot hold, not how soon it goes: soil past its yield acceleration slides as a
rigid block (Newmark 1965, "Effects of earthquakes on dams and embankments", Geotechnique
15(2)), accelerated along the opening's tilt by ``|g_eff| (sin(theta) - cos(theta) tan(phi))``
(theta: the opening's tilt against the effective "down", phi: the repose angle) and braked by
the same expression once it is negative. What stands beyond the held shape leaves in proportion
to the distance slid against the chord J -> T (the way out for the soil at the far wall): a
dump empties in about ``sqrt(2 |JT| / a)`` (a second at 10 degrees past repose for a 1 m
chord), and a jolt of a tenth of a second (a cylinder at its end stop) moves the heap a few
centimetres, not out of the bucket. Without ``elapsed_s`` the rule acts at once (the bound as
time runs long).

Pure numpy (its kernels: :mod:`excavator_sim.soil.bucket_body_kernels`); no ROS, no MuJoCo.
:class:`BucketBody` keeps the grid and turns the
kernel's spills into world points for the terrain (``Terrain`` drops them on the cells under
those points).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_sim.soil.boxes import boxes_to_triangles
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.errors import SoilInputError
from excavator_sim.soil.kernels import heap_caps, held_caps, pour, settle
from excavator_sim.soil.payload import BucketPayload

GRAVITY_M_S2 = 9.81
# at most this many relaxation sweeps per update (a sweep that moves nothing ends it early)
SWEEPS = 8


@dataclass(frozen=True)
class BodyGrid:
    """The bucket-frame grid: the opening's frame in the bucket frame and the columns' floor."""

    origin: np.ndarray  # J in the bucket frame (x, y, z) [m]
    e_s: np.ndarray  # unit vector J -> T (bucket frame)
    e_w: np.ndarray  # unit vector across (bucket +y)
    e_n: np.ndarray  # unit normal of the opening, out of the bucket (away from B)
    length_m: float  # |J T|
    width_m: float
    ds: float
    dw: float
    dn: float  # column rise per soil unit [m]
    floor_n: np.ndarray  # (ns,) floor of each column row below the strike plane [m] (<= 0)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.floor_n), round(self.width_m / self.dw)

    @classmethod
    def for_bucket(cls, prism: BucketPrism, cell_xy_m: float, cell_z_m: float) -> BodyGrid:
        """Cells of about ``cell_xy_m`` over the opening; a column of ``cell_z_m`` units."""
        j = np.array(prism.j, dtype=float)
        b = np.array(prism.b, dtype=float)
        t = np.array(prism.t, dtype=float)
        j[1] = b[1] = t[1] = 0.0
        chord = t - j
        length = float(np.linalg.norm(chord))
        e_s = chord / length
        e_w = np.array([0.0, 1.0, 0.0])
        e_n = np.cross(e_s, e_w)
        if (b - j) @ e_n > 0.0:
            e_n = -e_n  # out of the bucket: away from B
        s_b = float((b - j) @ e_s)
        depth_b = float(-(b - j) @ e_n)
        if not (0.0 < s_b < length):
            raise SoilInputError(
                f"bucket base B={prism.b} does not lie over the opening J={prism.j} - "
                f"T={prism.t} (its foot on J-T at {s_b:.3f} m of {length:.3f} m): the angle "
                "at J or T is obtuse, which the per-cell bucket soil cannot cover; use "
                "terrain.bucket_soil_model closed_form or a bucket with acute J and T")
        ns = max(2, math.ceil(length / cell_xy_m))
        nw = max(1, math.ceil(prism.width_m / cell_xy_m))
        ds, dw = length / ns, prism.width_m / nw
        s = (np.arange(ns) + 0.5) * ds
        depth = np.where(s <= s_b, depth_b * s / s_b, depth_b * (length - s) / (length - s_b))
        dn = cell_xy_m * cell_xy_m * cell_z_m / (ds * dw)
        return cls(j, e_s, e_w, e_n, length, float(prism.width_m), ds, dw, dn, -depth)

    def frame(self) -> np.ndarray:
        """3x3 matrix whose rows are e_s, e_w, e_n (bucket frame -> opening frame)."""
        return np.stack([self.e_s, self.e_w, self.e_n])

    def struck_units(self) -> int:
        """Units that fill the columns up to the strike plane (the struck capacity)."""
        return int(np.floor(-self.floor_n / self.dn + 1e-9).sum()) * self.shape[1]


@dataclass(frozen=True)
class Slide:
    """The sliding block of the soil beyond the held shape (module docstring, "How fast")."""

    speed_m_s: float = 0.0      # along the opening, outwards
    distance_m: float = 0.0     # slid since it started (at rest: 0)
    owed_units: float = 0.0     # the fraction of a unit due but not yet gone


class BucketBody:
    """The bucket's soil: whole units per column of :class:`BodyGrid`, relaxed every update."""

    def __init__(self, prism: BucketPrism, cell_xy_m: float, cell_z_m: float,
                 repose_rad: float) -> None:
        self.grid = BodyGrid.for_bucket(prism, cell_xy_m, cell_z_m)
        self.units = np.zeros(self.grid.shape, dtype=np.int64)
        self.tan_r = math.tan(repose_rad)
        self.cos_r = math.cos(repose_rad)
        self.cell_xy_m = cell_xy_m
        self.unit_volume_m3 = cell_xy_m * cell_xy_m * cell_z_m
        self._frame = self.grid.frame()
        self.slide = Slide()

    @property
    def total_units(self) -> int:
        return int(self.units.sum())

    def add_at(self, points_bucket: np.ndarray, counts: np.ndarray) -> None:
        """Put ``counts`` units into the columns over the bucket-frame points (n, 3) [m]
        (where dug soil entered the bucket); points off the opening go to the nearest
        column."""
        g = self.grid
        rel = (np.asarray(points_bucket, dtype=float) - g.origin) @ self._frame.T
        ns, nw = g.shape
        i = np.clip(np.floor(rel[:, 0] / g.ds).astype(np.int64), 0, ns - 1)
        j = np.clip(np.floor((rel[:, 1] + 0.5 * g.width_m) / g.dw).astype(np.int64), 0,
                    nw - 1)
        np.add.at(self.units, (i, j), np.asarray(counts, dtype=np.int64))

    def pour(self, count: int, pose: BucketPose,
             acceleration_m_s2: np.ndarray | None = None) -> int:
        """Put ``count`` units (soil dug into the bucket) where they settle: the lowest free
        room against the effective gravity, a level fill within what each column holds (the
        heap at the repose angle from the rim's edges when the opening is flatter than repose,
        the held caps when it is steeper). Returns the units placed; the caller puts the rest
        (none unless the opening faces down or is full) with :meth:`add_at`."""
        g = self.grid
        up = self.up_vector(pose.rotation(), acceleration_m_s2)
        cap = np.empty_like(self.units)
        if up[2] < self.cos_r:
            held_caps(g.floor_n, g.ds, g.dn, g.length_m, up, self.tan_r, cap)
        else:
            heap_caps(g.floor_n, g.ds, g.dw, g.dn, g.length_m, g.width_m, up, self.tan_r, cap)
        return int(pour(self.units, g.floor_n, g.ds, g.dw, g.dn, g.width_m, up, cap, count))

    def up_vector(self, rotation: np.ndarray, acceleration_m_s2: np.ndarray | None
                  ) -> np.ndarray:
        """The effective "up" (minus the unit effective gravity ``g - a``) in the opening's
        frame, for a bucket -> world ``rotation`` and the soil's ``acceleration_m_s2``
        (world, None: at rest)."""
        return self._effective_up(rotation, acceleration_m_s2)[0]

    def _effective_up(self, rotation: np.ndarray, acceleration_m_s2: np.ndarray | None
                      ) -> tuple[np.ndarray, float]:
        """:meth:`up_vector` and the effective gravity's magnitude [m/s^2]."""
        g_eff = np.array([0.0, 0.0, -GRAVITY_M_S2])
        if acceleration_m_s2 is not None:
            g_eff = g_eff - np.asarray(acceleration_m_s2, dtype=float)
        norm = float(np.linalg.norm(g_eff))
        if not math.isfinite(norm) or norm < 1e-9:
            raise SoilInputError(
                f"bucket acceleration {acceleration_m_s2!r} m/s^2 cancels gravity or is not "
                "finite: the soil has no 'down'; pass the bucket's acceleration in world "
                "[m/s^2] (free fall is outside this model)")
        up: np.ndarray = self._frame @ (rotation.T @ (-g_eff / norm))
        return up, norm

    def slide_fraction(self, up_n: float, gravity_m_s2: float, elapsed_s: float) -> float:
        """Advance the sliding block by ``elapsed_s`` [s] under an effective gravity of
        ``gravity_m_s2`` [m/s^2] whose "up" has component ``up_n`` along the opening's normal;
        returns the share of what stands beyond the held shape that leaves in that time (the
        distance slid now against the distance still to go along the chord)."""
        un = min(max(up_n, -1.0), 1.0)
        drive = gravity_m_s2 * (math.sqrt(1.0 - un * un) - un * self.tan_r)
        drive = min(drive, gravity_m_s2)   # opening down: the soil falls, no faster
        s = self.slide
        speed = max(0.0, s.speed_m_s + drive * max(elapsed_s, 0.0))
        step = 0.5 * (s.speed_m_s + speed) * max(elapsed_s, 0.0)
        if speed == 0.0 and un >= self.cos_r:   # at rest, and held: a later slide starts anew
            self.slide = Slide()
            return 0.0
        to_go = self.grid.length_m - s.distance_m
        fraction = 1.0 if step >= to_go else step / to_go
        self.slide = Slide(speed, s.distance_m + step, s.owed_units)
        return fraction

    def settle(self, pose: BucketPose, acceleration_m_s2: np.ndarray | None = None,
               elapsed_s: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Relax the soil for the bucket at ``pose``; returns what left the bucket: world
        points [m] (n, 3) where it leaves, the horizontal outward direction (n, 2) it falls
        along (zero: straight down through the opening) and the unit counts (n,).
        ``elapsed_s``: the time [s] since the last update, which bounds how much slides out
        (module docstring, "How fast"); None: what the bucket cannot hold leaves at once."""
        g = self.grid
        rot = pose.rotation()
        up, gravity = self._effective_up(rot, acceleration_m_s2)
        fraction = 1.0
        if elapsed_s is not None:
            if not (math.isfinite(elapsed_s) and elapsed_s >= 0.0):
                raise SoilInputError(f"elapsed time {elapsed_s!r} s between soil updates: "
                                     "pass the simulated time since the last one, >= 0")
            fraction = self.slide_fraction(float(up[2]), gravity, elapsed_s)
        ns, nw = g.shape
        spill = np.zeros((ns + 2, nw + 2), dtype=np.int64)
        owed = np.array([self.slide.owed_units if elapsed_s is not None else 0.0, -1.0])
        settle(self.units, g.floor_n, g.ds, g.dw, g.dn, g.length_m, g.width_m, up, self.tan_r,
               self.cos_r, SWEEPS, spill, fraction, owed)
        if elapsed_s is not None:
            s = self.slide
            # nothing left beyond the held shape: no block slides (new soil starts at rest)
            self.slide = (Slide() if owed[1] == 0.0
                          else Slide(s.speed_m_s, s.distance_m, float(owed[0])))
        a, b = np.nonzero(spill)
        if len(a) == 0:
            return np.zeros((0, 3)), np.zeros((0, 2)), np.zeros(0, dtype=np.int64)
        s = np.clip((a - 0.5) * g.ds, 0.0, g.length_m)
        w = np.clip(-0.5 * g.width_m + (b - 0.5) * g.dw, -0.5 * g.width_m, 0.5 * g.width_m)
        local = g.origin + s[:, None] * g.e_s + w[:, None] * g.e_w
        points = local @ rot.T + pose.position
        out_local = np.zeros((len(a), 3))
        out_local[a == 0] = -g.e_s
        out_local[a == ns + 1] = g.e_s
        inner = (a > 0) & (a < ns + 1)
        out_local[inner & (b == 0)] = -g.e_w
        out_local[inner & (b == nw + 1)] = g.e_w
        out = (out_local @ rot.T)[:, :2]
        norm = np.linalg.norm(out, axis=1)
        out = np.where(norm[:, None] > 1e-9, out / np.maximum(norm, 1e-9)[:, None], 0.0)
        return points, out, spill[a, b]

    def surface_points(self, pose: BucketPose) -> np.ndarray:
        """World points [m] (ns, nw, 3) of the columns' tops (for drawing)."""
        g = self.grid
        ns, nw = g.shape
        s = (np.arange(ns) + 0.5) * g.ds
        w = -0.5 * g.width_m + (np.arange(nw) + 0.5) * g.dw
        n = g.floor_n[:, None] + self.units * g.dn
        local = (g.origin + s[:, None, None] * g.e_s + w[None, :, None] * g.e_w
                 + n[:, :, None] * g.e_n)
        points: np.ndarray = local @ pose.rotation().T + pose.position
        return points

    def columns(self, pose: BucketPose) -> np.ndarray:
        """The soil as boxes to draw, in ``bucket_soil.soil_columns``'s format (rows of centre
        x, y, z, half sizes along the heading, across and up [m], yaw [rad]): one vertical box
        per non-empty column, spanning the column's soil from floor to top in z, its cell's
        size in plan. Exact in volume while the opening faces straight up (the carry); a
        picture, not a measure, when the bucket is tilted."""
        g = self.grid
        i, j = np.nonzero(self.units)
        if len(i) == 0:
            return np.zeros((0, 7))
        s = (i + 0.5) * g.ds
        w = -0.5 * g.width_m + (j + 0.5) * g.dw
        floor = g.origin + s[:, None] * g.e_s + w[:, None] * g.e_w + g.floor_n[i, None] * g.e_n
        top = floor + (self.units[i, j] * g.dn)[:, None] * g.e_n
        rot = pose.rotation()
        fw, tw = floor @ rot.T + pose.position, top @ rot.T + pose.position
        centre = 0.5 * (fw + tw)
        half_up = 0.5 * np.abs(tw[:, 2] - fw[:, 2])
        out = np.empty((len(i), 7))
        out[:, 0:3] = centre
        out[:, 3] = 0.5 * g.ds
        out[:, 4] = 0.5 * g.dw
        out[:, 5] = half_up
        out[:, 6] = pose.yaw
        drawn: np.ndarray = out[half_up > 1e-6]
        return drawn

    def cell_triangles(self, pose: BucketPose, units: np.ndarray | None = None) -> np.ndarray:
        """The soil as drawn for RViz: each non-empty column a box in the bucket's own frame
        (its cell over the opening, from the floor to its top along the opening's normal),
        as triangles in ``world`` ``(k * 36, 3)`` [m] (``boxes.boxes_to_triangles``). Exact
        in volume at any tilt: the boxes hold ``units x unit volume``. ``units``: a copy of
        the columns taken elsewhere (default: the body's own)."""
        g = self.grid
        u = self.units if units is None else units
        i, j = np.nonzero(u)
        if len(i) == 0:
            return np.zeros((0, 3))
        s = np.stack([i * g.ds, (i + 1) * g.ds], axis=1)
        w = np.stack([-0.5 * g.width_m + j * g.dw, -0.5 * g.width_m + (j + 1) * g.dw], axis=1)
        n = np.stack([g.floor_n[i], g.floor_n[i] + u[i, j] * g.dn], axis=1)
        k = np.arange(8)
        local = (g.origin + s[:, (k >> 2) & 1, None] * g.e_s + w[:, (k >> 1) & 1, None] * g.e_w
                 + n[:, k & 1, None] * g.e_n)                                    # (m, 8, 3)
        corners = local @ pose.rotation().T + pose.position
        return boxes_to_triangles(corners)

    def centre_of_mass_bucket_m(self) -> np.ndarray | None:
        """Centre of mass of the load in the bucket frame [m] (None: empty): the hook for a
        payload on the simulator's bucket body."""
        total = self.total_units
        if total == 0:
            return None
        g = self.grid
        ns, nw = g.shape
        s = (np.arange(ns) + 0.5) * g.ds
        w = -0.5 * g.width_m + (np.arange(nw) + 0.5) * g.dw
        n_mid = g.floor_n[:, None] + 0.5 * self.units * g.dn
        weights = self.units / total
        cs = float((weights.sum(axis=1) * s).sum())
        cw = float((weights.sum(axis=0) * w).sum())
        cn = float((weights * n_mid).sum())
        centre: np.ndarray = g.origin + cs * g.e_s + cw * g.e_w + cn * g.e_n
        return centre

    def payload(self, density_kg_m3: float) -> BucketPayload:
        """The load as a rigid body (mass, centre, inertia in the bucket frame) from the
        cells: each column a box of its cell's plan (ds x dw) and its soil's height along the
        opening's normal, summed with the parallel-axis theorem. Boxes over a sloped floor
        miss the floor's wedge by half a cell; the inertia is that close, the mass exact."""
        total = self.total_units
        if total == 0:
            return BucketPayload.empty()
        g = self.grid
        unit_mass = self.unit_volume_m3 * density_kg_m3
        i, j = np.nonzero(self.units)
        m = self.units[i, j] * unit_mass
        h = self.units[i, j] * g.dn
        # centres in the opening frame (s, w, n)
        r = np.stack([(i + 0.5) * g.ds, -0.5 * g.width_m + (j + 0.5) * g.dw,
                      g.floor_n[i] + 0.5 * h], axis=1)
        mass = float(m.sum())
        c = (m[:, None] * r).sum(axis=0) / mass
        d = r - c
        own = np.zeros((len(m), 3))
        own[:, 0] = m / 12.0 * (g.dw ** 2 + h ** 2)
        own[:, 1] = m / 12.0 * (g.ds ** 2 + h ** 2)
        own[:, 2] = m / 12.0 * (g.ds ** 2 + g.dw ** 2)
        inertia = np.diag(own.sum(axis=0)) + (
            (m * (d * d).sum(axis=1)).sum() * np.eye(3) - (m[:, None, None] * d[:, :, None]
                                                            * d[:, None, :]).sum(axis=0))
        f = self._frame  # rows e_s, e_w, e_n in the bucket frame
        centre = g.origin + f.T @ c
        return BucketPayload(mass, centre, f.T @ inertia @ f)


class AccelerationEstimate:
    """The bucket's acceleration [m/s^2] in ``world`` from its velocities and their times:
    the difference of successive velocities, low-passed over ``time_constant_s``, capped at
    ``limit_m_s2`` (the pseudo-static model stands for sustained accelerations, not impacts).
    None until two samples are known, and after a gap (a time going back, or more than
    ``gap_s`` between samples).

    The time constant is the soil's: the body relaxes at once, real soil takes time to flow.
    A sliding block (Newmark 1965) under an excess acceleration ``a_e`` moves ``a_e t^2 / 2``
    in ``t``: one 5 cm cell at 5 m/s^2 takes 0.14 s, so a pulse much shorter than ~0.1 s
    moves the soil less than a cell. With 0.02 s the spikes of the machine's own hydraulics (a
    swing drive's start, a servo's stop: 0.8 g for a few tens of ms) emptied a third of the
    demo's carried load at the swing's start; with 0.1 s the swing costs it 4 %, and a swing's
    start (~0.5 s at 1.7 rad/s^2) still spills a heap."""

    def __init__(self, time_constant_s: float = 0.1, limit_m_s2: float = 0.8 * GRAVITY_M_S2,
                 gap_s: float = 0.2) -> None:
        self.time_constant_s = time_constant_s
        self.limit_m_s2 = limit_m_s2
        self.gap_s = gap_s
        self._last: tuple[float, np.ndarray] | None = None
        self._value: np.ndarray | None = None

    def update(self, time_s: float, velocity_m_s: np.ndarray) -> np.ndarray | None:
        """The estimate after the velocity [m/s] at ``time_s`` [s] (non-finite input is
        ignored)."""
        v = np.asarray(velocity_m_s, dtype=float)
        if not (math.isfinite(time_s) and np.all(np.isfinite(v))):
            return self._value
        last, self._last = self._last, (time_s, v.copy())
        if last is None:
            return self._value
        dt = time_s - last[0]
        if not (0.0 < dt <= self.gap_s):
            if dt != 0.0:
                self._value = None
            return self._value
        raw = (v - last[1]) / dt
        k = dt / (self.time_constant_s + dt)
        value: np.ndarray = raw if self._value is None else self._value + k * (raw - self._value)
        norm = float(np.linalg.norm(value))
        if norm > self.limit_m_s2:
            value = value * (self.limit_m_s2 / norm)
        self._value = value
        return value


class UpdateInterval:
    """The time between soil updates [s] for the soil sliding out of the bucket
    (:meth:`BucketBody.settle`'s ``elapsed_s``), from the updates' instants."""

    def __init__(self, max_elapsed_s: float = 0.2) -> None:
        # updates further apart (a gap in the poses) do not count the time between them as
        # sliding under the last one's tilt
        self.max_elapsed_s = max_elapsed_s
        self._last_s: float | None = None

    def elapsed(self, time_s: float | None) -> float | None:
        """Seconds since the last update (``time_s``: this one's instant [s]): None without
        an instant (the soil then leaves at once), 0 at the first one or after the clock went
        back (nothing has slid yet), at most ``max_elapsed_s``."""
        if time_s is None or not math.isfinite(time_s):
            return None
        last, self._last_s = self._last_s, time_s
        if last is None or time_s < last:
            return 0.0
        return min(time_s - last, self.max_elapsed_s)
