"""soil_node in its own process over real DDS: a scripted scoop in, wrench/load/terrain out;
latest wins under a burst of poses (no backlog), the last pose always answered."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import InertiaStamped, PoseStamped, TwistStamped, WrenchStamped
from helpers import (
    EVENT_WAIT_S,
    NodeProcess,
    RosTestNode,
    send_bucket_state,
    set_parameters,
    wait_for,
)
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Float64, Float64MultiArray
from visualization_msgs.msg import Marker

from excavator_kinematics.geometry import default_geometry
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.scenarios import cut_tip_path, pitch_for_attack, pose_for_tip
from excavator_sim.soil.terrain_messages import cloud_points

BUCKET = BucketPrism.from_geometry(default_geometry())
ARGS = ["--ros-args", "-p", "terrain.size_x_m:=8.0", "-p", "terrain.size_y_m:=6.0",
        "-p", "terrain.centre_x_m:=4.0", "-p", "heightmap_rate_hz:=5.0",
        "-p", "terrain.bucket_soil_model:=cells"]


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
        self.payloads: list[InertiaStamped] = probe.collect(InertiaStamped,
                                                            "soil/bucket_payload", 1000)
        self.patches: list[Float64MultiArray] = probe.collect(Float64MultiArray,
                                                             "soil/terrain_patch", 1000)
        self.meshes: list[PointCloud2] = probe.collect(PointCloud2, "soil/heightmap", 10)
        self.bucket_soil: list[Marker] = probe.collect(Marker, "soil/bucket_soil", 100)
        self.diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray,
                                                               "/diagnostics", 100)
        self.pose = probe.node.create_publisher(PoseStamped, "bucket_pose", 1000)
        self.twist = probe.node.create_publisher(TwistStamped, "bucket_twist", 1000)

    def send(self, pose: BucketPose, vel: np.ndarray, t: float, frame: str = "world") -> None:
        send_bucket_state(self.pose, self.twist, pose, vel, t, frame)

    def answered(self, t: float) -> bool:
        """Whether the pose stamped ``t`` [s] (or a later one) has had its wrench."""
        return bool(self.wrenches) and _seconds(self.wrenches[-1].header.stamp) >= t - 1e-9

    def send_and_wait(self, pose: BucketPose, vel: np.ndarray, t: float) -> None:
        """Lock-step: one pose, then its wrench (so every pose is processed, however slow
        the machine)."""
        self.send(pose, vel, t)
        wait_for(lambda: self.answered(t), EVENT_WAIT_S, f"the wrench for the pose at t={t:.3f} s")

    def status(self, key: str) -> str | None:
        for d in reversed(list(self.diagnostics)):
            for s in d.status:
                if s.name.startswith("soil_node"):
                    return next((v.value for v in s.values if v.key == key), None)
        return None

    def errors(self) -> list[str]:
        return [s.message for d in self.diagnostics for s in d.status
                if s.level == b"\x02" and s.name.startswith("soil_node")]


def _seconds(stamp: object) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def channel(soil_process: NodeProcess, probe: RosTestNode) -> Channel:
    ch = Channel(probe)
    wait_for(lambda: ch.diagnostics and ch.pose.get_subscription_count() > 0
             and ch.twist.get_subscription_count() > 0, EVENT_WAIT_S,
             lambda: f"soil_node to come up; its log:\n{soil_process.log()}")
    return ch


def _terrain_from_patches(patches: list[Float64MultiArray], nx: int, ny: int) -> np.ndarray:
    """Rebuild the grid [m] from the data topic, decoded by the simulator's own reader."""
    from excavator_sim.terrain_patch import flat_to_patch

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
        channel.send_and_wait(pose_for_tip(BUCKET, tip, pitch, 0.0), vel, 100.0 + t)
        tips.append(tip)
        sent += 1
    wait_for(lambda: len(channel.loads) >= sent, EVENT_WAIT_S,
             lambda: f"{sent} loads (got {len(channel.loads)})")
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
    # the terrain is lower where the bucket passed (rebuilt from the data topic, whose patches
    # follow the wrenches and loads on their own topic: the last may still be on the way)
    wait_for(lambda: channel.meshes, EVENT_WAIT_S, "a heightmap mesh")
    x0, cell = 0.0, 0.05  # terrain.centre_x_m 4 +- 4 m
    i = int((4.8 - x0) / cell)
    j = int((0.0 + 3.0) / cell)
    (grid,) = wait_for(lambda: (g := _terrain_from_patches(list(channel.patches), 160, 120))[
        i, j] < -0.2 and [g], EVENT_WAIT_S, lambda: "the trench in soil/terrain_patch")
    assert grid.max() > 0.0  # the spill / pushed soil lies somewhere
    # the heightmap cloud for RViz: x, y, z float32 points over the grid, the trench in it
    wait_for(lambda: _cloud_min_z(channel.meshes[-1]) < -0.1,
             EVENT_WAIT_S, "the trench in the cloud")
    cloud = channel.meshes[-1]
    assert cloud.header.frame_id == "world" and [f.name for f in cloud.fields] == ["x", "y", "z"]
    points = cloud_points(cloud.data, cloud.width, cloud.height, cloud.point_step)
    assert len(points) == 160 * 120  # every cell centre of 160 x 120 (<= 160 per side)
    assert points[:, 0].min() < 0.1 and points[:, 0].max() > 7.8
    # the bucket's soil for RViz (issue 14.7): a closed mesh of columns holding the load (the
    # marker thread publishes at 10 Hz: wait for the one of the last update); the per-cell
    # bucket soil's boxes (the default) hold it exactly, at any tilt
    from test_bucket_soil import mesh_volume

    def last_mesh() -> np.ndarray:
        marker = channel.bucket_soil[-1]
        assert marker.header.frame_id == "world" and marker.type == Marker.TRIANGLE_LIST
        assert len(marker.points) % 36 == 0
        return np.array([[q.x, q.y, q.z] for q in marker.points]).reshape(-1, 3)

    wait_for(lambda: channel.bucket_soil and channel.bucket_soil[-1].action == Marker.ADD
             and abs(mesh_volume(last_mesh()) - loads[-1]) < 1e-9 + 1e-9 * loads[-1], EVENT_WAIT_S,
             lambda: f"a soil/bucket_soil marker of the {loads[-1]:.3f} m^3 load")
    tris = last_mesh()
    assert np.linalg.norm(tris.mean(axis=0)[:2] - tips[-1][:2]) < 1.5  # at the bucket


