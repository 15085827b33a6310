"""Everything: the simulated excavator (sim.launch.py) and the PLC bridge (bridge.launch.py).

    ros2 launch excavator_hil excavator.launch.py [namespace:=exc1]
    ros2 launch excavator_hil excavator.launch.py virtual_plc:=false plc_host:=192.168.0.10
    ros2 launch excavator_hil excavator.launch.py plant:=standalone

Hardware in the loop (``plant:=closed``, the default): the simulated machine is the PLC's
plant. Redis velocity command -> plc_bridge -> control DB -> PLC (its speed loops) ->
``plant_out`` -> plant link -> ``plant/actuation`` -> sim_node (``drive_mode: plant``: drive
train, terramechanics) -> ``plant/sensors`` + ``imu`` -> plant link -> ``plant_in`` -> PLC ->
monitor DB -> plc_bridge -> Redis monitor keys. With ``virtual_plc:=true`` (the default) the
virtual PLC runs ``plant_mode: external``; a real PLC is selected by its address alone
(``virtual_plc:=false plc_host:=...``: the bridge and the plant link talk to it, nothing else
changes; it must run the HIL blocks of docs/plc_setup.md).

``plant:=standalone``: the former arrangement, no plant link: the virtual PLC's built-in
first-order plant, and sim_node's tracks follow the PLC's reported track speeds
(``track_command`` remapped to the bridge's ``plc/wheel_states``, argument ``track_command``).

``dashboard:=true`` adds the browser dashboard (dashboard.launch.py) for this namespace, Redis
and PLC parameter file; ``foxglove:=true`` the Foxglove live view (foxglove.launch.py) on
ws://127.0.0.1:8765 for this namespace, Redis and soil parameter file.

Every node but RViz is required: when one ends by itself, the launch stops the others and exits
with code 1, its last line naming the node and how it ended; ``respawn:=true`` starts it again
instead (docs/configuration.md, "Launch files"). ``realtime:=auto`` (the default) applies the
demo's real-time set-up where the host supports it, one log line per node.

Every argument of the two included files is declared here too and forwarded (each file uses the
ones it declares): the arguments come from one table (excavator_hil.launch_support), and
test/test_launch_files.py checks that none is left out.
"""

from launch import LaunchDescription
from launch.actions import GroupAction, IncludeLaunchDescription
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare

from excavator_hil.launch_support import arguments_of, declare_arguments

PACKAGE = "excavator_hil"

# every argument of the included files (excavator_hil.launch_support's table)
FORWARDED = tuple(dict.fromkeys(a.name for f in ("sim.launch.py", "bridge.launch.py")
                                for a in arguments_of(f)))


# what the dashboard takes from this file (its other arguments keep their defaults)
DASHBOARD_FORWARDED = ("namespace", "use_sim_time", "redis_url", "plc_params", "respawn",
                       "respawn_delay_s", "respawn_limit", "respawn_window_s", "realtime")


# what the Foxglove live view takes from this file (its other arguments keep their defaults)
FOXGLOVE_FORWARDED = ("namespace", "use_sim_time", "foxglove_host", "foxglove_port",
                      "redis_url", "soil_params", "respawn", "respawn_delay_s", "respawn_limit",
                      "respawn_window_s", "realtime")


def generate_launch_description() -> LaunchDescription:
    share = FindPackageShare(PACKAGE)
    args = declare_arguments("excavator.launch.py")

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
                          for k in DASHBOARD_FORWARDED}.items(),
    )])
    foxglove = GroupAction(scoped=True, condition=IfCondition(LaunchConfiguration("foxglove")),
                           actions=[IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution([share, "launch",
                                                            "foxglove.launch.py"])),
        launch_arguments={k: LaunchConfiguration(k) for k in FOXGLOVE_FORWARDED}.items(),
    )])
    return LaunchDescription([*args, include("sim.launch.py"), include("bridge.launch.py"),
                              dashboard, foxglove])
