"""The Foxglove live view (foxglove_view) next to a running stack: ws://127.0.0.1:8765.

    ros2 launch excavator_hil foxglove.launch.py                  # then, in the Foxglove app:
    ros2 launch excavator_hil foxglove.launch.py namespace:=exc1  # Open connection -> Foxglove
    ros2 launch excavator_hil foxglove.launch.py redis_url:=redis://127.0.0.1:6379/0  # /plc/*

Off the control path: its own process, at nice 10 with ``realtime:=auto``; it only subscribes
and reads Redis. The view is required (when it ends by itself the launch exits with code 1 naming
it; ``respawn:=true`` starts it again). Layout: layouts/excavator_foxglove.json (docs/foxglove.md).
"""

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import GroupAction, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import PushRosNamespace

from excavator_hil.launch_support import (
    declare_arguments,
    number_argument,
    plan_from_arguments,
    supervised_node,
)


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        *declare_arguments("foxglove.launch.py"),
        GroupAction(scoped=True, actions=[
            PushRosNamespace(LaunchConfiguration("namespace")),
            OpaqueFunction(function=_nodes),
        ]),
    ])


def _nodes(context: LaunchContext) -> list[Action]:
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    plan = plan_from_arguments(context)
    port = int(number_argument("foxglove_port", arg("foxglove_port"), int, (0, 65535),
                               "the TCP port of the Foxglove WebSocket server"))
    return supervised_node(context, plan, name="foxglove_view", parameters=[{
        "host": arg("foxglove_host"), "port": port, "redis_url": arg("redis_url"),
        "soil_params": arg("soil_params"),
        # the launch's one time base (excavator.launch.py forwards its use_sim_time)
        "use_sim_time": arg("use_sim_time") == "true"}])