def _is_full_grid(msg: Float64MultiArray, nx: int, ny: int) -> bool:
    from excavator_sim.terrain_patch import flat_to_patch

    i0, j0, heights = flat_to_patch(msg.layout.dim[0].size, msg.layout.dim[1].size, msg.data)
    return (i0, j0, heights.shape) == (0, 0, (nx, ny))


def test_a_subscriber_that_joins_late_gets_the_whole_grid(channel: Channel) -> None:
    """A simulator started after soil_node (its start-up grid long sent, the terrain not
    changing) still gets the ground: soil_node sends the whole grid at its next visualisation
    period after the new subscriber matched (DDS does not replay volatile messages)."""
    nx, ny = 160, 120
    # the terrain settled: the start-up grid (and any dirty one) already went out
    wait_for(lambda: any(_is_full_grid(m, nx, ny) for m in channel.patches), EVENT_WAIT_S,
             "soil_node's start-up full grid")
    time.sleep(1.0)   # several heightmap periods (5 Hz) with nothing changed
    late = RosTestNode("late_simulator")
    try:
        patches = late.collect(Float64MultiArray, "soil/terrain_patch", 10)
        wait_for(lambda: any(_is_full_grid(m, nx, ny) for m in patches), EVENT_WAIT_S,
                 "the whole grid for the subscriber that joined late")
    finally:
        late.close()


