"""The choice of a fleet's machine in the shells, over real DDS and real processes, without a
fleet (test_fleet_operated.py runs the fleet itself):

- the dashboard's ROS link (``RosLink``, in-process, its own DDS participant) lists a machine
  that a probe publishes ``joint_states`` for, serves it only when chosen, refuses a machine
  not on the graph, refuses a Send named for another machine than the one served (another tab
  chose), waits for the machine's ``robot_description`` before sending, then sends the target
  in the frame that description's base link names;
- teleop_node started the way ROS users put a node on a machine (``--ros-args -r __ns:=/exc2``,
  its joystick remapped to a topic of the operator's, ``-r joy:=/operator/joy``) drives machine
  2 of two sim_nodes (``/exc1``, ``/exc2``) while machine 1 stays still: its topics are relative,
  so the namespace and the remapping place them;
- bad machine names stop teleop_node and the dashboard at start-up with one message naming the
  value and the fix (exit 2).
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from helpers import REPO, SMALL_SIM_ARGS, RosTestNode, wait_for

from excavator_hil.dashboard.core import TargetChecker
from excavator_kinematics.geometry import CYLINDER_NAMES, default_geometry
from excavator_sim.urdf import generate_urdf

TARGET = (6.0, 0.0, 0.5, 0.5)   # x, y, z [m], pitch [rad]: reachable
ACTIVE = ("swing", "boom", "arm", "bucket")
BASE = ("base_x", "base_y", "base_yaw")
STILL_RAD = 0.01     # [rad] a joint holding position moves less (hydraulic hold, numerics)
STILL_M = 0.01       # [m]
BOOM_AXIS = 4        # config/teleop.yaml: axes.right_y, the ISO pattern's boom
LIMIT_S = 90.0       # start-up of three nodes on a loaded 2-core host


def test_the_dashboards_ros_link_serves_only_the_machine_chosen() -> None:
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from excavator_hil.dashboard.adapter import RosLink

    probe = RosTestNode("machine_choice_probe")
    link = RosLink(TargetChecker(default_geometry()), None,
                   ["-r", "__node:=dashboard_choice_probe", "-r", "__ns:=/choice_test"])
    try:
        node = probe.node
        states = node.create_publisher(JointState, "/choice_m9/joint_states", 10)
        own_targets = probe.collect(PoseStamped, "/choice_test/target_pose", 100)
        m9_targets = probe.collect(PoseStamped, "/choice_m9/target_pose", 100)
        assert link.machine == "/choice_test"      # its own namespace at start

        def publish_states() -> bool:
            msg = JointState()
            msg.name = ["swing", "boom", "arm", "bucket", *CYLINDER_NAMES]
            msg.position = [0.0, 0.75, -1.4, 1.5, 1.0, 1.0, 1.0]
            states.publish(msg)
            return "/choice_m9" in link.choice.listed
        wait_for(publish_states, 30.0, lambda: f"/choice_m9 listed ({link.choice.listed})", 0.1)
        assert link.machine == "/choice_test", "a machine on the graph is not chosen for the user"
        assert link.joints is None   # nothing of /choice_m9 is shown before it is chosen

        with pytest.raises(ValueError, match="not on the graph"):
            link.select("choice_m8")
        assert link.select("choice_m9") == "/choice_m9"
        wait_for(lambda: publish_states() and link.joints is not None, 30.0,
                 "/choice_m9's joint_states in the readout", 0.1)

        # a Send from a tab that still showed the own namespace: refused, nothing published
        with pytest.raises(ValueError, match="serves /choice_m9 now, not /choice_test"):
            link.send_target(*TARGET, machine="/choice_test")
        # the machine's frame prefix is not known yet: refused, nothing published
        with pytest.raises(ValueError, match="waiting for /choice_m9/robot_description"):
            link.send_target(*TARGET, machine="/choice_m9")
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_publisher(String, "/choice_m9/robot_description", latched).publish(
            String(data=generate_urdf(frame_prefix="choice_m9/")))
        wait_for(lambda: link.frame_prefix("/choice_m9") == "choice_m9/", 30.0,
                 "the machine's prefix from its robot_description", 0.05)
        assert link.send_target(*TARGET, machine="/choice_m9") == "/choice_m9"
        wait_for(lambda: m9_targets, 30.0, "/choice_m9/target_pose", 0.05)
        assert m9_targets[-1].header.frame_id == "choice_m9/base_link"
        assert m9_targets[-1].pose.position.x == pytest.approx(TARGET[0])
        assert not own_targets, "nothing to the machine not chosen"
    finally:
        link.close()
        probe.close()


def test_teleop_node_in_a_machines_namespace_drives_that_machine_only(spawn, ros_node) -> None:
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState, Joy

    node = ros_node.node
    every = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE)
    states = {ns: ros_node.collect(JointState, f"/{ns}/joint_states", every)
              for ns in ("exc1", "exc2")}
    to_m1 = {topic: ros_node.collect(JointState, topic, every) for topic in (
        "/exc1/joint_command", "/exc1/track_command", "/exc1/teleop/valve_command")}
    valves_m2 = ros_node.collect(JointState, "/exc2/teleop/valve_command", every)
    sims = {ns: spawn("excavator_sim.sim_node", [
        "--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"), "-r", f"__ns:=/{ns}",
        "-p", f"frame_prefix:={ns}/", *SMALL_SIM_ARGS]) for ns in ("exc1", "exc2")}
    # as a user puts a node on machine 2: its namespace; the joystick stays the operator's.
    # max_command_age_s 1 s: this test's own joystick may be held back by a loaded host
    teleop = spawn("excavator_kinematics.teleop_node", [
        "--ros-args", "--params-file", str(REPO / "config" / "teleop.yaml"),
        "-r", "__ns:=/exc2", "-r", "joy:=/operator/joy", "-p", "max_command_age_s:=1.0"])

    def logs() -> str:
        return "\n".join(p.log()[-3000:] for p in (*sims.values(), teleop))

    wait_for(lambda: all(len(s) > 50 for s in states.values()), LIMIT_S,
             lambda: f"joint_states of both machines\n{logs()}", 0.1)
    # teleop_node's topics where the namespace and the remapping put them
    ros_node.wait_endpoints("subscriptions", "/operator/joy", [("/exc2", "teleop_node")],
                            LIMIT_S)
    for topic in ("joint_command", "track_command", "teleop/valve_command"):
        assert ("/exc2", "teleop_node") in ros_node.wait_endpoints(
            "publishers", f"/exc2/{topic}", [("/exc2", "teleop_node")], LIMIT_S)
    wait_for(lambda: ("/exc2", "teleop_node") in ros_node.endpoints(
        "subscriptions", "/exc2/joint_states"), LIMIT_S, "teleop_node on /exc2/joint_states")
    assert "machine /exc2" in teleop.log(), teleop.log()
    for kind in ("publishers", "subscriptions"):
        for topic in ("/exc1/joint_command", "/exc1/track_command", "/exc1/joint_states",
                      "/joy", "/exc2/joy"):
            assert ("/exc2", "teleop_node") not in ros_node.endpoints(kind, topic), (kind, topic)

    def pos(ns: str, name: str) -> float:
        m = states[ns][-1]
        return float(m.position[list(m.name).index(name)])

    def resting() -> bool:
        m = states["exc1"][-1]
        vel = dict(zip(m.name, m.velocity, strict=False))
        return all(abs(vel.get(n, 0.0)) < 1e-3 for n in ACTIVE)
    wait_for(resting, LIMIT_S, lambda: f"machine 1 at rest ({states['exc1'][-1].velocity})", 0.1)
    start = len(states["exc1"])
    q1 = np.array([pos("exc1", n) for n in (*ACTIVE, *BASE)])

    joy = node.create_publisher(Joy, "/operator/joy", 10)

    def stick(boom: float) -> Joy:
        msg = Joy()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.axes = [0.0] * 6
        msg.axes[BOOM_AXIS] = boom
        msg.buttons = [0] * 8
        return msg
    stop = threading.Event()

    def hold() -> None:    # the joy driver's 20 Hz autorepeat
        while not stop.is_set():
            joy.publish(stick(0.8))
            stop.wait(0.05)
    holder = threading.Thread(target=hold, daemon=True)
    boom0 = pos("exc2", "boom")
    holder.start()
    try:
        wait_for(lambda: abs(pos("exc2", "boom") - boom0) > 0.1, LIMIT_S,
                 lambda: f"machine 2's boom to move under the stick ({pos('exc2', 'boom')} from "
                 f"{boom0}; {len(valves_m2)} valve commands)\n{logs()}", 0.1)
    finally:
        stop.set()
        holder.join(5.0)
    joy.publish(stick(0.0))   # released: teleop holds machine 2
    # machine 1's record after the last joystick message: one more second of it
    last = len(states["exc1"])
    wait_for(lambda: len(states["exc1"]) > last + 50, LIMIT_S, "machine 1's last record", 0.1)
    record = list(states["exc1"])[start:]
    worst = np.max(np.abs(np.array([[m.position[list(m.name).index(n)] for n in (*ACTIVE, *BASE)]
                                    for m in record]) - q1), axis=0)
    limits = np.array([STILL_RAD] * 4 + [STILL_M, STILL_M, STILL_RAD])
    assert np.all(worst < limits), dict(zip((*ACTIVE, *BASE), worst.round(4), strict=True))
    assert all(not msgs for msgs in to_m1.values()), {t: len(m) for t, m in to_m1.items()}
    assert valves_m2


@pytest.mark.parametrize(("command", "message"), [
    ([sys.executable, "-m", "excavator_kinematics.teleop_node", "--ros-args", "-p",
      "machine:=2x"], "machine: machine '2x' is not a ROS namespace"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--machine", "exc-2"],
     "--machine: machine 'exc-2' is not a ROS namespace"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--redis-machine", "a b"],
     "--redis-machine: machine 'a b' is not a ROS namespace"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--machine-redis", "exc1"],
     "--machine-redis 'exc1': give NS=URL"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--machine-redis",
      "exc1=redis://127.0.0.1:1/0", "--machine-redis", "/exc1=redis://127.0.0.1:1/1"],
     "--machine-redis: /exc1 is given twice"),
])
def test_a_bad_machine_name_stops_the_start_with_one_message(command: list[str],
                                                              message: str) -> None:
    proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
