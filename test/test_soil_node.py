"""soil_node in its own process over real DDS: a scripted scoop in, wrench/load/terrain out."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from helpers import NodeProcess, RosTestNode, send_bucket_state, wait_for
from std_msgs.msg import Float64, Float64MultiArray
from visualization_msgs.msg import Marker

from excavator_kinematics.geometry import default_geometry
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.scenarios import cut_tip_path, pitch_for_attack, pose_for_tip

BUCKET = BucketPrism.from_geometry(default_geometry())
ARGS = ["--ros-args", "-p", "terrain.size_x_m:=8.0", "-p", "terrain.size_y_m:=6.0",
        "-p", "terrain.centre_x_m:=4.0", "-p", "heightmap_rate_hz:=5.0"]


@pytest.fixture(scope="module")
def soil_process(tmp_path_factory: pytest.TempPathFactory):
    proc = NodeProcess("excavator_sim.soil.soil_node", ARGS,
                       log_dir=tmp_path_factory.mktemp("soil_node"))
    yield proc
    code = proc.stop()
    assert code == 0, proc.log()


@pytest.fixture(scope="module")
def probe():
    node = RosTestNode("soil_probe")
    yield node
    node.close()


class Channel:
    def __init__(self, probe: RosTestNode):
        self.wrenches: list[WrenchStamped] = probe.collect(WrenchStamped, "soil/wrench", 1000)
        self.loads: list[Float64] = probe.collect(Float64, "soil/bucket_load", 1000)
        self.patches: list[Float64MultiArray] = probe.collect(Float64MultiArray,
                                                             "soil/terrain_patch", 1000)
        self.meshes: list[Marker] = probe.collect(Marker, "soil/heightmap", 10)
        self.diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray,
                                                               "/diagnostics", 100)
        self.pose = probe.node.create_publisher(PoseStamped, "bucket_pose", 1000)
        self.twist = probe.node.create_publisher(TwistStamped, "bucket_twist", 1000)

    def send(self, pose: BucketPose, vel: np.ndarray, t: float, frame: str = "world") -> None:
        send_bucket_state(self.pose, self.twist, pose, vel, t, frame)

    def errors(self) -> list[str]:
        return [s.message for d in self.diagnostics for s in d.status
                if s.level == b"\x02" and s.name.startswith("soil_node")]


@pytest.fixture(scope="module")
def channel(soil_process: NodeProcess, probe: RosTestNode) -> Channel:
    ch = Channel(probe)
    wait_for(lambda: ch.diagnostics and ch.pose.get_subscription_count() > 0
             and ch.twist.get_subscription_count() > 0, 30.0,
             lambda: f"soil_node to come up; its log:\n{soil_process.log()}")
    return ch


def _terrain_from_patches(patches: list[Float64MultiArray], nx: int, ny: int) -> np.ndarray:
    """Rebuild the grid [m] from the data topic, decoded by the simulator's own reader."""
    from excavator_sim.heightfield import flat_to_patch

    grid = np.zeros((nx, ny))  # the initial flat ground (the start-up full grid may predate
    # discovery: DDS does not replay volatile messages)
    for msg in patches:
        assert [d.label for d in msg.layout.dim] == ["i", "j"] and msg.layout.data_offset == 2
        i0, j0, heights = flat_to_patch(msg.layout.dim[0].size, msg.layout.dim[1].size, msg.data)
        grid[i0:i0 + heights.shape[0], j0:j0 + heights.shape[1]] = heights
    return grid


def test_a_scoop_fills_the_bucket_pushes_back_and_leaves_a_trench(channel: Channel) -> None:
    pitch = pitch_for_attack(BUCKET, math.radians(30.0))
    sent = 0
    tips = []
    for t, tip, vel in cut_tip_path(0.25, x_start=5.5, length_m=1.0, speed_m_s=0.5, dt=0.01):
        channel.send(pose_for_tip(BUCKET, tip, pitch, 0.0), vel, 100.0 + t)
        tips.append(tip)
        sent += 1
        time.sleep(0.003)
    wait_for(lambda: len(channel.wrenches) >= sent and len(channel.loads) >= sent, 30.0,
             lambda: f"{sent} wrenches (got {len(channel.wrenches)})")
    force = np.array([[w.wrench.force.x, w.wrench.force.y, w.wrench.force.z]
                      for w in channel.wrenches[-sent:]])
    depth = np.array([-tip[2] for tip in tips])
    first_contact = int(np.argmax(depth > 0.0))
    before = depth[:first_contact] < -0.01
    assert before.sum() > 5
    assert np.all(force[:first_contact][before] == 0.0)  # above the ground, empty: no force
    cutting = depth > 0.2
    assert np.all(np.linalg.norm(force[cutting], axis=1) > 500.0)
    assert np.mean(force[cutting, 0]) > 0.0  # resists the cut towards -x
    loads = np.array([m.data for m in channel.loads[-sent:]])
    assert loads[0] == 0.0 and loads.max() > 0.05  # m^3 in the bucket
    assert all(w.header.frame_id == "world" for w in channel.wrenches)
    # the terrain is lower where the bucket passed (rebuilt from the data topic)
    wait_for(lambda: channel.meshes, 10.0, "a heightmap mesh")
    grid = _terrain_from_patches(channel.patches, 160, 120)
    x0, cell = 0.0, 0.05  # terrain.centre_x_m 4 +- 4 m
    i = int((4.8 - x0) / cell)
    j = int((0.0 + 3.0) / cell)
    assert grid[i, j] < -0.2
    assert grid.max() > 0.0  # the spill / pushed soil lies somewhere
    mesh = channel.meshes[-1]
    assert mesh.type == Marker.TRIANGLE_LIST and len(mesh.points) % 3 == 0
    assert min(p.z for p in mesh.points) < -0.1


def test_bad_poses_are_rejected_on_diagnostics(channel: Channel) -> None:
    n = len(channel.wrenches)
    nan_pose = PoseStamped()
    nan_pose.header.frame_id = "world"
    nan_pose.pose.position.x = float("nan")
    nan_pose.pose.orientation.w = 1.0
    channel.pose.publish(nan_pose)
    wait_for(lambda: any("not finite" in e for e in channel.errors()), 10.0,
             "a diagnostics error for the NaN pose")
    channel.send(BucketPose(4.0, 0.0, 1.0, 0.0, 0.0), np.zeros(3), 501.0, frame="map")
    wait_for(lambda: any("'map'" in e for e in channel.errors()), 10.0, "a frame error")
    time.sleep(0.2)
    assert len(channel.wrenches) == n  # nothing published for malformed input
    # outside the grid: an error, the terrain untouched, but a current wrench (load weight only)
    time.sleep(0.5)  # let a pending periodic full-grid patch (5 Hz) go out first
    patches = len(channel.patches)
    # 10 m: past the 8 m grid, within the machine's reach of it (farther is implausible)
    channel.send(BucketPose(10.0, 0.0, 0.0, 0.0, 0.0), np.array([-0.5, 0.0, 0.0]), 502.0)
    wait_for(lambda: any("leaves the terrain grid" in e for e in channel.errors()), 10.0,
             "a diagnostics error for the bucket outside the grid")
    wait_for(lambda: len(channel.wrenches) == n + 1, 10.0, "the no-ground wrench")
    f = channel.wrenches[-1].wrench.force
    load = channel.loads[-1].data
    assert (f.x, f.y) == (0.0, 0.0) and f.z == pytest.approx(-1800.0 * 9.81 * load)
    time.sleep(0.2)
    assert len(channel.patches) == patches
