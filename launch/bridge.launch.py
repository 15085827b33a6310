"""The PLC bridge: plc_bridge (lifecycle node, auto-activated) and optionally the virtual PLC.

    ros2 launch excavator_hil bridge.launch.py plc_host:=192.168.0.10 redis_url:=redis://host:6379/0
    ros2 launch excavator_hil bridge.launch.py virtual_plc:=true     # HIL without hardware

Both are required: when one ends, the launch says which and why and stops the other. The
bridge's parameters (plc_bridge/parameters.py, docs/configuration.md) come from ``plc_params``
with the four arguments below on top; those marked "run time" there can be changed while it
runs (``ros2 param set /plc_bridge heartbeat_timeout_s 1.0``), the others are read only.
"""

from launch import LaunchDescription
from launch.actions import GroupAction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import Node, PushRosNamespace

from excavator_hil.launch_support import declare_arguments, required

PACKAGE = "excavator_hil"


def generate_launch_description() -> LaunchDescription:
    virtual = LaunchConfiguration("virtual_plc")
    # With the virtual PLC the bridge talks to it on loopback, whatever plc_host says.
    plc_host = PythonExpression(["'127.0.0.1' if '", virtual, "' == 'true' else '",
                                 LaunchConfiguration("plc_host"), "'"])
    plc_port = PythonExpression(["", LaunchConfiguration("virtual_plc_port"), " if '", virtual,
                                 "' == 'true' else 102"])
    return LaunchDescription([
        *declare_arguments("bridge.launch.py"),
        # Scoped: the namespace ends with the group (nothing after it, here or in an including
        # file, inherits it).
        GroupAction(scoped=True, actions=[
            PushRosNamespace(LaunchConfiguration("namespace")),
            Node(package=PACKAGE, executable="virtual_plc", name="virtual_plc", output="screen",
                 arguments=["--port", LaunchConfiguration("virtual_plc_port"),
                            "--model", LaunchConfiguration("model"),
                            "--config", LaunchConfiguration("plc_params")],
                 condition=IfCondition(virtual), on_exit=required("virtual_plc")),
            Node(package=PACKAGE, executable="plc_bridge", name="plc_bridge", output="screen",
                 parameters=[LaunchConfiguration("plc_params"), {
                     # The data-block layouts and vehicle geometry come from the same file.
                     "config_file": LaunchConfiguration("plc_params"),
                     "plc_host": plc_host,
                     "plc_port": plc_port,
                     "redis_url": LaunchConfiguration("redis_url"),
                     "model": LaunchConfiguration("model"),
                     "autostart": True,
                     "use_sim_time": PythonExpression(["'", LaunchConfiguration("use_sim_time"),
                                                       "' == 'true'"]),
                 }], on_exit=required("plc_bridge")),
        ]),
    ])
