"""The working-range diagram of a machine, drawn from its geometry like a spec sheet's.

``excavator-hil working-ranges [--machine NAME|PATH] [--plot FILE.png]`` prints the ISO 7135
working ranges (``excavator_kinematics.working_ranges``) of the default machine or a preset,
against the published figures when the preset carries them (``published:``), and draws the
envelope: the region the bucket tip sweeps over the joint ranges (side view, swing axis at
x = 0, ground line at z = 0), the machine in a reference pose and the five dimensions.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_kinematics.working_ranges import WorkingRanges, working_ranges

LABELS = {
    "reach_at_ground_m": "maximum reach at ground level",
    "dig_depth_m": "maximum digging depth",
    "cutting_height_m": "maximum cutting height",
    "dump_height_m": "maximum dumping height",
    "min_front_swing_radius_m": "minimum front swing radius",
}


def table(ranges: WorkingRanges, published: Mapping[str, Any] | None) -> str:
    """The figures as a text table, with the published value and the error where known."""
    rows = [f"{'figure':32s} {'model [m]':>9s} {'published':>9s} {'error':>7s}"]
    values = ranges.as_dict()
    for key, label in LABELS.items():
        pub = published.get(key) if published else None
        if pub:
            rows.append(f"{label:32s} {values[key]:9.3f} {float(pub):9.3f} "
                        f"{100.0 * (values[key] - float(pub)) / float(pub):+6.2f} %")
        else:
            rows.append(f"{label:32s} {values[key]:9.3f} {'-':>9s} {'':>7s}")
    rows.append(f"{'maximum reach':32s} {ranges.max_reach_m:9.3f}")
    if published and published.get("source"):
        rows.append(f"published: {published['source']}")
    return "\n".join(rows)


def tip_envelope(geometry: ExcavatorGeometry, linkage: Linkage, n: int = 81) -> np.ndarray:
    """Outer boundary of the tip's reachable region, ``[k, 2]`` (x, z) in the ground frame:
    the farthest sampled tip per direction seen from the boom foot."""
    lim = linkage.joint_limits
    grids = np.meshgrid(*(np.linspace(*lim[j], n) for j in ("boom", "arm", "bucket")),
                        indexing="ij")
    tip = linkage.points(*(g.ravel() for g in grids))["tip"] + np.array(geometry.B)
    centre = np.array(geometry.B) + np.array(geometry.C)
    rel = tip - centre
    ang = np.arctan2(rel[:, 1], rel[:, 0])
    rad = np.hypot(rel[:, 0], rel[:, 1])
    bins = np.linspace(-math.pi, math.pi, 361)
    idx = np.digitize(ang, bins)
    out = []
    for k in range(1, len(bins)):
        sel = idx == k
        if np.any(sel):
            j = np.flatnonzero(sel)[np.argmax(rad[sel])]
            out.append(tip[j])
    pts = np.array(out)
    return np.vstack([pts, pts[:1]])


def write_plot(path: str | Path, geometry: ExcavatorGeometry, title: str,
               published: Mapping[str, Any] | None = None) -> Path:
    """The working-range diagram to ``path`` (PNG)."""
    linkage = Linkage(geometry)
    ranges = working_ranges(geometry, linkage)
    env = tip_envelope(geometry, linkage)
    fig, ax = plt.subplots(figsize=(9.5, 8.0))
    ax.fill(env[:, 0], env[:, 1], color="#cfe0f5", zorder=0, label="tip envelope")
    ax.plot(env[:, 0], env[:, 1], color="#3060a0", lw=1.2)
    ax.axhline(0.0, color="k", lw=1.0)
    ax.axvline(0.0, color="0.5", lw=0.8, ls="--")
    # the machine in a reference pose: boom 30 deg, arm -80 deg, bucket 90 deg (clipped)
    lim = linkage.joint_limits
    q = [min(max(v, lim[j][0]), lim[j][1]) for j, v in
         zip(("boom", "arm", "bucket"), (math.radians(30), math.radians(-80), math.radians(90)),
             strict=True)]
    pts = {k: v + np.array(geometry.B) for k, v in linkage.points(*q).items()}
    for chain in (("C", "H", "M", "tip", "base", "M"), ("D", "E"), ("F", "G"), ("I", "J"),
                  ("J", "K"), ("J", "L")):
        xy = np.array([pts[k] for k in chain])
        ax.plot(xy[:, 0], xy[:, 1], color="#c08000", lw=2.5 if len(chain) > 2 else 1.5)
    ax.add_patch(Rectangle((-1.6, 0.0), 3.2, geometry.B[1], color="0.6"))
    ax.add_patch(Rectangle((-1.4, geometry.B[1]), 2.0, 1.7, color="0.75"))
    v = ranges.as_dict()

    def label(key: str) -> str:
        pub = published.get(key) if published else None
        return f"{v[key]:.2f} m" + (f" (sheet {float(pub):.2f})" if pub else "")

    ax.annotate("", (v["reach_at_ground_m"], -0.15), (0.0, -0.15),
                arrowprops={"arrowstyle": "<->"})
    ax.text(v["reach_at_ground_m"] / 2, -0.05, "reach at ground " + label("reach_at_ground_m"),
            ha="center")
    x_depth = float(env[np.argmin(env[:, 1]), 0])
    ax.annotate("", (x_depth, -v["dig_depth_m"]), (x_depth, 0.0), arrowprops={"arrowstyle": "<->"})
    ax.text(x_depth + 0.1, -v["dig_depth_m"] / 2, "digging depth\n" + label("dig_depth_m"))
    x_high = float(env[np.argmax(env[:, 1]), 0])
    ax.annotate("", (x_high, v["cutting_height_m"]), (x_high, 0.0),
                arrowprops={"arrowstyle": "<->"})
    ax.text(x_high + 0.1, v["cutting_height_m"] * 0.75, "cutting height\n" + label(
        "cutting_height_m"))
    ax.annotate("", (x_high - 1.2, v["dump_height_m"]), (x_high - 1.2, 0.0),
                arrowprops={"arrowstyle": "<->"})
    ax.text(x_high - 1.15, v["dump_height_m"] * 0.45, "dump height\n" + label("dump_height_m"))
    r = v["min_front_swing_radius_m"]
    ax.annotate("", (r, geometry.B[1] + 2.2), (0.0, geometry.B[1] + 2.2),
                arrowprops={"arrowstyle": "<->"})
    ax.text(0.1, geometry.B[1] + 2.35, "min. front swing radius " + label(
        "min_front_swing_radius_m"))
    ax.set_aspect("equal")
    ax.set_xlabel("distance from the swing axis [m]")
    ax.set_ylabel("height above the ground reference plane [m]")
    ax.set_title(title)
    ax.grid(True, lw=0.3)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    from excavator_sim.machines import load_machine

    ap = argparse.ArgumentParser(prog="excavator-hil working-ranges",
                                 description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--machine", help="a preset name (config/machines/) or file; default: the "
                                      "default machine (config/excavator.yaml)")
    ap.add_argument("--plot", help="write the working-range diagram to this PNG")
    args = ap.parse_args(argv)
    if args.machine:
        preset = load_machine(args.machine)
        geometry, published = preset.geometry(), preset.published
        title = f"{preset.name}: working ranges (ISO 7135), from the geometry"
    else:
        geometry, published = default_geometry(), None
        title = "default machine: working ranges (ISO 7135), from the geometry"
        # the default machine's published figures: the preset its geometry came from
        from excavator_sim.machines import available_machines
        for name in available_machines():
            preset = load_machine(name)
            if preset.published and preset.geometry_data is not None and (
                    preset.geometry() == geometry):
                published = preset.published
                title = f"default machine ({name}): working ranges (ISO 7135), from the geometry"
    print(table(working_ranges(geometry), published))
    if args.plot:
        print(f"wrote {write_plot(args.plot, geometry, title, published)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
