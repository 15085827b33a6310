"""Fuzz soil_node through its real interfaces over DDS: hypothesis-generated ``bucket_pose`` and
``bucket_twist`` messages that are invalid (NaN, inf, a position beyond the terrain plus the
machine's reach or under it deeper than the machine digs, a twist faster than the machine
moves, mixed with tiny and negative-zero fields), each followed by one valid twist + pose.

The node stays up, never publishes a non-finite value, and answers every valid pose with the
wrench the pure cores give for the valid inputs alone: as if the bad ones never came (issue
20: a 1e307 pose killed it, a NaN twist silenced it). The terrain it publishes at the end is
the one the valid inputs alone make: rejected input moves no soil."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from helpers import EVENT_WAIT_S, NodeProcess, RosTestNode, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from std_msgs.msg import Float64, Float64MultiArray

from excavator_kinematics.geometry import default_geometry
from excavator_sim.plausibility import shipped_machine_envelope
from excavator_sim.soil.bucket_body import UpdateInterval
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.forces import DiMaioForceModel
from excavator_sim.soil.terrain import Terrain
from excavator_sim.terrain_patch import flat_to_patch

BUCKET = BucketPrism.from_geometry(default_geometry())
CONFIG = load_soil_config()  # what the node runs on without overrides
LIMITS = shipped_machine_envelope().soil_limits()
TINY = st.sampled_from([5e-324, -5e-324, -0.0, 0.0, 1e-300, -1e-300])
# Values that make a field invalid on their own: not finite, or beyond every plausible limit.
INVALID = st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, 1e307, -1e307,
                           1.7976931348623157e308, 1e30, -1e9, 1e6])
VEL = np.array([-0.4, 0.0, -0.05])  # the valid twist, always the same [m/s]


@pytest.fixture(scope="module")
def soil_process(tmp_path_factory: pytest.TempPathFactory):
    proc = NodeProcess("excavator_sim.soil.soil_node", ["--ros-args", "-p",
                                                        "heightmap_rate_hz:=0.1"],
                       log_dir=tmp_path_factory.mktemp("soil_fuzz"))
    yield proc
    code = proc.stop()
    assert code == 0, proc.log()


class Replay:
    """The pure cores fed the valid inputs only: what the node must answer."""

    def __init__(self) -> None:
        self.terrain = Terrain(CONFIG.terrain, BUCKET)
        self.forces = DiMaioForceModel(CONFIG.dimaio, BUCKET)
        # the time the soil in the bucket slides between updates (per-cell bucket soil), from
        # the poses' stamps as soil_node takes it; the twists, 1 s apart, are past the
        # acceleration estimate's gap: no acceleration, as in the node
        self.interval = UpdateInterval()
        self.k = 0

    def next_pose(self) -> BucketPose:
        """A cut through the soil along -x, 2 cm per valid pose."""
        return BucketPose(6.0 - 0.02 * self.k, 0.0, -0.25, -0.4, 0.0)

    def step(self, msg: PoseStamped) -> np.ndarray:
        p, o = msg.pose.position, msg.pose.orientation
        pose = BucketPose.from_quaternion((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        self.terrain.update(pose, elapsed_s=self.interval.elapsed(stamp))
        result = self.forces.step(pose, VEL, np.zeros(3), self.terrain.surface_m,
                                  self.terrain.load_volume_m3,
                                  weight_on_body=self.terrain.load_on_body)
        self.k += 1
        return np.concatenate([result.force, result.torque])


class Channel:
    def __init__(self, probe: RosTestNode):
        self.wrenches: list[WrenchStamped] = probe.collect(WrenchStamped, "soil/wrench", 1000)
        self.loads: list[Float64] = probe.collect(Float64, "soil/bucket_load", 1000)
        self.patches: list[Float64MultiArray] = probe.collect(Float64MultiArray,
                                                             "soil/terrain_patch", 1000)
        self.pose = probe.node.create_publisher(PoseStamped, "bucket_pose", 100)
        self.twist = probe.node.create_publisher(TwistStamped, "bucket_twist", 100)
        self.replay = Replay()
        self.t = 1  # stamp of the next valid pose [s]; 1 s apart: never rate-limited


@pytest.fixture(scope="module")
def channel(soil_process: NodeProcess):
    probe = RosTestNode("soil_fuzz_probe")
    ch = Channel(probe)
    wait_for(lambda: ch.pose.get_subscription_count() > 0
             and ch.twist.get_subscription_count() > 0, 120.0,
             lambda: f"soil_node to come up; its log:\n{soil_process.log()}")
    # The valid twist is always VEL: sent once ahead, so that the first valid pose cannot be
    # served before it (poses and twists are two topics, not ordered against each other).
    ch.twist.publish(_twist(VEL.tolist(), [0.0, 0.0, 0.0], 0))
    # 120 s: a fresh clone's soil_node compiles its numba kernels (the per-cell bucket soil's
    # too) with no cache yet, beside the other worker's whole-stack tests (30 s passed by, ci36)
    wait_for(lambda: "ready" in soil_process.log(), 120.0,
             lambda: f"soil_node ready (alive: {soil_process.alive()}); its log:\n"
                     f"{soil_process.log()[-3000:]}")
    time.sleep(1.0)
    yield ch
    probe.close()


def _twist(lin: list[float], ang: list[float], sec: int) -> TwistStamped:
    msg = TwistStamped()
    msg.header.frame_id = "world"
    msg.header.stamp.sec = sec
    t = msg.twist
    t.linear.x, t.linear.y, t.linear.z = lin
    t.angular.x, t.angular.y, t.angular.z = ang
    return msg


def _pose(xyz: list[float], quat: list[float], sec: int) -> PoseStamped:
    msg = PoseStamped()
    msg.header.frame_id = "world"
    msg.header.stamp.sec = sec
    p, o = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = xyz
    o.x, o.y, o.z, o.w = quat
    return msg


@st.composite
def bad_message(draw: st.DrawFn) -> tuple[str, list[float], list[float]]:
    """(kind, a, b): a pose (position, quaternion) or a twist (linear, angular) with at least one
    invalid field and the others tiny, negative zero or ordinary."""
    kind = draw(st.sampled_from(["pose", "twist", "deep pose", "far pose"]))
    other = st.one_of(TINY, st.floats(-1.0, 1.0))
    a = draw(st.lists(other, min_size=3, max_size=3))
    b = draw(st.lists(other, min_size=3 if kind == "twist" else 4,
                      max_size=3 if kind == "twist" else 4))
    if kind == "deep pose":  # over the grid, far below the surface: finite but implausible
        a = [5.0, 0.0, -LIMITS.max_depth_m - 1.0 - draw(st.floats(0.0, 1e6))]
        b = [0.0, 0.0, 0.0, 1.0]
    elif kind == "far pose":  # finite, beyond the terrain plus the machine's reach
        a[draw(st.integers(0, 1))] = draw(st.sampled_from([1, -1])) * draw(
            st.floats(13.0 + LIMITS.margin_xy_m, 1.7e308))
    elif kind == "twist":  # any field: NaN/inf, or faster than the machine moves
        fields = a + b
        fields[draw(st.integers(0, 5))] = draw(INVALID)
        a, b = fields[:3], fields[3:]
    else:  # a position field (a huge quaternion is only scaled); maybe a NaN orientation too
        a[draw(st.integers(0, 2))] = draw(INVALID)
        if draw(st.booleans()):
            b[draw(st.integers(0, 3))] = draw(st.sampled_from([math.nan, math.inf]))
    return kind, a, b


def _finite(msg: WrenchStamped) -> bool:
    f, t = msg.wrench.force, msg.wrench.torque
    return all(math.isfinite(v) for v in (f.x, f.y, f.z, t.x, t.y, t.z))


@given(bad=st.lists(bad_message(), min_size=1, max_size=3))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bad_inputs_then_a_valid_pose_is_answered_as_if_they_never_came(
        soil_process: NodeProcess, channel: Channel,
        bad: list[tuple[str, list[float], list[float]]]) -> None:
    ch = channel
    for kind, a, b in bad:
        if kind == "twist":
            ch.twist.publish(_twist(a, b, ch.t))
        else:
            ch.pose.publish(_pose(a, b, ch.t))
    pose = ch.replay.next_pose()
    msg = _pose([pose.x, pose.y, pose.z], list(pose.quaternion()), ch.t)
    ch.twist.publish(_twist(VEL.tolist(), [0.0, 0.0, 0.0], ch.t))
    ch.pose.publish(msg)
    want = ch.replay.step(msg)
    sec = ch.t
    ch.t += 1

    def answer() -> WrenchStamped | None:
        return next((w for w in ch.wrenches if w.header.stamp.sec == sec), None)

    wait_for(answer, EVENT_WAIT_S, lambda: f"a wrench for the valid pose at t={sec} s after {bad}; "
             f"soil_node alive: {soil_process.alive()}; log tail:\n{soil_process.log()[-3000:]}")
    got = answer()
    f, t = got.wrench.force, got.wrench.torque
    assert np.allclose([f.x, f.y, f.z, t.x, t.y, t.z], want, rtol=1e-9, atol=1e-9), (
        f"after {bad}: wrench {[f.x, f.y, f.z, t.x, t.y, t.z]} != the valid inputs' {want}")
    assert soil_process.alive()
    assert all(_finite(w) for w in ch.wrenches)


def test_rejected_input_moved_no_soil_and_nothing_published_was_non_finite(
        soil_process: NodeProcess, channel: Channel) -> None:
    ch = channel
    g = CONFIG.terrain
    assert all(math.isfinite(v) for msg in list(ch.patches) for v in msg.data)
    assert ch.replay.k > 0
    want = ch.replay.terrain.heights_m()
    assert not np.allclose(want, g.initial_height_m), "the valid cut moved no soil"

    def rebuilt() -> np.ndarray:
        grid = np.full((g.nx, g.ny), g.initial_height_m)
        for msg in list(ch.patches):
            i0, j0, h = flat_to_patch(msg.layout.dim[0].size, msg.layout.dim[1].size, msg.data)
            grid[i0:i0 + h.shape[0], j0:j0 + h.shape[1]] = h
        return grid

    wait_for(lambda: np.allclose(rebuilt(), want, atol=1e-12), EVENT_WAIT_S,
             "the node's terrain (its patches) to be the one the valid inputs alone make")
    assert all(math.isfinite(m.data) for m in ch.loads)
    # One of each kind on its own, each left to be read: the node takes the newest twist and
    # pose only, so a bad one the fuzz above sent right before a valid one may have been
    # superseded unread (never acted on, never logged) on a slow machine.
    g_x = g.x0 + g.nx * g.cell_xy_m
    still = [0.0, 0.0, 0.0]
    upright = [0.0, 0.0, 0.0, 1.0]
    for words, publish in (
            ("exceeds the plausible",
             lambda: ch.twist.publish(_twist([1e6, 0.0, 0.0], still, ch.t))),
            ("not finite", lambda: ch.twist.publish(_twist([math.nan, 0.0, 0.0], still, ch.t))),
            ("beyond the terrain grid plus the machine's reach",
             lambda: ch.pose.publish(_pose([g_x + 1e4, 0.0, 0.0], upright, ch.t))),
            ("deeper than the machine can put it",
             lambda: ch.pose.publish(_pose([5.0, 0.0, -LIMITS.max_depth_m - 10.0], upright,
                                           ch.t)))):
        before = soil_process.log().count(words)
        publish()
        wait_for(lambda w=words, n=before: soil_process.log().count(w) > n, EVENT_WAIT_S,
                 lambda w=words: f"a rejection naming '{w}' in the log:\n"
                 f"{soil_process.log()[-2000:]}")
    log = soil_process.log()
    assert soil_process.alive() and "Traceback" not in log
