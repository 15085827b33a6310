"""One terrain two machines dig in: each machine's bucket state over one height grid (pure core,
:mod:`excavator_sim.soil.shared_terrain`), and soil_node serving two machines over real DDS (each
machine's pose in, each machine's wrench and load out, one terrain: the second machine cutting
where the first dug finds the trench, not fresh ground)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from helpers import EVENT_WAIT_S, NodeProcess, RosTestNode, send_bucket_state, wait_for
from std_msgs.msg import Float64, Float64MultiArray

from excavator_kinematics.geometry import default_geometry
from excavator_sim.soil.bucket_prism import BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.errors import SoilInputError
from excavator_sim.soil.scenarios import (
    cut_tip_path,
    dig_swing_dump,
    pitch_for_attack,
    pose_for_tip,
)
from excavator_sim.soil.shared_terrain import SharedTerrain
from excavator_sim.soil.terrain import Terrain
from excavator_sim.soil.terrain_config import TerrainConfig

BUCKET = BucketPrism.from_geometry(default_geometry())


def _dig_poses(terrain: Terrain) -> list:
    return [pose for phase, pose in dig_swing_dump(terrain, BUCKET, dt=0.01)
            if phase in ("approach", "dig")]


def test_the_second_machine_digs_in_the_first_ones_trench_and_soil_is_conserved() -> None:
    base = load_soil_config().terrain
    config = dataclasses.replace(base, size_y_m=24.0, centre_y_m=4.0)
    shared = SharedTerrain(config, BUCKET, ["a", "b"])
    a, b = shared.terrains["a"], shared.terrains["b"]
    total = shared.total_units
    poses = _dig_poses(a)
    for pose in poses:
        a.update(pose)
        assert shared.total_units == total
    dug = a.load_units
    assert dug * config.unit_volume_m3 > 0.05
    # b sees a's trench: the same ground
    assert float(b.height_at(5.0, 0.0)) < -0.1
    assert shared.take_dirty() is not None and shared.take_dirty() is None
    # b makes the same pass: it moves the ground a sees; a keeps its load
    after_a = a.heights_m().copy()
    for pose in poses:
        b.update(pose)
        assert shared.total_units == total
    assert b.load_units > 0 and a.load_units == dug
    assert not np.array_equal(a.heights_m(), after_a)
    assert np.array_equal(a.heights_m(), b.heights_m())
    # b's own trench 8 m to the side: fresh ground there, a full bucket's worth
    c = SharedTerrain(config, BUCKET, ["a", "b"])
    for pose in poses:
        c.terrains["b"].update(dataclasses.replace(pose, y=pose.y + 8.0))
    assert c.terrains["b"].load_units == pytest.approx(dug, rel=0.05)
    assert c.terrains["a"].load_units == 0


def test_machine_names_must_be_distinct() -> None:
    with pytest.raises(SoilInputError, match="distinct"):
        SharedTerrain(TerrainConfig(size_x_m=2.0, size_y_m=2.0), BUCKET, ["a", "a"])


class Machine:
    def __init__(self, probe: RosTestNode, ns: str):
        self.wrenches: list[WrenchStamped] = probe.collect(WrenchStamped, f"/{ns}/soil/wrench",
                                                           1000)
        self.loads: list[Float64] = probe.collect(Float64, f"/{ns}/soil/bucket_load", 1000)
        self.pose = probe.node.create_publisher(PoseStamped, f"/{ns}/bucket_pose", 1000)
        self.twist = probe.node.create_publisher(TwistStamped, f"/{ns}/bucket_twist", 1000)

    def cut(self, t0: float, y: float) -> None:
        """The scripted cut at world ``y`` [m], lock-step (each pose, then its wrench)."""
        pitch = pitch_for_attack(BUCKET, math.radians(30.0))
        for t, tip, vel in cut_tip_path(0.25, x_start=5.5, length_m=1.0, speed_m_s=0.5,
                                        dt=0.01):
            pose = pose_for_tip(BUCKET, tip + np.array([0.0, y, 0.0]), pitch, 0.0)
            send_bucket_state(self.pose, self.twist, pose, vel, t0 + t)
            wait_for(lambda t=t: self.wrenches and _seconds(self.wrenches[-1].header.stamp)
                     >= t0 + t - 1e-9, EVENT_WAIT_S, f"the wrench for t={t0 + t:.3f} s")
        # each wrench's load comes after it, on its own topic
        wait_for(lambda: len(self.loads) == len(self.wrenches),
                 EVENT_WAIT_S, "the last bucket_load")


def _grid(patches: list[Float64MultiArray], nx: int, ny: int) -> np.ndarray:
    from excavator_sim.terrain_patch import flat_to_patch

    grid = np.zeros((nx, ny))
    for msg in patches:
        i0, j0, heights = flat_to_patch(msg.layout.dim[0].size, msg.layout.dim[1].size, msg.data)
        grid[i0:i0 + heights.shape[0], j0:j0 + heights.shape[1]] = heights
    return grid


def _seconds(stamp: object) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec  # type: ignore[attr-defined]


@pytest.mark.slow
def test_one_soil_node_serves_two_machines_in_one_terrain(tmp_path: Path) -> None:
    probe = RosTestNode("soil_shared_probe")
    m1, m2 = Machine(probe, "m1"), Machine(probe, "m2")
    patches: list[Float64MultiArray] = probe.collect(Float64MultiArray, "/soil/terrain_patch",
                                                     1000)
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics", 100)
    soil = NodeProcess("excavator_sim.soil.soil_node", [
        "--ros-args", "-p", "machines:=m1,m2", "-p", "terrain.size_x_m:=8.0",
        "-p", "terrain.size_y_m:=6.0", "-p", "terrain.centre_x_m:=4.0"], log_dir=tmp_path)
    try:
        wait_for(lambda: all(m.pose.get_subscription_count() and m.twist.get_subscription_count()
                             for m in (m1, m2)), EVENT_WAIT_S, lambda: f"soil_node\n{soil.log()}")
        m1.cut(100.0, -1.5)
        assert max(m.data for m in m1.loads) > 0.05
        load1 = m1.loads[-1].data   # what it carries after its cut (the cells may spill some)
        assert not m2.wrenches and not m2.loads          # machine 2's topics stay quiet
        n1, n_loads1 = len(m1.wrenches), len(m1.loads)
        m2.cut(50.0, 1.5)                                 # its own stamps, its own strip
        load2 = max(m.data for m in m2.loads)
        assert load2 > 0.05
        assert len(m1.wrenches) == n1                     # each machine its own wrench
        assert m1.loads[-1].data == pytest.approx(load1, abs=1e-9)   # machine 1 keeps its load
        assert len(m1.loads) == n_loads1                  # and is sent nothing of machine 2's
        # one grid on one data topic holds both trenches
        config = dataclasses.replace(load_soil_config().terrain, size_x_m=8.0, size_y_m=6.0,
                                     centre_x_m=4.0)
        xs = config.x0 + (np.arange(config.nx) + 0.5) * config.cell_xy_m
        ys = config.y0 + (np.arange(config.ny) + 0.5) * config.cell_xy_m
        near = (xs > 5.0) & (xs < 6.0)

        def depths() -> list[float]:
            grid = _grid(list(patches), config.nx, config.ny)
            return [float(grid[near][:, np.abs(ys - y) < 0.2].min()) for y in (-1.5, 1.5)]
        # (the patches follow the wrenches and loads on their own topic: waited for)
        wait_for(lambda: all(d < -0.1 for d in depths()), EVENT_WAIT_S,
                 lambda: f"both trenches in the shared soil/terrain_patch: {depths()} m")

        def status() -> dict[str, str]:
            for d in reversed(list(diagnostics)):
                for s in d.status:
                    if s.name.startswith("soil_node"):
                        return {kv.key: kv.value for kv in s.values}
            return {}
        wait_for(lambda: "m2/bucket_load_m3" in status() and float(
            status()["m2/bucket_load_m3"]) > 0, EVENT_WAIT_S, lambda: f"m2's load on /diagnostics "
            f"({status()})")
        st = status()
        assert float(st["m1/bucket_load_m3"]) == pytest.approx(load1, abs=1e-4)
        assert int(st["mass_drift_units"]) == 0
        assert "shared by m1, m2" in soil.log()
    finally:
        probe.close()
        code = soil.stop()
    assert code == 0, soil.log()


def test_soil_node_refuses_a_bad_machine_name(tmp_path: Path) -> None:
    proc = NodeProcess("excavator_sim.soil.soil_node", ["--ros-args", "-p", "machines:=m1,2x"],
                       log_dir=tmp_path)
    code = proc.proc.wait(120)
    proc.stop()
    assert code == 2, proc.log()
    assert "machines: '2x'" in proc.log() and "Traceback" not in proc.log()
