"""The simulated excavator: sim_node (the soil model inside), ik_node, robot_state_publisher, RViz.

    ros2 launch excavator_hil sim.launch.py [namespace:=exc1] [rviz:=true] [use_sim_time:=true]
    ros2 launch excavator_hil sim.launch.py plant:=closed   # the PLC's plant (bridge.launch.py
                                                            # plant:=closed beside it)

use_sim_time goes to every node, sim_node included: sim_node publishes /clock only when it is
true, so with false the whole graph runs on wall time. rviz defaults to true where rviz2 is
installed, else to false.

The soil: with ``soil:=true`` (default) the soil model runs inside sim_node
(``soil_in_process:=true``, default: every bucket pose answered within its period, issue 32);
``soil_in_process:=false`` runs soil_node in its own process over DDS instead.

``plant`` (default ``standalone``): ``closed`` runs sim_node with ``drive_mode: plant``, the
tracks driven by the PLC's actuation (``plant/actuation`` from the plant link, which
bridge.launch.py ``plant:=closed`` starts) through the drive train, ``plant/sensors`` and ``imu``
answering; ``standalone`` runs it with ``drive_mode: kinematic``, the tracks following
``track_command`` (docs/simulation.md, "Drive train and traction").

Every node but RViz is required: when one ends by itself, the launch says which and why, stops
the others and exits with code 1 (its last line names the node); ``respawn:=true`` starts it
again instead (``respawn_delay_s``, ``respawn_limit``, ``respawn_window_s``). ``realtime:=auto``
applies the real-time set-up this host supports (one log line per node), ``off`` none
(excavator_hil.launch_support, docs/plc_bridge.md "HIL host set-up").
"""

from typing import Any

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import GroupAction, LogInfo, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import PushRosNamespace
from launch_ros.substitutions import FindPackageShare

from excavator_hil.launch_support import (
    RVIZ_HINT,
    declare_arguments,
    plan_from_arguments,
    rviz_installed,
    supervised_node,
)

PACKAGE = "excavator_hil"


def generate_launch_description() -> LaunchDescription:
    args = declare_arguments("sim.launch.py")
    # The namespace is pushed inside a scoped group: it ends with the group, so a file that
    # includes this one (excavator.launch.py) does not inherit it.
    return LaunchDescription([*args, GroupAction([
        PushRosNamespace(LaunchConfiguration("namespace")),
        OpaqueFunction(function=_nodes),
    ], scoped=True)])


def _nodes(context: LaunchContext) -> list[Action]:
    # The URDF is generated from config/excavator.yaml (and the machine preset), the same
    # geometry as the IK and MuJoCo.
    from excavator_sim.machines import load_machine
    from excavator_sim.urdf import generate_urdf

    rviz = LaunchConfiguration("rviz").perform(context) == "true"
    if rviz and not rviz_installed():
        raise RuntimeError(f"rviz:=true, but {RVIZ_HINT}")
    use_sim_time = LaunchConfiguration("use_sim_time").perform(context) == "true"
    plan = plan_from_arguments(context)

    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    def node(name: str, **kwargs: Any) -> list[Action]:
        return supervised_node(context, plan, name=name, **kwargs)

    # Also sim_node's: it is the /clock source exactly when use_sim_time is true.
    common = {"use_sim_time": use_sim_time}
    share = FindPackageShare(PACKAGE)
    soil = arg("soil") == "true"
    # exact coupling by default (issue 32): the soil core inside sim_node answers every bucket
    # pose within its period; soil_in_process:=false runs soil_node over DDS instead
    soil_in_process = soil and arg("soil_in_process") == "true"
    closed = arg("plant") == "closed"
    # machine:= a preset; a wheeled one: its URDF has its wheels; standalone, its wheels follow
    # wheel_command (plc/wheel_states)
    machine = arg("machine")
    preset = load_machine(machine) if machine else None
    wheels = preset.undercarriage.params if preset and preset.undercarriage else None
    nodes = [
        *node("sim_node", parameters=[arg("sim_params"), {
            "machine": machine,
            "publish_robot_description": False,
            # With soil_node the soil model is the ground (forces, failure, load); rigid
            # height-field contact would hold the bucket on the surface.
            "terrain.contact": not soil,
            "soil_in_process": soil_in_process,
            "soil_params_file": arg("soil_params") if soil_in_process else "",
            # plant:=closed: the drive train under the PLC's plant/actuation (HIL)
            "drive_mode": "plant" if closed else "kinematic",
        }, common],
              # closed: not remapped (sim_node refuses track_command in drive_mode plant, and
              # would count every plc/wheel_states as a rejection)
              # standalone: a wheeled machine's wheel_command takes the same topic (the
              # bridge's plc/wheel_states carries wheel_<w> speeds and steer_<w> angles)
              remappings=[] if closed else [("wheel_command" if wheels is not None
                                             else "track_command", arg("track_command"))]),
        *node("ik_node", parameters=[arg("ik_params"), common]),
        *(node("soil_node", parameters=[arg("soil_params"), common])
          if soil and not soil_in_process else []),
        *(node("teleop_node", parameters=[arg("teleop_params"), common])
          if arg("teleop") == "true" else []),
        *node("robot_state_publisher", package="robot_state_publisher",
              parameters=[{"robot_description": generate_urdf(
                  preset.geometry() if preset else None, wheels=wheels)}, common]),
    ]
    if not rviz and not rviz_installed():
        nodes.append(LogInfo(msg="RViz not started: rviz2 is not installed here (on a ROS 2 "
                                 "install: sudo apt install ros-kilted-rviz2; or open "
                                 "rviz/excavator.rviz on another machine of the DDS graph)"))
    if rviz:  # not required: closing the RViz window leaves the simulation running
        # nice 10 (realtime:=auto): RViz is only watched; on a small HIL host the simulation,
        # soil and bridge processes get the CPU first (docs/plc_bridge.md, "HIL host set-up")
        nodes += supervised_node(context, plan, name="rviz2", package="rviz2", required=False,
                                 arguments=["-d", PathJoinSubstitution([share, "rviz",
                                                                        "excavator.rviz"])],
                                 parameters=[common])
    return nodes
