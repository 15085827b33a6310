"""The simulated excavator: sim_node, ik_node, soil_node, robot_state_publisher, RViz (optional).

    ros2 launch excavator_hil sim.launch.py [namespace:=exc1] [rviz:=true] [use_sim_time:=true]

use_sim_time goes to every node, sim_node included: sim_node publishes /clock only when it is
true, so with false the whole graph runs on wall time. Every node but RViz is required: when one
ends, the launch says which and why and stops the others. rviz defaults to true where rviz2 is
installed, else to false.
"""

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import GroupAction, LogInfo, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node, PushRosNamespace
from launch_ros.substitutions import FindPackageShare

from excavator_hil.launch_support import (
    RVIZ_HINT,
    declare_arguments,
    required,
    rviz_installed,
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
    # The URDF is generated from config/excavator.yaml, the same geometry as the IK and MuJoCo.
    from excavator_sim.urdf import generate_urdf

    rviz = LaunchConfiguration("rviz").perform(context) == "true"
    if rviz and not rviz_installed():
        raise RuntimeError(f"rviz:=true, but {RVIZ_HINT}")
    use_sim_time = LaunchConfiguration("use_sim_time").perform(context) == "true"
    # Also sim_node's: it is the /clock source exactly when use_sim_time is true.
    common = {"use_sim_time": use_sim_time}
    share = FindPackageShare(PACKAGE)
    nodes = [
        Node(package=PACKAGE, executable="sim_node", name="sim_node", output="screen",
             parameters=[LaunchConfiguration("sim_params"), {
                 "publish_robot_description": False,
                 # With soil_node the soil model is the ground (forces, failure, load); rigid
                 # height-field contact would hold the bucket on the surface.
                 "terrain.contact": LaunchConfiguration("soil").perform(context) != "true",
             }, common],
             remappings=[("track_command", LaunchConfiguration("track_command"))],
             on_exit=required("sim_node")),
        Node(package=PACKAGE, executable="ik_node", name="ik_node", output="screen",
             parameters=[LaunchConfiguration("ik_params"), common], on_exit=required("ik_node")),
        Node(package=PACKAGE, executable="soil_node", name="soil_node", output="screen",
             parameters=[LaunchConfiguration("soil_params"), common],
             condition=IfCondition(LaunchConfiguration("soil")), on_exit=required("soil_node")),
        Node(package=PACKAGE, executable="teleop_node", name="teleop_node", output="screen",
             parameters=[LaunchConfiguration("teleop_params"), common],
             condition=IfCondition(LaunchConfiguration("teleop")),
             on_exit=required("teleop_node")),
        Node(package="robot_state_publisher", executable="robot_state_publisher",
             name="robot_state_publisher", output="screen",
             parameters=[{"robot_description": generate_urdf()}, common],
             on_exit=required("robot_state_publisher")),
    ]
    if not rviz and not rviz_installed():
        nodes.append(LogInfo(msg="RViz not started: rviz2 is not installed here (on a ROS 2 "
                                 "install: sudo apt install ros-kilted-rviz2; or open "
                                 "rviz/excavator.rviz on another machine of the DDS graph)"))
    if rviz:  # not required: closing the RViz window leaves the simulation running
        # nice 10: RViz is only watched; on a small HIL host the simulation, soil and bridge
        # processes get the CPU first (docs/plc_bridge.md, "HIL host set-up")
        nodes.append(Node(package="rviz2", executable="rviz2", name="rviz2", output="screen",
                          prefix="nice -n 10",
                          arguments=["-d", PathJoinSubstitution([share, "rviz",
                                                                 "excavator.rviz"])],
                          parameters=[common]))
    return nodes