def _cloud_min_z(cloud: PointCloud2) -> float:
    return float(cloud_points(cloud.data, cloud.width, cloud.height, cloud.point_step)[:, 2]
                 .min())


def test_a_burst_of_poses_is_worked_off_newest_first_without_a_backlog(channel: Channel
                                                                      ) -> None:
    """Poses sent much faster than the node works: it skips to the newest (latest wins), the
    last one is always answered, and every pose is either processed or counted as
    superseded; the soil is conserved."""
    # a status that has counted every update so far (one wrench each)
    wait_for(lambda: int(channel.status("updates") or -1) == len(channel.wrenches), EVENT_WAIT_S,
             "soil diagnostics up to date")
    updates0 = int(channel.status("updates") or 0)
    superseded0 = int(channel.status("poses_superseded") or 0)
    skipped0 = int(channel.status("poses_rate_skipped") or 0)
    n0 = len(channel.wrenches)
    pitch = pitch_for_attack(BUCKET, math.radians(30.0))
    path = list(cut_tip_path(0.2, x_start=2.5, length_m=1.0, speed_m_s=0.5, dt=0.01))
    for t, tip, vel in path:  # no pause: far faster than the node can follow
        channel.send(pose_for_tip(BUCKET, tip, pitch, 0.0), vel, 300.0 + t)
    last = 300.0 + path[-1][0]
    wait_for(lambda: channel.answered(last), EVENT_WAIT_S, "the wrench for the newest pose")
    stamps = [_seconds(w.header.stamp) for w in channel.wrenches[n0:]]
    assert stamps == sorted(stamps) and len(stamps) <= len(path)
    assert stamps[-1] == pytest.approx(last)

    def accounted() -> bool:
        updates = int(channel.status("updates") or 0) - updates0
        superseded = int(channel.status("poses_superseded") or 0) - superseded0
        skipped = int(channel.status("poses_rate_skipped") or 0) - skipped0
        return updates + superseded + skipped == len(path)

    wait_for(accounted, EVENT_WAIT_S, lambda: f"{len(path)} poses processed or superseded: "
             f"{channel.status('updates')} - {updates0} + {channel.status('poses_superseded')} "
             f"- {superseded0} (" + ", ".join(
                 f"{k} {channel.status(k)}" for k in (
                     "poses_rate_skipped", "answers_repeated", "poses_waited_for_twist",
                     "poses_without_twist", "rejected")) + ")")
    assert channel.status("mass_drift_units") == "0"  # soil conserved, however many skipped


def test_a_pose_sent_again_gets_the_same_answer_without_a_second_update(channel: Channel
                                                                        ) -> None:
    """sim_node's lockstep sends a pose again when its answer does not come: soil_node answers
    that stamp with the wrench, load and payload it sent for it, without working the soil at
    that pose a second time (counted as answers_repeated, not as an update)."""
    wait_for(lambda: int(channel.status("updates") or -1) == len(channel.wrenches), EVENT_WAIT_S,
             "soil diagnostics up to date")
    updates0 = int(channel.status("updates") or 0)
    repeated0 = int(channel.status("answers_repeated") or 0)
    pitch = pitch_for_attack(BUCKET, math.radians(30.0))
    pose = pose_for_tip(BUCKET, np.array([3.0, 0.0, -0.15]), pitch, 0.0)   # in the soil
    vel = np.array([-0.5, 0.0, 0.0])
    channel.send_and_wait(pose, vel, 600.0)
    n = len(channel.wrenches)
    first, load, payload = channel.wrenches[-1], channel.loads[-1], channel.payloads[-1]
    assert np.linalg.norm([first.wrench.force.x, first.wrench.force.z]) > 0.0
    channel.send(pose, vel, 600.0)   # the same stamp again
    wait_for(lambda: len(channel.wrenches) > n, EVENT_WAIT_S, "the answer again")
    again = channel.wrenches[-1]
    assert _seconds(again.header.stamp) == pytest.approx(600.0)
    assert again.wrench == first.wrench
    wait_for(lambda: channel.loads[-1] is not load and channel.payloads[-1] is not payload,
             EVENT_WAIT_S, "the load and payload again")
    assert channel.loads[-1].data == load.data
    assert channel.payloads[-1].inertia == payload.inertia
    wait_for(lambda: int(channel.status("answers_repeated") or 0) == repeated0 + 1, EVENT_WAIT_S,
             lambda: f"answers_repeated {channel.status('answers_repeated')}")
    assert int(channel.status("updates") or 0) == updates0 + 1   # one update for both
    assert channel.status("mass_drift_units") == "0"


