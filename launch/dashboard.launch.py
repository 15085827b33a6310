"""The browser dashboard (targets, machine, soil, PLC bridge, stop) next to a running stack.

    ros2 launch excavator_hil dashboard.launch.py                       # http://127.0.0.1:8080/
    ros2 launch excavator_hil dashboard.launch.py namespace:=exc1 port:=8081
    ros2 launch excavator_hil dashboard.launch.py host:=0.0.0.0 token:=<16+ characters>

Any interface other than loopback needs a token (the node exits with a message otherwise).
The dashboard is required: when it ends by itself the launch exits with code 1 naming it
(``respawn:=true`` starts it again). ``realtime:=auto`` runs it at nice 10 (it is only watched).
"""

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import GroupAction, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import PushRosNamespace

from excavator_hil.launch_support import declare_arguments, plan_from_arguments, supervised_node


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        *declare_arguments("dashboard.launch.py"),
        GroupAction(scoped=True, actions=[
            PushRosNamespace(LaunchConfiguration("namespace")),
            OpaqueFunction(function=_nodes),
        ]),
    ])


def _nodes(context: LaunchContext) -> list[Action]:
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    plan = plan_from_arguments(context)
    return supervised_node(context, plan, name="dashboard", arguments=[
        "--host", arg("host"), "--port", arg("port"), "--token", arg("token"),
        "--redis-url", arg("redis_url"), "--plc-config", arg("plc_params"),
        "--refresh-hz", arg("refresh_hz"), "--nice", str(plan.background_nice)],
        # the launch's one time base (excavator.launch.py forwards its use_sim_time)
        parameters=[{"use_sim_time": arg("use_sim_time") == "true"}])
