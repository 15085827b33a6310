"""The demo's closed-loop drive without ROS: the path's ground (the soil model's ridge, the
traction patch, the stretched grids) as the drive train takes it, and the figures and plot the
demo makes of a record (excavator_hil.demo.drive_path, excavator_hil.demo.hil_record)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from excavator_hil.demo import hil_record
from excavator_hil.demo.drive_path import DrivePath
from excavator_hil.fleet import sim_grid_parameters
from excavator_sim.drivetrain.grade import ground_normal
from excavator_sim.sim_config import load_sim_config
from excavator_sim.soil.config import load_soil_config, soil_config_from_parameters
from excavator_sim.soil.scenarios import REFERENCE_BUCKET
from excavator_sim.soil.terrain import Terrain

PATH = DrivePath()
SHIPPED = load_soil_config().terrain


def test_the_ridge_is_in_the_soil_models_terrain_and_its_parameters() -> None:
    """terrain.ridge_* of soil_node's file: a cosine bump across the grid, crest and height
    as given, flat ground beyond its feet; 0 height (the shipped file) keeps the ground flat."""
    grid = PATH.soil_grid(SHIPPED)
    config = soil_config_from_parameters(PATH.soil_node_parameters(grid))
    terrain = Terrain(config.terrain, REFERENCE_BUCKET)
    heights = terrain.heights_m()
    xs = grid.x0 + (np.arange(grid.nx) + 0.5) * grid.cell_xy_m
    profile = heights[:, grid.ny // 2]
    assert np.all(heights == profile[:, None])                   # the same across y
    assert profile.max() == pytest.approx(PATH.ridge_height_m, abs=grid.cell_z_m)
    assert abs(float(np.mean(xs[profile == profile.max()])) - PATH.ridge_x_m) < 0.03
    feet = np.abs(xs - PATH.ridge_x_m) >= 0.5 * PATH.ridge_length_m
    assert np.all(profile[feet] == 0.0)
    flat = Terrain(load_soil_config().terrain, terrain.bucket)
    assert np.all(flat.heights_m() == 0.0)


def test_the_path_has_firm_ground_a_soft_patch_and_a_slope_under_the_drive_train() -> None:
    """Along the path, what sim_node's drive train takes: the soil under the tracks' centres
    (heavy clay, dry sand on the patch, from traction.patch.*) and the grade of the plane
    through the terrain under the footprint (grade.ground_normal): nose up, then down, at least
    8 deg at its steepest, the patch on the uphill flank's grade; the start and the dig site
    flat; the stretched soil grid
    and sim_node's height field on the same cells, the dig side of the grid unchanged."""
    grid = PATH.soil_grid(SHIPPED)
    assert grid.x0 == pytest.approx(PATH.grid_x_min_m)
    assert grid.x0 + grid.nx * grid.cell_xy_m == pytest.approx(SHIPPED.x0 + SHIPPED.nx
                                                               * SHIPPED.cell_xy_m)
    sim = load_sim_config(overrides={**sim_grid_parameters(grid), **PATH.sim_parameters(),
                                     "drive_mode": "plant"})
    assert sim.terrain.nx == grid.nx and sim.terrain.x0 == pytest.approx(
        grid.x0 + 0.5 * grid.cell_xy_m)
    assert sim.initial.base_x == PATH.start_x_m
    dt = sim.drivetrain
    assert dt is not None
    length, gauge = dt.params.tracks.contact_length_m, dt.params.tracks.gauge_m
    heights = grid.initial_heights_m()[:, 0]
    xs = sim.terrain.x0 + np.arange(sim.terrain.nx) * sim.terrain.cell_size

    def height(x: float, _y: float) -> float:
        return float(np.interp(x, xs, heights))

    def pitch_up_deg(x: float) -> float:
        n = ground_normal(height, x, 0.0, 0.0, length, gauge)
        return math.degrees(math.atan2(-n[0], n[2]))

    along = np.arange(PATH.start_x_m, PATH.stop_x_m + 1e-9, 0.05)
    pitch = np.array([pitch_up_deg(x) for x in along])
    assert pitch.max() >= 8.0 and pitch.min() <= -8.0
    assert along[np.argmax(pitch)] < PATH.ridge_x_m < along[np.argmin(pitch)]   # up, then down
    for x in (PATH.start_x_m, PATH.stop_x_m):                        # flat where it ends
        assert abs(pitch_up_deg(x)) < 0.01, x
    # the soft patch lies on the uphill flank: a plane of the ridge's grade under the tracks
    assert pitch_up_deg(float(np.mean(PATH.patch_x_m))) == pytest.approx(
        math.degrees(PATH.steepest_grade_rad), abs=0.05)
    soils = dt.soils
    for x, soil in ((PATH.start_x_m, "heavy_clay"), (float(np.mean(PATH.patch_x_m)),
                                                     "dry_sand"), (PATH.ridge_x_m, "heavy_clay")):
        for y in (-0.5 * gauge, 0.5 * gauge):                         # each track's centre
            assert soils.soil_at(x, y).name == soil, (x, y)
    assert PATH.zone(float(np.mean(PATH.patch_x_m)), 0.5 * length) == "patch"
    assert PATH.zone(PATH.ridge_x_m, 0.5 * length) == "ridge"
    assert PATH.zone(PATH.start_x_m, 0.5 * length) == "firm"
    assert PATH.zone(PATH.stop_x_m, 0.5 * length) == "firm"