def test_bad_poses_are_rejected_on_diagnostics(channel: Channel) -> None:
    n = len(channel.wrenches)
    nan_pose = PoseStamped()
    nan_pose.header.frame_id = "world"
    nan_pose.pose.position.x = float("nan")
    nan_pose.pose.orientation.w = 1.0
    channel.pose.publish(nan_pose)
    wait_for(lambda: any("not finite" in e for e in channel.errors()), EVENT_WAIT_S,
             "a diagnostics error for the NaN pose")
    channel.send(BucketPose(4.0, 0.0, 1.0, 0.0, 0.0), np.zeros(3), 501.0, frame="map")
    wait_for(lambda: any("'map'" in e for e in channel.errors()), EVENT_WAIT_S, "a frame error")
    time.sleep(0.2)
    assert len(channel.wrenches) == n  # nothing published for malformed input
    # outside the grid: an error, the terrain untouched, but a current wrench (the per-cell
    # bucket soil, the default: the load's weight is not in it, its mass goes on
    # soil/bucket_payload before the wrench)
    # First the terrain at rest: the last patch received is a full grid. After a change the
    # node sends its patch, then (heightmap_rate_hz) the full grid, on one publisher, in order:
    # nothing of the earlier digging is still on its way (a sleep, on a loaded host, let that
    # full grid arrive after the count below)
    wait_for(lambda: _is_full_grid(channel.patches[-1], 160, 120), EVENT_WAIT_S,
             "the full grid after the last change")
    patches = len(channel.patches)
    # 10 m: past the 8 m grid, within the machine's reach of it (farther is implausible)
    channel.send(BucketPose(10.0, 0.0, 0.0, 0.0, 0.0), np.array([-0.5, 0.0, 0.0]), 502.0)
    wait_for(lambda: any("leaves the terrain grid" in e for e in channel.errors()), EVENT_WAIT_S,
             "a diagnostics error for the bucket outside the grid")
    wait_for(lambda: len(channel.wrenches) == n + 1, EVENT_WAIT_S, "the no-ground wrench")
    # its load comes after it, on its own topic (one per wrench)
    wait_for(lambda: len(channel.loads) == len(channel.wrenches), EVENT_WAIT_S, "its bucket_load")
    f = channel.wrenches[-1].wrench.force
    load = channel.loads[-1].data
    assert (f.x, f.y, f.z) == (0.0, 0.0, 0.0)
    payload = channel.payloads[-1]
    assert payload.header.stamp == channel.wrenches[-1].header.stamp
    assert load > 0.0 and payload.inertia.m == pytest.approx(1800.0 * load)
    time.sleep(0.2)
    assert len(channel.patches) == patches


# last: it digs at a pose of its own, which the tests before it must not find changed
def _send_pose_only(channel: Channel, pose: BucketPose, t: float) -> None:
    """The pose stamped ``t`` without its twist (as if the twist's sample were lost)."""
    send_bucket_state(channel.pose, _Lost(), pose, np.zeros(3), t)


class _Lost:
    """A twist publisher whose samples are lost (the transport's hole, made on purpose)."""

    def publish(self, _msg: object) -> None:
        pass


def _twist(channel: Channel, vel: np.ndarray, t: float) -> None:
    msg = TwistStamped()
    msg.header.frame_id = "world"
    sec = math.floor(t)
    msg.header.stamp.sec, msg.header.stamp.nanosec = sec, round((t - sec) * 1e9)
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = map(float, vel)
    channel.twist.publish(msg)


