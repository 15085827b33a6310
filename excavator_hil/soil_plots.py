"""Pictures of the soil model (matplotlib, Agg backend; no display needed).

- ``write_force_plot``: the paper's Fig. 7 redone: force components along a scoop at 10 and
  40 deg attack, DiMaio model vs the FEE, on flat ground (the same path and depth for both
  angles) and with the terrain coupled (the bucket fills; its load weighs).
- ``write_trench_plot``: the terrain after a dig-swing-dump cycle (shaded height map).
- ``write_bucket_soil_render``: the MuJoCo machine coupled to the soil model, after a scoop and
  a curl, rendered with the bucket's heaped soil (``SoilCoupling.bucket_soil()``) and the cut.

CLI: ``python -m excavator_hil.soil_plots --out-dir docs/img [--preset NAME]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from excavator_kinematics.geometry import default_geometry
from excavator_sim.soil.bucket_prism import BucketPrism
from excavator_sim.soil.config import SoilConfig, load_soil_config
from excavator_sim.soil.scenarios import dig_swing_dump, run_cut
from excavator_sim.soil.terrain import Terrain


def write_force_plot(path: str | Path, config: SoilConfig | None = None,
                     depth_m: float = 0.25) -> Path:
    """Fig.-7-style force plot to ``path`` (PNG): rows 10 and 40 deg attack; left flat ground,
    right with the terrain coupled. Radial (along the teeth, horizontal) and vertical forces
    [kN] on the bucket against time, DiMaio solid, FEE dashed."""
    config = config or load_soil_config()
    bucket = BucketPrism.from_geometry(default_geometry())
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5), sharex=True, sharey=True)
    for row, attack in enumerate((10.0, 40.0)):
        for col, coupled in enumerate((False, True)):
            terrain = Terrain(config.terrain, bucket) if coupled else None
            s = run_cut(bucket, config.dimaio, config.fee, terrain, attack, depth_m)
            t = np.array([x.t for x in s])
            ax = axes[row, col]
            ax.plot(t, [x.radial_n / 1e3 for x in s], color="tab:blue", lw=1.0,
                    label="DiMaio radial $f_r$")
            ax.plot(t, [x.vertical_n / 1e3 for x in s], color="tab:red", lw=1.0,
                    label="DiMaio vertical $f_z$")
            ax.plot(t, [x.fee_radial_n / 1e3 for x in s], color="tab:blue", ls="--", lw=1.4,
                    label="FEE radial")
            ax.plot(t, [x.fee_vertical_n / 1e3 for x in s], color="tab:red", ls="--", lw=1.4,
                    label="FEE vertical")
            if coupled:
                weight = [x.components["load"][2] / 1e3 for x in s]
                ax.plot(t, weight, color="tab:green", lw=1.2, label="load weight")
                load = max(x.load_m3 for x in s)
                where = f"terrain coupled, max load {load:.3f} m$^3$"
            else:
                where = "flat ground, empty bucket"
            ax.set_title(f"attack {attack:.0f} deg, {where}", fontsize=10)
            ax.axhline(0.0, color="0.6", lw=0.6)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("force on bucket [kN]")
            if row == 1:
                ax.set_xlabel("time [s]")
    axes[0, 0].legend(loc="lower left", fontsize=8)
    axes[0, 1].legend(loc="lower left", fontsize=8)
    fig.suptitle(
        f"Bucket-soil forces along a {depth_m:.2f} m deep cut at 0.5 m/s "
        f"(preset {config.preset}); teeth point to -x, r along them: resistance is negative",
        fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_trench_plot(path: str | Path, config: SoilConfig | None = None) -> Path:
    """Shaded height map [m] of the terrain after one dig-swing-dump cycle, to ``path``."""
    config = config or load_soil_config()
    bucket = BucketPrism.from_geometry(default_geometry())
    terrain = Terrain(config.terrain, bucket)
    start = terrain.h.copy()
    for _phase, pose in dig_swing_dump(terrain, bucket, dt=0.005):
        terrain.update(pose)
    moved_m3 = float(np.abs(terrain.h - start).sum()) * config.terrain.unit_volume_m3 / 2.0
    drift = terrain.total_units - int(start.sum())
    xs, ys = terrain.cell_centres()
    keep_x = (xs > -1.0) & (xs < 8.0)
    keep_y = (ys > -2.0) & (ys < 7.0)
    h = terrain.heights_m()[np.ix_(keep_x, keep_y)]
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    extent = (ys[keep_y][0], ys[keep_y][-1], xs[keep_x][0], xs[keep_x][-1])
    light = matplotlib.colors.LightSource(azdeg=315, altdeg=45)
    lim = max(abs(h.min()), abs(h.max()))
    cmap = plt.get_cmap("BrBG_r")
    shaded = light.shade(h, cmap=cmap, vmin=-lim, vmax=lim, vert_exag=20.0, blend_mode="soft")
    ax.imshow(shaded, origin="lower", extent=extent, aspect="equal")
    mappable = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(-lim, lim),
                                            cmap=cmap)
    fig.colorbar(mappable, ax=ax, label="terrain height [m]")
    ax.plot([0.0], [0.0], marker="^", color="k")
    ax.annotate("machine", (0.0, 0.0), textcoords="offset points", xytext=(6, -12))
    ax.set_xlabel("world y [m] (left)")
    ax.set_ylabel("world x [m] (forward)")
    ax.set_title(f"After one dig-swing-dump cycle: trench at +x, dump pile at +y\n"
                 f"soil moved {moved_m3:.3f} m$^3$, mass drift {drift} units", fontsize=10)
    ax.invert_xaxis()  # y to the left, as seen from above with x up
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# Bucket-tip targets [m] in base_link with the absolute bucket angle [rad] (the IK's pitch):
# above the ground, 0.25 m into it, a drag towards the machine, then (joint space) a curl
# that closes the bucket and a lift (as the demo's dig cycle does).
SCOOP = [((6.0, 0.0, 0.3), 0.6), ((5.8, 0.0, -0.25), 0.5), ((4.9, 0.0, -0.25), 0.1)]
CURL_LIFT = [{"boom": 0.3, "arm": -2.25, "bucket": 0.72},
             {"boom": 0.6, "arm": -2.28, "bucket": 0.72}]


def write_bucket_soil_render(path: str | Path, config: SoilConfig | None = None,
                             steps_per_leg: int = 2500) -> tuple[Path, float]:
    """Coupled scoop (default machine, soil model as the ground), then a curl and a lift; the
    render shows the heaped soil in the bucket. Returns (path, bucket load [m^3])."""
    import dataclasses

    from excavator_hil.render import render_png
    from excavator_kinematics.inverse_kinematics import InverseKinematics
    from excavator_sim.sim_config import load_sim_config
    from excavator_sim.simulation import ExcavatorSimulation
    from excavator_sim.soil.coupling import SoilCoupling

    config = config or load_soil_config()
    geometry = default_geometry()
    sim = ExcavatorSimulation(dataclasses.replace(load_sim_config(), terrain_contact=False))
    coupling = SoilCoupling(config, BucketPrism.from_geometry(geometry))
    ik = InverseKinematics(geometry)
    legs: list[dict[str, float]] = []
    for target, pitch in SCOOP:
        q = ik.solve(np.array(target), pitch).q
        legs.append(dict(zip(("swing", "boom", "arm", "bucket"), map(float, q), strict=True)))
    for leg in [*legs, *CURL_LIFT]:
        sim.set_joint_targets(leg)
        for _ in range(steps_per_leg):
            sim.step(1)
            coupling.step(sim)
    load = coupling.terrain.load_volume_m3
    out = render_png(sim, path, width=1280, height=720, bucket_soil=coupling.bucket_soil(),
                     lookat=tuple(sim.bucket_tip()), distance=4.0, azimuth=-60.0,
                     elevation=-35.0)
    return out, load


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the soil model's pictures (PNG).")
    parser.add_argument("--out-dir", default="docs/img", help="directory for the PNG files")
    parser.add_argument("--preset", default=None, help="soil preset of config/soil.yaml")
    parser.add_argument("--depth", type=float, default=0.25, help="cut depth [m]")
    args = parser.parse_args(argv)
    config = load_soil_config(preset=args.preset)
    out = Path(args.out_dir)
    print(write_force_plot(out / "soil_forces_fig7.png", config, args.depth))
    print(write_trench_plot(out / "soil_trench.png", config))
    path, load = write_bucket_soil_render(out / "bucket_soil.png", config)
    print(f"{path} (bucket load {load:.3f} m^3)")


if __name__ == "__main__":
    main()
