"""Machine figures computed from the model the way spec sheets state them.

- **Bucket digging force** (ISO 6015, SAE J1179): the force the bucket cylinder(s) produce at the
  bucket tip at the relief pressure, tangent to the arc of radius |M T| (bucket pivot to tip),
  the largest over the bucket's range. Here the bucket curls (teeth towards the machine) when
  its cylinder extends, so the bore side works: ``F = p A_bore |de/dq| / |M T|``.
- **Arm crowd force** (ISO 6015): the force the arm cylinder(s) produce at the tip, tangent to
  the arc of radius |H T| (arm pivot to tip), at the relief pressure, the largest over the arm's
  range, with the bucket set for the largest radius |H T| (the convention most sheets follow:
  the smallest force over the bucket's angles, i.e. a lower bound).
- **Cylinder times**: a full stroke at the direction's flow (``stroke A_bore / Q_out`` out,
  ``stroke A_annulus / Q_in`` in), the figure a
  service manual's "cylinder speed check" measures; the machine's own axis times follow from
  the flow limits.
- **Operating weight**: the model's total mass (upper structure, undercarriage, front).
- **Reach at ground level, digging depth, heaped bucket**: ISO 7135's (the tip on the ground
  farthest from the swing axis; its lowest point below the ground; over the joint ranges:
  ``excavator_kinematics.working_ranges``); SAE J296's heaped capacity.

``python -m excavator_sim.iso6015 [--machine heavy_36t]`` prints them with the validation table
against the 7-9 t class's published ranges (:data:`MIDI_CLASS`; docs/simulation.md).

``de/dq`` is the linkage's closed-form extension derivative, so every figure is a function of
config/excavator.yaml (geometry, masses) and config/sim.yaml (hydraulics) only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.geometry import ExcavatorGeometry
from excavator_kinematics.linkage import Linkage
from excavator_kinematics.working_ranges import working_ranges
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
    reach_at_ground_m: float = math.nan
    dig_depth_m: float = math.nan
    heaped_capacity_m3: float = math.nan

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
    reach, depth = _reach_and_depth(geometry, linkage)
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
        reach_at_ground_m=reach, dig_depth_m=depth, heaped_capacity_m3=heaped_capacity_m3(geometry),
    )


def heaped_capacity_m3(geometry: ExcavatorGeometry) -> float:
    """SAE J296 heaped capacity [m^3] of the bucket prism J-B-T x width: the struck volume plus
    the 1:1 heap on the strike line J-T, ``V_struck + W L^2/4 - L^3/12`` (docs/soil.md)."""
    (bx, bz), (tx, tz) = geometry.bucket_base, geometry.tip
    width = geometry.bucket_width_m
    struck = 0.5 * abs(bx * tz - tx * bz) * width
    length = math.hypot(tx, tz)
    return struck + width * length ** 2 / 4.0 - length ** 3 / 12.0


def _reach_and_depth(geometry: ExcavatorGeometry, linkage: Linkage) -> tuple[float, float]:
    """(maximum reach at ground level [m], maximum digging depth [m]) as ISO 7135 states them
    (``excavator_kinematics.working_ranges``): the figures the class's sheets publish."""
    ranges = working_ranges(geometry, linkage)
    return ranges.reach_at_ground_m, ranges.dig_depth_m


@dataclass(frozen=True)
class PublishedRange:
    """A spec-sheet figure's range over a machine class, with where the figures come from."""

    figure: str
    low: float
    high: float
    unit: str
    source: str
    checked: bool  # the validation test holds the default machine to it