def test_a_pose_whose_twist_comes_after_it_is_answered_with_that_twist(
        channel: Channel, probe: RosTestNode) -> None:
    """sim_node sends a pose's twist first, on its own topic; a twist sample lost and resent
    arrives after its pose. soil_node holds the pose for the twist of its stamp (up to
    twist_wait_s): its wrench is the one the same pose and twist give in order, which is what a
    replay of the session computes. With no twist of its stamp at all, the pose is answered
    with the latest twist once twist_wait_s has passed (poses_without_twist)."""
    assert set_parameters(probe, "/soil_node", {"twist_wait_s": 60.0}) == [(True, "")]
    wait_for(lambda: int(channel.status("updates") or -1)
             + int(channel.status("answers_repeated") or 0) == len(channel.wrenches), EVENT_WAIT_S,
             "soil diagnostics up to date")
    waited0 = int(channel.status("poses_waited_for_twist") or 0)
    pitch = pitch_for_attack(BUCKET, math.radians(30.0))
    pose = pose_for_tip(BUCKET, np.array([6.0, 2.0, -0.2]), pitch, 0.0)   # untouched soil
    fast = np.array([-1.5, 0.0, 0.0])
    channel.send_and_wait(pose, np.zeros(3), 900.0)    # at rest there first
    n = len(channel.wrenches)
    _send_pose_only(channel, pose, 900.02)              # its twist is "lost" ...
    time.sleep(0.5)
    assert len(channel.wrenches) == n, "answered before its twist came"
    _twist(channel, fast, 900.02)                       # ... and resent: it comes after
    wait_for(lambda: channel.answered(900.02), EVENT_WAIT_S, "the answer once its twist came")
    wait_for(lambda: int(channel.status("poses_waited_for_twist") or 0) == waited0 + 1,
             EVENT_WAIT_S,
             lambda: f"poses_waited_for_twist {channel.status('poses_waited_for_twist')}")
    late = channel.wrenches[-1]
    # the same pose and twist in order, one update later (same instant of the same soil is
    # not repeatable: the soil moved), give the force the held pose got, to the motion's
    # share: both pushed back against the fast drag, where the twist at rest gave no drag
    channel.send_and_wait(pose, np.zeros(3), 900.04)
    rest = channel.wrenches[-1]
    assert abs(late.wrench.force.x - rest.wrench.force.x) > 1.0, (late.wrench, rest.wrench)

    without0 = int(channel.status("poses_without_twist") or 0)
    assert set_parameters(probe, "/soil_node", {"twist_wait_s": 0.2}) == [(True, "")]
    _send_pose_only(channel, pose, 900.06)              # no twist of its stamp, ever
    wait_for(lambda: channel.answered(900.06), EVENT_WAIT_S, "the answer after twist_wait_s")
    wait_for(lambda: int(channel.status("poses_without_twist") or 0) == without0 + 1, EVENT_WAIT_S,
             lambda: f"poses_without_twist {channel.status('poses_without_twist')}")
    # sent again and again without its twist (sim_node's lockstep re-sends every 0.25 s): it
    # waits from its first arrival, not from the last copy, so it is answered while the
    # copies still come (the wait is 1 s, the copies come for 6 s)
    assert set_parameters(probe, "/soil_node", {"twist_wait_s": 1.0}) == [(True, "")]
    end = time.monotonic() + 6.0
    answered_while_resent = False
    while time.monotonic() < end:
        _send_pose_only(channel, pose, 900.08)
        if channel.answered(900.08):
            answered_while_resent = True
            break
        time.sleep(0.2)
    assert answered_while_resent, "a pose sent again kept waiting for its twist"
    assert set_parameters(probe, "/soil_node", {"twist_wait_s": 0.5}) == [(True, "")]
    assert channel.status("mass_drift_units") == "0"