def _record(t_end: float = 40.0, sp: float = 0.8) -> hil_record.HilRecord:
    """A drive at ``sp`` from x = start at the set-point's speed: tracks 0.5 % fast on firm
    ground, ground speed 10 % slow on the patch, torque at the limit for 1 s."""
    rec = hil_record.HilRecord()
    rec.clock = [(100.0 + t, t) for t in np.arange(0.0, t_end + 1.0, 0.5)]  # wall 100 s ahead
    rec.setpoints = [(100.0, sp, sp)]
    x = PATH.start_x_m
    for t in np.arange(0.0, t_end, 0.01):
        zone = PATH.zone(x, 1.215)
        v = sp * 1.005
        ground = 0.9 * v if zone == "patch" else 0.999 * v
        torque = 8550.0 if 12.0 <= t < 13.0 else 2000.0
        rec.sensors.append((t, v, v, ground, torque, torque, x))
        # nose up on the flank, where the patch lies
        rec.imu.append((t, 0.0, PATH.steepest_grade_rad if zone == "patch" else 0.0))
        x += ground * 0.01
    return rec


def test_figures_of_a_record() -> None:
    rec = _record()
    f = hil_record.figures(rec, PATH, 8550.0, 2.6, 1.215)
    assert f.steady_error_pct == pytest.approx((0.5, 0.5), abs=1e-6)
    assert f.steady_window_s > 1.0
    assert f.peak_slip == pytest.approx((0.1, 0.1), rel=1e-6)
    assert f.peak_slip_where == "patch"
    assert f.mean_slip_by_ground["firm"] == pytest.approx(0.001, rel=1e-3)
    assert f.saturated_s == pytest.approx(1.0, abs=0.02)
    assert f.steepest_pitch_deg == pytest.approx(math.degrees(PATH.steepest_grade_rad))
    assert f.uphill_error_pct == pytest.approx(0.5, abs=1e-6) and f.uphill_window_s > 0.1
    # the set-points are the PLC's, mapped from its clock to simulated time
    assert list(rec.setpoint_at(np.array([-1.0, 0.5]))[:, 0]) == [0.0, 0.8]


def test_a_stop_by_the_plc_under_a_standing_set_point_is_not_driving() -> None:
    """The PLC's watchdog trips on the patch (a starved bridge): its program brings the drives
    to 0 while the last set-point it took stays 0.8 m/s. The tracks then run slower than the
    ground (a braking slip, negative): that second is not the drive's slip on sand, nor its
    speed error. Its log of mode changes says when it drove."""
    rec = _record()
    on_patch = [k for k, row in enumerate(rec.sensors)
                if PATH.zone(row[6], 1.215) == "patch"]
    stop = on_patch[len(on_patch) // 3]
    t_stop = rec.sensors[stop][0]
    for k in range(stop, stop + 100):               # 1 s: tracks stopped, the machine coasts
        t, _, _, ground, tq, _, x = rec.sensors[k]
        rec.sensors[k] = (t, 0.0, 0.0, ground, -tq, -tq, x)
    before = hil_record.figures(rec, PATH, 8550.0, 2.6, 1.215)
    assert before.mean_slip_by_ground["patch"] < 0.0   # what the demo reported under load
    # (wall time = simulated + 100 s in _record's clock)
    rec.modes = [(90.0, "parked"), (100.0, "drive"), (100.0 + t_stop, "stopping"),
                 (100.0 + t_stop + 0.6, "parked"), (100.0 + t_stop + 1.0, "drive")]
    f = hil_record.figures(rec, PATH, 8550.0, 2.6, 1.215)
    assert f.mean_slip_by_ground["patch"] == pytest.approx(0.1, rel=1e-6)
    assert f.mean_slip_by_ground["firm"] == pytest.approx(0.001, rel=1e-3)
    sp = rec.setpoint_at(np.array([t_stop - 0.01, t_stop + 0.01, t_stop + 0.8, t_stop + 1.01]))
    assert list(sp[:, 0]) == [0.8, 0.0, 0.0, 0.8]


def test_the_drive_plot_is_written(tmp_path: Path) -> None:
    out = tmp_path / "drive_loop.png"
    hil_record.plot(_record(), PATH, out, 2.6, 1.215, 8550.0)
    image = matplotlib.image.imread(out)
    assert image.shape[0] > 600 and image.shape[1] > 800
    assert float(np.std(image[..., :3])) > 0.02