# 7-9 t (midi) crawler excavators, the class of the seed geometry. What was found (session 5,
# stored public pages; each figure with its source; "conv" = converted from lb, lbf, in, yd^3):
# - operating weight: Komatsu PC78US-8 spec sheet 6,945-7,535 kg; Caterpillar 308C CR spec sheet
#   8,040 kg; Doosan DX80R 18,364 lb = 8.33 t conv (Utility Contractor, "Equipment Spotlight:
#   Mini Excavators", Feb 2011); Bobcat E85 8.6 t (Earthmovers, "Midi excavators (7.5 to
#   11.5-tonne)"); Caterpillar 309 CR 19,735-21,091 lb = 8.95-9.57 t conv (dealer spec pages).
# - bucket digging force: DX80R 12,274 lbf = 54.6 kN conv (Utility Contractor); Kubota KX080
#   "exceeding 6,000 kgf" = 58.9 kN (a forum post: weak). Arm crowd force: DX80R 9,194 lbf =
#   40.9 kN conv (Utility Contractor), the only one found. Ranges: the cited values +-10 %.
# - relief pressure: no 7-9 t figure found; the neighbours': Caterpillar 305E CR (5 t) service
#   manual, main relief 24.5-26.0 MPa, line relief 27.25 +- 0.7 MPa; Komatsu PC130-8 (13 t) shop
#   manual, swing relief 29.2 +- 1.0 MPa. Pump flow: no 7-9 t figure found (Takeuchi TB228,
#   2.8 t: 91.6 L/min total): no row; the model's flows per direction come from the cycle
#   times (below), within two 75 L/min pumps (the project's estimate).
# - reach at ground level: DX80R 22 ft 8 in = 6.91 m conv; Cat 309 CR 6.95 m (standard stick),
#   7.46 m (long stick). Digging depth: DX80R 4.19 m, Cat 309 CR 4.11 / 4.64 m, Bobcat E85 4.62 m.
# - bucket, heaped (SAE): Komatsu PC78US-8 0.09-0.34 m^3 (0.28 with the 1.65 m arm); DX80R
#   0.366 yd^3 = 0.28 m^3 conv.
# - cylinder times (full stroke, empty bucket, engine at full speed, oil 55 C, new machine):
#   Caterpillar's "Cylinder Speed - Check" of the 305E CR / 305.5E CR (5 / 5.5 t): boom out
#   2.6 / 2.8 s, in 2.7 / 2.5 s; stick out 3.5 / 3.6 s, in 2.6 / 2.9 s; bucket out 3.1 s, in
#   2.0 s, each +- 0.4 s (ch-part.com, Caterpillar service information). The 308C CR's and
#   308D CR's tables exist but their values were not reachable here: these are the nearest
#   published test times, of a machine 2/3 the weight. Ranges: both machines' values +- 0.4 s.
#   The model's flows per direction are set to the middle of the two machines' values (session
#   6, config/sim.yaml): the test holds them. Session 6 looked again for the 7-9 t class's own
#   times (Cat 308C CR / 308D CR, Komatsu PC78US, Hitachi ZX75US / ZX85US, Kubota KX080 shop
#   manuals): the tables exist, their values were out of the search's reach. Context, not
#   held: Cat 300.9D (0.9 t) 2.0-3.5 s, Hyundai R300LC-9S (30 t) 2.4-4.0 s, so full-stroke
#   times barely change with the class.
# ISO 6015:2006 (AS ISO 6015:2021): tool force at the bucket lip, one cylinder at a time, at the
# maximum working circuit pressure; the arm's tangential to the arc of the lip about the arm pivot.
_CAT_305E = "Cat 305E CR / 305.5E CR test times +- 0.4 s (5 t; the 308's not found)"
MIDI_CLASS: tuple[PublishedRange, ...] = (
    PublishedRange("operating weight", 6.9, 9.6, "t",
                   "Komatsu PC78US-8 6.9-7.5 t; Cat 308C CR 8.04 t; Doosan DX80R 8.33 t; "
                   "Bobcat E85 8.6 t; Cat 309 CR 8.95-9.57 t", True),
    PublishedRange("bucket digging force (ISO 6015)", 49.1, 64.8, "kN",
                   "Doosan DX80R 54.6 kN; Kubota KX080 > 58.9 kN (forum, weak); +-10 %", True),
    PublishedRange("arm crowd force (ISO 6015)", 36.8, 45.0, "kN",
                   "Doosan DX80R 40.9 kN (the only one found); +-10 %", True),
    PublishedRange("relief pressure", 24.5, 29.2, "MPa",
                   "no 7-9 t figure found; Cat 305E CR (5 t) 24.5-26.0 main / 27.25 line; "
                   "Komatsu PC130-8 (13 t) 29.2 swing", True),
    PublishedRange("max reach at ground level", 6.9, 7.5, "m",
                   "Doosan DX80R 6.91 m; Cat 309 CR 6.95 / 7.46 m", True),
    PublishedRange("digging depth", 4.1, 4.7, "m",
                   "Doosan DX80R 4.19 m; Cat 309 CR 4.11 / 4.64 m; Bobcat E85 4.62 m", True),
    PublishedRange("bucket, heaped (SAE J296)", 0.09, 0.35, "m^3",
                   "Komatsu PC78US-8 0.09-0.34 (0.28 std); Doosan DX80R 0.28", False),
    PublishedRange("boom cylinder out (raise)", 2.2, 3.2, "s", _CAT_305E, True),
    PublishedRange("boom cylinder in (lower)", 2.1, 3.1, "s", _CAT_305E, True),
    PublishedRange("arm cylinder out (arm in)", 3.1, 4.0, "s", _CAT_305E, True),
    PublishedRange("arm cylinder in (arm out)", 2.2, 3.3, "s", _CAT_305E, True),
    PublishedRange("bucket cylinder out (curl)", 2.7, 3.5, "s", _CAT_305E, True),
    PublishedRange("bucket cylinder in (dump)", 1.6, 2.4, "s", _CAT_305E, True),
)


