"""excavator_hil.node_container: sim_node and ik_node in one process over real DDS, each with
its own ROS arguments, as the demo runs them; its command line refused where it is wrong."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import psutil
import pytest
from geometry_msgs.msg import PointStamped
from helpers import (
    EVENT_WAIT_S,
    REPO,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RosTestNode,
    publish_until,
    wait_for,
)
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from excavator_hil.node_container import (
    ComposedNode,
    ContainerArgumentError,
    parse_container_args,
    process_log_levels,
)
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics

NS = "/composed"


def test_the_command_line_splits_into_nodes_with_their_own_arguments() -> None:
    nodes = parse_container_args([
        "sim_node", "--ros-args", "-p", "use_sim_time:=true", "--log-level", "warn", "--",
        "ik_node", "--ros-args", "-r", "__ns:=/exc1", "--log-level", "warn",
        "--", "ik_node", "--", "sim_node"])
    assert nodes == [
        ComposedNode("sim_node", ["--ros-args", "-p", "use_sim_time:=true", "--log-level",
                                  "warn"]),
        ComposedNode("ik_node", ["--ros-args", "-r", "__ns:=/exc1", "--log-level", "warn"]),
        ComposedNode("ik_node", []), ComposedNode("sim_node", [])]
    assert process_log_levels(nodes) == ["--log-level", "warn"]


@pytest.mark.parametrize(("args", "message"), [
    ([], "no node given"),
    (["soil_nod"], "'soil_nod' (first) is not a node of the container: one of ik_node, "
                   "sim_node"),
    (["ik_node", "--ros-args", "-p", "a:=1", "--", "-p"],
     "'-p' (after ik_node's arguments) is not a node"),
    (["ik_node", "-p", "a:=1"], "'-p' (after ik_node's arguments) is not a node"),
])
def test_a_wrong_command_line_is_refused_naming_the_fix(args: list[str], message: str) -> None:
    with pytest.raises(ContainerArgumentError) as exc:
        parse_container_args(args)
    assert message in str(exc.value)
    assert "'--ros-args ... --'" in str(exc.value) or "name one or more" in str(exc.value)


def test_the_process_refuses_an_unknown_node_before_ros_starts() -> None:
    run = subprocess.run([sys.executable, "-m", "excavator_hil.node_container", "sim_node",
                          "--", "teleop"], check=False, cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stderr
    assert "[FATAL] 'teleop'" in run.stderr and "usage:" in run.stderr


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory):
    proc = NodeProcess("excavator_hil.node_container", [
        "sim_node", "--ros-args", "-r", f"__ns:={NS}", "-p", "real_time_factor:=2.0",
        "-p", "use_sim_time:=true", "--log-level", "warn", "--",
        "ik_node", "--ros-args", "-r", f"__ns:={NS}", "-p", "bucket_pitch_rad:=0.3",
        "--log-level", "warn"], log_dir=tmp_path_factory.mktemp("node_container"))
    yield proc
    code = proc.stop(timeout=30.0)
    assert code == 0, proc.log()


def test_both_nodes_run_in_one_process_each_with_its_own_arguments(
        container: NodeProcess) -> None:
    probe = RosTestNode("container_probe")
    try:
        clock = probe.collect(Clock, "/clock")
        states = probe.collect(JointState, f"{NS}/joint_states")
        commands = probe.collect(JointState, f"{NS}/joint_command")
        target = probe.node.create_publisher(PointStamped, f"{NS}/target", 10)
        wait_for(lambda: clock and states and target.get_subscription_count() > 0,
                 STARTUP_TIMEOUT_S,
                 lambda: f"the composed sim_node and ik_node; the log:\n{container.log()}")
        # both on the graph (a participant announces its nodes apart from its endpoints)
        wanted = {("sim_node", NS), ("ik_node", NS)}
        wait_for(lambda: wanted <= set(probe.node.get_node_names_and_namespaces()), EVENT_WAIT_S,
                 lambda: f"{wanted} on the graph: {probe.node.get_node_names_and_namespaces()}")
        # one process: the container's, and no child of it
        assert psutil.Process(container.proc.pid).children() == []
        # each node's parameters are its own: sim_node's real_time_factor, ik_node's pitch
        assert probe.parameter(f"{NS}/sim_node", "real_time_factor") == 2.0
        assert probe.parameter(f"{NS}/ik_node", "bucket_pitch_rad") == 0.3
        # ... and one's arguments do not reach the other: use_sim_time was given to sim_node
        assert probe.parameter(f"{NS}/sim_node", "use_sim_time") is True
        assert probe.parameter(f"{NS}/ik_node", "use_sim_time") is False
        # the IK answers in the container as it does alone
        expected = InverseKinematics(default_geometry()).solve((5.0, 1.0, 0.5), 0.3)
        boom = list(states[-1].name).index("boom")
        start = states[-1].position[boom]
        assert abs(start - expected.q[1]) > 0.05  # the target is elsewhere
        msg = PointStamped()
        msg.header.frame_id = "base_link"
        msg.point.x, msg.point.y, msg.point.z = 5.0, 1.0, 0.5
        publish_until(target, msg, lambda: commands and np.allclose(
            commands[-1].position[:4], expected.q, atol=1e-9), 30.0,
            "ik_node's joint_command for the target")
        # ... and sim_node moves the machine to it
        wait_for(lambda: abs(states[-1].position[boom] - expected.q[1]) < 0.01, EVENT_WAIT_S,
                 lambda: f"sim_node to move the boom from {start:.3f} to {expected.q[1]:.3f} "
                 f"rad (at {states[-1].position[boom]:.3f}); log:\n{container.log()}")
    finally:
        probe.close()
