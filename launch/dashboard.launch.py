"""The browser dashboard (targets, machine, soil, PLC bridge, stop) next to a running stack.

    ros2 launch excavator_hil dashboard.launch.py                       # http://127.0.0.1:8080/
    ros2 launch excavator_hil dashboard.launch.py namespace:=exc1 port:=8081
    ros2 launch excavator_hil dashboard.launch.py host:=0.0.0.0 token:=<16+ characters>

Any interface other than loopback needs a token (the node exits with a message otherwise).
"""

from launch import LaunchDescription
from launch.actions import GroupAction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node, PushRosNamespace

from excavator_hil.launch_support import declare_arguments

PACKAGE = "excavator_hil"


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        *declare_arguments("dashboard.launch.py"),
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
