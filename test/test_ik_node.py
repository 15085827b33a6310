"""ik_node in its own process over real DDS: targets in, joint commands and diagnostics out."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped, PoseStamped
from helpers import (
    EVENT_WAIT_S,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RosTestNode,
    publish_until,
    wait_for,
)
from sensor_msgs.msg import JointState

from excavator_kinematics.bucket_orientation import bucket_quaternion
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics

IK = InverseKinematics(default_geometry())
NAMES = ["swing", "boom", "arm", "bucket", "boom_cylinder", "arm_cylinder", "bucket_cylinder"]


@pytest.fixture(scope="module")
def ik_process(tmp_path_factory: pytest.TempPathFactory):
    proc = NodeProcess("excavator_kinematics.ik_node",
                       ["--ros-args", "-p", "bucket_pitch_rad:=0.3"],
                       log_dir=tmp_path_factory.mktemp("ik_node"))
    yield proc
    code = proc.stop()
    assert code == 0, proc.log()


@pytest.fixture(scope="module")
def probe():
    node = RosTestNode("ik_probe")
    yield node
    node.close()


def _point(x: float, y: float, z: float, frame: str = "base_link") -> PointStamped:
    msg = PointStamped()
    msg.header.frame_id = frame
    msg.point.x, msg.point.y, msg.point.z = x, y, z
    return msg


class Channel:
    """Publishers to and collectors from the node under test."""

    def __init__(self, probe: RosTestNode):
        self.commands: list[JointState] = probe.collect(JointState, "joint_command")
        self.diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics")
        self.target = probe.node.create_publisher(PointStamped, "target", 10)
        self.target_pose = probe.node.create_publisher(PoseStamped, "target_pose", 10)

    def errors(self) -> list[str]:
        return [s.message for d in self.diagnostics for s in d.status
                if s.level == b"\x02" and s.name.startswith("ik_node")]


@pytest.fixture(scope="module")
def channel(ik_process: NodeProcess, probe: RosTestNode) -> Channel:
    ch = Channel(probe)
    # The node is up when its periodic diagnostics arrive and it has matched our publisher.
    wait_for(lambda: ch.diagnostics and ch.target.get_subscription_count() > 0, EVENT_WAIT_S,
             lambda: f"ik_node to come up; its log:\n{ik_process.log()}")
    return ch


def test_target_yields_the_expected_joint_command(channel: Channel) -> None:
    target = (5.0, 2.0, 0.5)
    expected = IK.solve(target, 0.3)
    publish_until(channel.target, _point(*target), lambda: channel.commands and np.allclose(
        channel.commands[-1].position, [*expected.q, *expected.extensions], atol=1e-12),
        10.0, "a joint_command with the IK's solution")
    msg = channel.commands[-1]
    assert list(msg.name) == NAMES
    assert np.allclose(msg.position, [*expected.q, *expected.extensions], atol=1e-12)
    assert msg.header.frame_id == "base_link"
    assert math.atan2(2.0, 5.0) == pytest.approx(msg.position[0])


def test_target_pose_takes_the_pitch_from_its_orientation(channel: Channel) -> None:
    msg = PoseStamped()
    msg.header.frame_id = "base_link"
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = 0.0, 6.0, 0.0
    x, y, z, w = bucket_quaternion(math.pi / 2, 0.6)
    msg.pose.orientation.x, msg.pose.orientation.y = x, y
    msg.pose.orientation.z, msg.pose.orientation.w = z, w
    expected = IK.solve((0.0, 6.0, 0.0), 0.6)
    publish_until(channel.target_pose, msg, lambda: channel.commands and np.allclose(
        channel.commands[-1].position[:4], expected.q, atol=1e-9), 10.0,
        "a joint_command from target_pose at its pitch")


@pytest.mark.parametrize(("point", "reason"), [
    (_point(12.0, 0.0, 0.0), "out of reach"),
    (_point(math.nan, 0.0, 0.0), "must be finite"),
    (_point(5.0, 0.0, 0.5, frame="world"), "only takes targets in 'base_link'"),
])
def test_rejected_target_gives_a_diagnostic_and_no_command(
    channel: Channel, point: PointStamped, reason: str
) -> None:
    n_cmd, n_err = len(channel.commands), len(channel.errors())
    channel.target.publish(point)
    wait_for(lambda: len(channel.errors()) > n_err, EVENT_WAIT_S, f"a diagnostic saying '{reason}'")
    assert reason in channel.errors()[-1]
    time.sleep(0.3)  # a command would have arrived by now
    assert len(channel.commands) == n_cmd


def test_out_of_plane_orientation_is_rejected(channel: Channel) -> None:
    n_cmd, n_err = len(channel.commands), len(channel.errors())
    msg = PoseStamped()
    msg.header.frame_id = "base_link"
    msg.pose.position.x, msg.pose.position.z = 6.0, 0.0
    x, y, z, w = bucket_quaternion(0.5, 0.6)  # yawed 0.5 rad away from the target's azimuth
    msg.pose.orientation.x, msg.pose.orientation.y = x, y
    msg.pose.orientation.z, msg.pose.orientation.w = z, w
    channel.target_pose.publish(msg)
    wait_for(lambda: len(channel.errors()) > n_err, EVENT_WAIT_S, "an orientation diagnostic")
    assert "out of the boom plane" in channel.errors()[-1]
    time.sleep(0.3)
    assert len(channel.commands) == n_cmd


def test_a_target_stamped_too_long_ago_is_dropped_and_counted(channel: Channel,
                                                              probe: RosTestNode) -> None:
    """A target delayed on its way (stamped 2 s before it arrives; max_command_age_s 0.5 s)
    gives no joint_command and is counted on /diagnostics; the next, fresh one acts."""
    n_cmd, mark = len(channel.commands), len(channel.diagnostics)
    stale = _point(5.5, 0.0, 0.5)
    old = probe.node.get_clock().now().nanoseconds - 2_000_000_000
    stale.header.stamp.sec, stale.header.stamp.nanosec = divmod(old, 1_000_000_000)
    channel.target.publish(stale)
    fresh = _point(6.0, 0.0, 0.5)
    fresh.header.stamp = probe.node.get_clock().now().to_msg()
    channel.target.publish(fresh)
    wait_for(lambda: len(channel.commands) > n_cmd,
             EVENT_WAIT_S, "the fresh target's joint_command")

    def values() -> list[tuple[str, dict[str, str]]]:
        return [(s.message, {kv.key: kv.value for kv in s.values})
                for d in list(channel.diagnostics)[mark:] for s in d.status
                if s.name.startswith("ik_node") and s.values]
    wait_for(lambda: any(v["commands_expired"] == "1" for _, v in values()), EVENT_WAIT_S,
             "the stale target counted")
    # one publisher, delivered in order: a command for the stale target would come first
    assert len(channel.commands) == n_cmd + 1
    assert np.allclose(channel.commands[-1].position[:4], IK.solve((6.0, 0.0, 0.5), 0.3).q)
    message, v = next((m, v) for m, v in values() if v["commands_expired"] == "1")
    assert "1 target(s) dropped as too old" in message and "max_command_age_s 0.5 s" in message
    assert float(v["last_dropped_age_s"]) >= 2.0 and v["last_dropped_topic"] == "target"


def test_targets_wait_no_longer_than_one_round_of_a_busy_executor(probe: RosTestNode) -> None:
    """ik_node composed beside a node whose work takes 0.8 s of each round of their executor
    (sim_node's catch-up bursts on a starved host, in the demo's node container) while targets
    come at 4 Hz: it takes every target waiting when it is served, so none ages in its own
    queue past max_command_age_s (2 s here: a loaded host's own delays stay far inside it) and
    each is answered. rclpy's executor takes one message per subscription per round: the queue
    grew by two a round, filled its depth of 10 and dropped every target as 2.5 s old (the
    Ackermann quick demo: 4 s of dig without a joint_command, nothing dumped)."""
    from excavator_common.node_thread import NodeThread
    from excavator_kinematics.ik_node import IKNode

    host = NodeThread("busy_neighbour")
    host.node.create_timer(0.05, lambda: time.sleep(0.8))   # always due: 0.8 s a round
    ik = IKNode(context=host.context, use_global_arguments=False,
                cli_args=["--ros-args", "-r", "__ns:=/busy", "-p", "max_command_age_s:=2.0"])
    commands: list[JointState] = probe.collect(JointState, "/busy/joint_command")
    target = probe.node.create_publisher(PointStamped, "/busy/target", 10)
    host.start()
    host.executor.add_node(ik)
    try:
        wait_for(lambda: target.get_subscription_count() > 0 and
                 probe.node.count_publishers("/busy/joint_command") > 0, STARTUP_TIMEOUT_S,
                 "the composed ik_node's endpoints")
        xs = [5.0 + 0.02 * k for k in range(30)]
        for x in xs:   # 7.5 s at 4 Hz, each stamped when sent
            msg = _point(x, 0.0, 0.5)
            msg.header.stamp = probe.node.get_clock().now().to_msg()
            target.publish(msg)
            time.sleep(0.25)
        wait_for(lambda: len(commands) >= len(xs) or ik.command_age.rule.expired, EVENT_WAIT_S,
                 lambda: f"an answer to each of {len(xs)} targets: {len(commands)} answered")
        counters = ik.command_age.counters()
        assert ik.command_age.rule.expired == 0, counters
        assert len(commands) == len(xs), counters
        assert np.allclose(commands[-1].position[:4], IK.solve((xs[-1], 0.0, 0.5), 0.5).q)
    finally:
        host.executor.remove_node(ik)
        ik.destroy_node()
        assert host.close()


def test_double_sigint_shuts_down_cleanly(tmp_path) -> None:
    """`ros2 launch` sends SIGINT twice on Ctrl-C: the node must still exit with code 0."""
    proc = NodeProcess("excavator_kinematics.ik_node", log_dir=tmp_path)
    wait_for(lambda: "ready:" in proc.log(), STARTUP_TIMEOUT_S, "ik_node start-up")
    proc.interrupt(count=2, gap=0.01)
    proc.proc.wait(EVENT_WAIT_S)
    assert proc.proc.returncode == 0, proc.log()
    assert "Traceback" not in proc.log()


def test_invalid_parameter_fails_at_start_up_naming_it(tmp_path) -> None:
    proc = NodeProcess("excavator_kinematics.ik_node",
                       ["--ros-args", "-p", "orientation_tolerance_rad:=3.0"], log_dir=tmp_path)
    proc.proc.wait(STARTUP_TIMEOUT_S)
    assert proc.proc.returncode == 2
    assert "orientation_tolerance" in proc.log()


def test_misspelt_parameter_is_reported_with_the_closest_name(tmp_path) -> None:
    proc = NodeProcess("excavator_kinematics.ik_node",
                       ["--ros-args", "-p", "bucket_pich:=0.3"], log_dir=tmp_path)
    try:
        wait_for(lambda: "ready:" in proc.log(), STARTUP_TIMEOUT_S, proc.log)
        assert "parameter 'bucket_pich' is not a parameter of ik_node" in proc.log()
        assert "did you mean 'bucket_pitch_rad'" in proc.log()
    finally:
        proc.stop()