def model_value(figures: MachineFigures, figure: str) -> float:
    """The model's value of a :data:`MIDI_CLASS` figure, in that figure's unit."""
    return {
        "operating weight": figures.operating_weight_kg / 1e3,
        "bucket digging force (ISO 6015)": figures.bucket_digging_force_n / 1e3,
        "arm crowd force (ISO 6015)": figures.arm_crowd_force_n / 1e3,
        "relief pressure": figures.relief_pressure_pa / 1e6,
        "max reach at ground level": figures.reach_at_ground_m,
        "digging depth": figures.dig_depth_m,
        "bucket, heaped (SAE J296)": figures.heaped_capacity_m3,
        "boom cylinder out (raise)": figures.boom_raise_s,
        "boom cylinder in (lower)": figures.boom_lower_s,
        "arm cylinder out (arm in)": figures.arm_in_s,
        "arm cylinder in (arm out)": figures.arm_out_s,
        "bucket cylinder out (curl)": figures.bucket_curl_s,
        "bucket cylinder in (dump)": figures.bucket_dump_s,
    }[figure]


def validation_table(machines: dict[str, MachineFigures],
                     ranges: tuple[PublishedRange, ...] = MIDI_CLASS) -> str:
    """Markdown table: each machine's figure against the class's published range."""
    names = list(machines)
    head = ("| figure | 7-9 t class | " + " | ".join(names) + " | source |\n"
            "|---|---|" + "---|" * len(names) + "---|")
    rows = [head]
    for r in ranges:
        cells = []
        for n in names:
            v = model_value(machines[n], r.figure)
            inside = r.low <= v <= r.high
            cells.append(f"{v:.3g}" + ("" if inside else " (outside)"))
        rows.append(f"| {r.figure} [{r.unit}] | {r.low:g}-{r.high:g} | " + " | ".join(cells)
                    + f" | {r.source} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """``python -m excavator_sim.iso6015 [--machine NAME ...]``: the spec-sheet figures of the
    default machine (and of presets) and the validation table against the 7-9 t class."""
    import argparse

    from excavator_kinematics.geometry import default_geometry
    from excavator_sim.errors import SimConfigError
    from excavator_sim.machines import load_machine
    from excavator_sim.sim_config import load_sim_config

    parser = argparse.ArgumentParser(prog="python -m excavator_sim.iso6015",
                                     description=main.__doc__)
    parser.add_argument("--machine", action="append", default=[],
                        help="also a machine preset (name in config/machines/ or a file)")
    args = parser.parse_args(argv)
    figures: dict[str, MachineFigures] = {}
    try:
        figures["default"] = machine_figures(default_geometry(), load_sim_config().hydraulics)
        for name in args.machine:
            preset = load_machine(name)
            figures[preset.name] = machine_figures(preset.geometry(),
                                                   load_sim_config(machine=preset).hydraulics)
    except SimConfigError as exc:
        print(f"error: {exc}")
        return 2
    for name, fig in figures.items():
        print(f"{name}: " + "; ".join(f"{k} {v}" for k, v in fig.rows()))
    print()
    print(validation_table(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
