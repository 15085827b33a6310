"""Fuzz ik_node through its real interfaces over DDS: hypothesis-generated ``target`` and
``target_pose`` messages with NaN, inf, huge, tiny and negative-zero fields, each followed by one
valid target. The process stays up, answers the valid target with the core's own solution
(as if the bad message never came) and never publishes a non-finite value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from geometry_msgs.msg import PointStamped, PoseStamped
from helpers import EVENT_WAIT_S, NodeProcess, RosTestNode, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import JointState

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics

WEIRD = st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, 1e308, -1.7976931348623157e308,
                         1e30, 5e-324, -5e-324, -0.0, 0.0, 1e-300])
FIELD = st.one_of(WEIRD, st.floats(allow_nan=True, allow_infinity=True))
FRAMES = st.sampled_from(["", "base_link", "world", "map", "base_link/", "\u00e9x", " " * 3])
IK = InverseKinematics(default_geometry())
# Valid targets (reachable, pitch 0.5 rad = the node's default bucket_pitch), cycled.
VALID = [np.array(p) for p in ((6.05, 0.0, 1.19), (5.2, 0.4, 0.3), (4.9, -0.6, 0.8))]


@pytest.fixture(scope="module")
def ik_process(tmp_path_factory: pytest.TempPathFactory):
    proc = NodeProcess("excavator_kinematics.ik_node", ["--ros-args"],
                       log_dir=tmp_path_factory.mktemp("ik_fuzz"))
    yield proc
    code = proc.stop()
    assert code == 0, proc.log()


class Channel:
    def __init__(self, probe: RosTestNode):
        self.commands: list[JointState] = probe.collect(JointState, "joint_command", 1000)
        self.target = probe.node.create_publisher(PointStamped, "target", 100)
        self.pose = probe.node.create_publisher(PoseStamped, "target_pose", 100)
        self.sent = 0


@pytest.fixture(scope="module")
def channel(ik_process: NodeProcess):
    probe = RosTestNode("ik_fuzz_probe")
    ch = Channel(probe)
    wait_for(lambda: ch.target.get_subscription_count() > 0
             and ch.pose.get_subscription_count() > 0, EVENT_WAIT_S,
             lambda: f"ik_node to come up; its log:\n{ik_process.log()}")
    yield ch
    probe.close()


def _point(frame: str, x: float, y: float, z: float) -> PointStamped:
    msg = PointStamped()
    msg.header.frame_id = frame
    msg.point.x, msg.point.y, msg.point.z = x, y, z
    return msg


def _pose(frame: str, xyz: list[float], quat: list[float]) -> PoseStamped:
    msg = PoseStamped()
    msg.header.frame_id = frame
    p, o = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = xyz
    o.x, o.y, o.z, o.w = quat
    return msg


def _finite(msg: JointState) -> bool:
    return all(math.isfinite(v) for v in (*msg.position, *msg.velocity, *msg.effort))


@given(kind=st.sampled_from(["target", "target_pose"]), frame=FRAMES,
       xyz=st.lists(FIELD, min_size=3, max_size=3), quat=st.lists(FIELD, min_size=4, max_size=4))
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bad_targets_then_a_valid_one_is_answered_correctly(
        ik_process: NodeProcess, channel: Channel, kind: str, frame: str, xyz: list[float],
        quat: list[float]) -> None:
    if kind == "target":
        channel.target.publish(_point(frame, *xyz))
    else:
        channel.pose.publish(_pose(frame, xyz, quat))
    valid = VALID[channel.sent % len(VALID)]
    channel.sent += 1
    expected = IK.solve(valid, 0.5)
    want = [*expected.q, *expected.extensions]
    start = len(channel.commands)
    channel.target.publish(_point("base_link", *valid))

    def answered() -> bool:
        return any(np.allclose(m.position, want, rtol=0.0, atol=1e-12)
                   for m in channel.commands[start:])

    wait_for(answered,
             EVENT_WAIT_S, lambda: f"the answer to {valid.tolist()} after {kind} {frame!r} "
             f"{xyz} {quat}; ik_node alive: {ik_process.alive()}; log:\n{ik_process.log()}")
    assert ik_process.alive()
    assert all(_finite(m) for m in channel.commands), "a non-finite joint_command was published"


def test_the_node_is_alive_and_reported_the_rejections(ik_process: NodeProcess,
                                                        channel: Channel) -> None:
    assert ik_process.alive(), ik_process.log()
    assert "target rejected" in ik_process.log()
    assert "Traceback" not in ik_process.log()
