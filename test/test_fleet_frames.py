"""frame_prefix: every URDF link of a machine but the shared ``world`` carries the prefix, the
joint tree is unchanged, and sim_node refuses a bad prefix at start-up (one message, exit 2)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from helpers import EVENT_WAIT_S, NodeProcess

from excavator_sim.urdf import check_frame_prefix, generate_urdf


def _tree(urdf: str) -> tuple[set[str], list[tuple[str, str, str]]]:
    robot = ET.fromstring(urdf.split("?>", 1)[-1])
    links = {link.get("name") for link in robot.iter("link")}
    joints = [(j.get("name"), j.find("parent").get("link"), j.find("child").get("link"))
              for j in robot.iter("joint")]
    return links, joints


def test_prefix_goes_before_every_link_but_world() -> None:
    plain_links, plain_joints = _tree(generate_urdf())
    links, joints = _tree(generate_urdf(frame_prefix="exc2/"))

    def pre(name: str) -> str:
        return name if name == "world" else "exc2/" + name
    assert "world" in links and "exc2/base_link" in links and "exc2/bucket_tip" in links
    assert links == {pre(n) for n in plain_links}
    # same joints (names are joint_states' names: unprefixed), same tree
    assert joints == [(j, pre(p), pre(c)) for j, p, c in plain_joints]


@pytest.mark.parametrize("bad", ["/exc1/", "exc1", "exc 1/", "1exc/", "exc-1/"])
def test_bad_prefix_is_refused_with_the_fix(bad: str) -> None:
    with pytest.raises(ValueError, match=r"frame_prefix .*end with '/'"):
        check_frame_prefix(bad)


def test_sim_node_refuses_a_bad_prefix_at_start_up(tmp_path) -> None:
    proc = NodeProcess("excavator_sim.sim_node", ["--ros-args", "-p", "frame_prefix:=/exc1"],
                       log_dir=tmp_path)
    code = proc.proc.wait(120)
    proc.stop()
    log = proc.log()
    assert code == 2, log
    assert "frame_prefix '/exc1'" in log and "Traceback" not in log


def test_sim_node_publishes_its_urdf_with_the_prefix(node_processes, ros_node, tmp_path) -> None:
    from helpers import wait_for
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import String

    node_processes.append(NodeProcess("excavator_sim.sim_node", [
        "--ros-args", "-r", "__ns:=/exc7", "-p", "frame_prefix:=exc7/",
        "-p", "marker_rate_hz:=0.0"],
        log_dir=tmp_path))
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    got = ros_node.collect(String, "/exc7/robot_description", latched)
    wait_for(lambda: got,
             EVENT_WAIT_S, lambda: f"/exc7/robot_description ({node_processes[0].log()})")
    links, _ = _tree(got[-1].data)
    assert links == {n if n == "world" else "exc7/" + n for n in _tree(generate_urdf())[0]}


def test_ik_node_takes_targets_in_its_prefixed_base_link(spawn, ros_node) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PointStamped
    from helpers import wait_for
    from sensor_msgs.msg import JointState

    ik = spawn("excavator_kinematics.ik_node", ["--ros-args", "-r", "__ns:=/exc3",
                                                "-p", "frame_prefix:=exc3/"])
    commands = ros_node.collect(JointState, "/exc3/joint_command")
    diagnostics = ros_node.collect(DiagnosticArray, "/diagnostics", 50)
    target = ros_node.node.create_publisher(PointStamped, "/exc3/target", 10)
    msg = PointStamped()
    msg.point.x, msg.point.z = 6.0, 0.5

    def send(frame: str) -> None:
        msg.header.frame_id = frame
        target.publish(msg)
    wait_for(lambda: (send("exc3/base_link"), commands)[1],
             EVENT_WAIT_S, lambda: f"a joint_command "
             f"for a target in exc3/base_link\n{ik.log()}", 0.2)
    assert commands[-1].header.frame_id == "exc3/base_link"
    good = list(commands[0].position)
    msg.point.x = 5.0                 # another target: an answer to it would differ

    def rejected() -> bool:
        send("base_link")             # another machine's (or no machine's) base_link
        return any("'base_link'" in s.message and "'exc3/base_link'" in s.message
                   for d in list(diagnostics) for s in d.status)
    wait_for(rejected, EVENT_WAIT_S, lambda: f"the target in 'base_link' rejected\n{ik.log()}", 0.2)
    assert all(list(c.position) == good for c in list(commands)), "a target in base_link moved it"


def test_ik_node_and_bridge_refuse_a_bad_prefix_at_start_up(tmp_path) -> None:
    for module in ("excavator_kinematics.ik_node", "plc_bridge.bridge.node"):
        proc = NodeProcess(module, ["--ros-args", "-p", "frame_prefix:=exc1"], log_dir=tmp_path)
        code = proc.proc.wait(120)
        proc.stop()
        log = proc.log()
        assert code == 2, (module, log)
        assert "frame_prefix 'exc1'" in log and "Traceback" not in log, log


@pytest.mark.slow
def test_bridge_odom_frames_carry_the_prefix(redis_server, spawn, ros_node) -> None:
    from helpers import REPO, free_port, wait_for
    from nav_msgs.msg import Odometry

    odom = ros_node.collect(Odometry, "/exc4/odom")
    # no PLC on that port: the bridge keeps trying and publishes odom (twist unknown) meanwhile
    bridge = spawn("plc_bridge.bridge.node", [
        "--ros-args", "-r", "__ns:=/exc4", "--params-file", str(REPO / "config" / "plc.yaml"),
        "-p", f"redis_url:={redis_server.url}", "-p", f"plc_port:={free_port()}",
        "-p", "plc_host:=127.0.0.1", "-p", "autostart:=true", "-p", "frame_prefix:=exc4/"])
    # the process's start-up bound of the suite (120 s): ci59, with every core oversubscribed,
    # saw the bridge print nothing in 60 s (and the test above take 30 s per refused start)
    wait_for(lambda: odom, 120.0, lambda: f"/exc4/odom\n{bridge.log()}", 0.1)
    assert (odom[-1].header.frame_id, odom[-1].child_frame_id) == ("exc4/odom",
                                                                   "exc4/base_link")
