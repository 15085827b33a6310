"""The browser dashboard (targets, machine, soil, PLC bridge, stop) next to a running stack.

    ros2 launch excavator_hil dashboard.launch.py                       # http://127.0.0.1:8080/
    ros2 launch excavator_hil dashboard.launch.py namespace:=exc1 port:=8081
    ros2 launch excavator_hil dashboard.launch.py host:=0.0.0.0 token:=<16+ characters>

Any interface other than loopback needs a token (the node exits with a message otherwise).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node, PushRosNamespace
from launch_ros.substitutions import FindPackageShare

PACKAGE = "excavator_hil"


def generate_launch_description() -> LaunchDescription:
    share = FindPackageShare(PACKAGE)
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="",
                              description="ROS namespace of the excavator to show and drive"),
        DeclareLaunchArgument("host", default_value="127.0.0.1",
                              description="interface the web page binds (not loopback: needs "
                                          "token)"),
        DeclareLaunchArgument("port", default_value="8080", description="TCP port of the page"),
        DeclareLaunchArgument("token", default_value="",
                              description="access token, >= 16 characters (required when host "
                                          "is not loopback; open /?token=...)"),
        DeclareLaunchArgument("redis_url", default_value="redis://127.0.0.1:6379/0",
                              description="Redis of the PLC bridge"),
        DeclareLaunchArgument("plc_params", default_value=PathJoinSubstitution(
            [share, "config", "plc.yaml"]),
            description="plc_bridge parameter file (model, command envelope, key layout)"),
        DeclareLaunchArgument("refresh_hz", default_value="10",
                              description="machine view refresh per browser tab [Hz], 1..30"),
        GroupAction([
            PushRosNamespace(LaunchConfiguration("namespace")),
            Node(package=PACKAGE, executable="dashboard", name="dashboard", output="screen",
                 arguments=["--host", LaunchConfiguration("host"),
                            "--port", LaunchConfiguration("port"),
                            "--token", LaunchConfiguration("token"),
                            "--redis-url", LaunchConfiguration("redis_url"),
                            "--plc-config", LaunchConfiguration("plc_params"),
                            "--refresh-hz", LaunchConfiguration("refresh_hz")]),
        ]),
    ])
