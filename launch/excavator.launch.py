"""Everything: the simulated excavator (sim.launch.py) and the PLC bridge (bridge.launch.py).

    ros2 launch excavator_hil excavator.launch.py [namespace:=exc1] [virtual_plc:=false ...]

The simulated tracks follow the PLC: sim_node's ``track_command`` is remapped to the bridge's
``plc/wheel_states`` (measured track speeds), so driving through Redis -> plc_bridge -> PLC
moves the simulated machine (argument ``track_command``).

``dashboard:=true`` adds the browser dashboard (dashboard.launch.py) for this namespace, Redis
and PLC parameter file.

Every argument of the two included files is declared here too and forwarded (each file uses the
ones it declares); test/test_launch_files.py checks that none is left out.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction, IncludeLaunchDescription
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare

from excavator_hil.launch_support import rviz_default

PACKAGE = "excavator_hil"

FORWARDED = ("namespace", "use_sim_time", "rviz", "soil", "track_command", "sim_params",
             "soil_params", "ik_params", "teleop", "teleop_params", "plc_params", "plc_host",
             "redis_url", "model", "virtual_plc", "virtual_plc_port")


def generate_launch_description() -> LaunchDescription:
    share = FindPackageShare(PACKAGE)
    args = [
        DeclareLaunchArgument("namespace", default_value="",
                              description="ROS namespace of this excavator's nodes and topics"),
        DeclareLaunchArgument("use_sim_time", default_value="true", choices=["true", "false"],
                              description="follow the simulator's /clock (sim_node publishes "
                                          "it only when true; false: every node on wall time)"),
        DeclareLaunchArgument("rviz", default_value=rviz_default(), choices=["true", "false"],
                              description="start RViz with rviz/excavator.rviz (default: true "
                                          "where rviz2 is installed, else false)"),
        DeclareLaunchArgument("soil", default_value="true", choices=["true", "false"],
                              description="start soil_node (deformable terrain, soil forces)"),
        DeclareLaunchArgument("track_command", default_value="plc/wheel_states",
                              description="topic whose track_left/track_right velocities [m/s] "
                                          "drive sim_node's tracks: the PLC's measured track "
                                          "speeds (track_command: drive them directly)"),
        DeclareLaunchArgument("sim_params", default_value=PathJoinSubstitution(
            [share, "config", "sim.yaml"]), description="sim_node parameter file"),
        DeclareLaunchArgument("soil_params", default_value=PathJoinSubstitution(
            [share, "config", "soil.yaml"]), description="soil_node parameter file"),
        DeclareLaunchArgument("ik_params", default_value=PathJoinSubstitution(
            [share, "config", "ik.yaml"]), description="ik_node parameter file"),
        DeclareLaunchArgument("teleop", default_value="false", choices=["true", "false"],
                              description="start teleop_node (joystick / coordinated / "
                                          "impedance control from joy and hand_pose)"),
        DeclareLaunchArgument("teleop_params", default_value=PathJoinSubstitution(
            [share, "config", "teleop.yaml"]), description="teleop_node parameter file"),
        DeclareLaunchArgument("plc_params", default_value=PathJoinSubstitution(
            [share, "config", "plc.yaml"]),
            description="plc_bridge parameter file (data blocks, model, timeouts)"),
        DeclareLaunchArgument("plc_host", default_value="192.168.0.1",
                              description="IP address of the S7-1200/1500 (ignored with "
                                          "virtual_plc:=true)"),
        DeclareLaunchArgument("redis_url", default_value="redis://127.0.0.1:6379/0",
                              description="Redis URL (redis:// or rediss://, user:pass@ for AUTH)"),
        DeclareLaunchArgument("model", default_value="skid_steer",
                              choices=["skid_steer", "ackermann", "4wd4ws"],
                              description="vehicle kinematic model between Redis and the PLC"),
        DeclareLaunchArgument("virtual_plc", default_value="true", choices=["true", "false"],
                              description="use the virtual PLC instead of real hardware"),
        DeclareLaunchArgument("virtual_plc_port", default_value="1102",
                              description="TCP port of the virtual PLC's S7 server"),
        DeclareLaunchArgument("dashboard", default_value="false", choices=["true", "false"],
                              description="browser dashboard on http://127.0.0.1:8080/ "
                                          "(dashboard.launch.py for its own arguments)"),
    ]

    def include(name: str) -> GroupAction:
        # Each file in its own scope: nothing one sets (namespace, configurations) reaches the
        # other.
        return GroupAction(scoped=True, actions=[IncludeLaunchDescription(
            PythonLaunchDescriptionSource(PathJoinSubstitution([share, "launch", name])),
            launch_arguments={k: LaunchConfiguration(k) for k in FORWARDED}.items(),
        )])

    dashboard = GroupAction(scoped=True, condition=IfCondition(LaunchConfiguration("dashboard")),
                            actions=[IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution([share, "launch",
                                                            "dashboard.launch.py"])),
        launch_arguments={k: LaunchConfiguration(k)
                          for k in ("namespace", "redis_url", "plc_params")}.items(),
    )])
    return LaunchDescription([*args, include("sim.launch.py"), include("bridge.launch.py"),
                              dashboard])
