"""The simulated excavator: sim_node, ik_node, soil_node, robot_state_publisher, RViz (optional).

    ros2 launch excavator_hil sim.launch.py [namespace:=exc1] [rviz:=true] [use_sim_time:=true]

use_sim_time goes to every node, sim_node included: sim_node publishes /clock only when it is
true, so with false the whole graph runs on wall time.
"""

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node, PushRosNamespace
from launch_ros.substitutions import FindPackageShare

PACKAGE = "excavator_hil"


def generate_launch_description() -> LaunchDescription:
    share = FindPackageShare(PACKAGE)
    args = [
        DeclareLaunchArgument("namespace", default_value="",
                              description="ROS namespace of this excavator's nodes and topics"),
        DeclareLaunchArgument("use_sim_time", default_value="true", choices=["true", "false"],
                              description="follow the simulator's /clock (sim_node publishes "
                                          "it only when true; false: every node on wall time)"),
        DeclareLaunchArgument("rviz", default_value="false", choices=["true", "false"],
                              description="start RViz with rviz/excavator.rviz"),
        DeclareLaunchArgument("soil", default_value="true", choices=["true", "false"],
                              description="start soil_node (deformable terrain, soil forces)"),
        DeclareLaunchArgument("sim_params", default_value=PathJoinSubstitution(
            [share, "config", "sim.yaml"]), description="sim_node parameter file"),
        DeclareLaunchArgument("soil_params", default_value=PathJoinSubstitution(
            [share, "config", "soil.yaml"]), description="soil_node parameter file"),
        DeclareLaunchArgument("ik_params", default_value=PathJoinSubstitution(
            [share, "config", "ik.yaml"]), description="ik_node parameter file"),
    ]
    return LaunchDescription([*args, OpaqueFunction(function=_nodes)])


def _nodes(context: LaunchContext) -> list[Action]:
    # The URDF is generated from config/excavator.yaml, the same geometry as the IK and MuJoCo.
    from excavator_sim.urdf import generate_urdf

    use_sim_time = LaunchConfiguration("use_sim_time").perform(context) == "true"
    # Also sim_node's: it is the /clock source exactly when use_sim_time is true.
    common = {"use_sim_time": use_sim_time}
    share = FindPackageShare(PACKAGE)
    return [
        PushRosNamespace(LaunchConfiguration("namespace")),
        Node(package=PACKAGE, executable="sim_node", name="sim_node", output="screen",
             parameters=[LaunchConfiguration("sim_params"), {
                 "publish_robot_description": False,
                 # With soil_node the soil model is the ground (forces, failure, load); rigid
                 # height-field contact would hold the bucket on the surface.
                 "terrain.contact": LaunchConfiguration("soil").perform(context) != "true",
             }, common]),
        Node(package=PACKAGE, executable="ik_node", name="ik_node", output="screen",
             parameters=[LaunchConfiguration("ik_params"), common]),
        Node(package=PACKAGE, executable="soil_node", name="soil_node", output="screen",
             parameters=[LaunchConfiguration("soil_params"), common],
             condition=IfCondition(LaunchConfiguration("soil"))),
        Node(package="robot_state_publisher", executable="robot_state_publisher",
             name="robot_state_publisher", output="screen",
             parameters=[{"robot_description": generate_urdf()}, common]),
        Node(package="rviz2", executable="rviz2", name="rviz2", output="screen",
             arguments=["-d", PathJoinSubstitution([share, "rviz", "excavator.rviz"])],
             parameters=[common], condition=IfCondition(LaunchConfiguration("rviz"))),
    ]
