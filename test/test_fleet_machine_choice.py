"""The choice of a fleet's machine in the shells, over real DDS and real processes, without a
fleet (test_fleet_operated.py runs the fleet itself):

- the dashboard's ROS link (``RosLink``, in-process, its own DDS participant) lists a machine
  that a probe publishes ``joint_states`` for, serves it only when chosen, refuses a machine
  not on the graph, refuses a Send named for another machine than the one served (another tab
  chose), waits for the machine's ``robot_description`` before sending, then sends the target
  in the frame that description's base link names;
- bad machine names stop teleop_node and the dashboard at start-up with one message naming the
  value and the fix (exit 2).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO, RosTestNode, wait_for

from excavator_hil.dashboard.core import TargetChecker
from excavator_kinematics.geometry import CYLINDER_NAMES, default_geometry
from excavator_sim.urdf import generate_urdf

TARGET = (6.0, 0.0, 0.5, 0.5)   # x, y, z [m], pitch [rad]: reachable


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
