"""What the launch files in launch/ share: required nodes, the RViz default, and one table of
launch arguments (:data:`ARGUMENTS`, :data:`LAUNCH_FILES`): every launch file declares its
arguments from it (:func:`declare_arguments`), so an argument two files share is written once
and the checks (test/test_launch_files.py, test/test_docs_config.py) read the same table.

Imported by the launch files under ``ros2 launch`` (``launch`` is imported inside the functions,
so this module imports without ROS launch installed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

RVIZ_HINT = ("rviz2 is not installed here (on a ROS 2 install: sudo apt install "
             "ros-kilted-rviz2); start with rviz:=false, or open RViz elsewhere with "
             "rviz/excavator.rviz")


def rviz_installed() -> bool:
    """Whether ``ros2 run rviz2 rviz2`` would find an executable (ament index on
    ``AMENT_PREFIX_PATH``)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError:
        return False
    try:
        prefix = get_package_prefix("rviz2")
    except (PackageNotFoundError, ValueError, OSError):  # OSError: no AMENT_PREFIX_PATH
        return False
    return os.access(Path(prefix) / "lib" / "rviz2" / "rviz2", os.X_OK)


def rviz_default() -> str:
    """``rviz``'s default: "true" where rviz2 is installed, else "false"."""
    return "true" if rviz_installed() else "false"


def exit_reason(name: str, returncode: int | None) -> str:
    """Why a node's exit ends the launch, in one line."""
    if returncode == 0:
        why = "exited (code 0) although nothing asked it to"
    elif returncode == 2:
        why = "refused its configuration (code 2; its [FATAL] message above names the value)"
    elif returncode is not None and returncode < 0:
        why = f"was killed by signal {-returncode}"
    else:
        why = f"failed with exit code {returncode} (its messages above say why)"
    return f"required node {name} {why}"


def required(name: str) -> Callable[[Any, Any], list[Any] | None]:
    """``on_exit`` for a node the system cannot run without: when it ends while the launch is
    not shutting down, log why (as an error) and shut the whole launch down, so no node is left
    running without it."""

    def on_exit(event: Any, context: Any) -> list[Any] | None:
        from launch.actions import Shutdown
        from launch.logging import get_logger

        if context.is_shutdown:
            return None
        reason = exit_reason(name, event.returncode)
        get_logger("excavator_hil").error(f"{reason}: stopping the other nodes of this launch")
        return [Shutdown(reason=reason)]

    return on_exit


# --- the launch arguments: one table for every launch file -----------------------------------
BOOL = ("true", "false")
MODELS = ("skid_steer", "ackermann", "4wd4ws")
RVIZ_AUTO = "<rviz2 installed>"  # default: rviz_default() when the launch file runs


@dataclass(frozen=True)
class LaunchArgument:
    """One launch argument: a literal ``default``, or a file under the package's share
    directory (``share_path``, e.g. ``("config", "sim.yaml")``), or :data:`RVIZ_AUTO`."""

    name: str
    description: str
    default: str = ""
    choices: tuple[str, ...] = ()
    share_path: tuple[str, ...] = ()

    def but(self, **changes: Any) -> LaunchArgument:
        """This argument with another default or description (one launch file's variant)."""
        return replace(self, **changes)


def _param_file(name: str, node: str, what: str = "") -> LaunchArgument:
    return LaunchArgument(f"{name}_params", f"{node} parameter file{what}",
                          share_path=("config", f"{name}.yaml"))


ARGUMENTS: dict[str, LaunchArgument] = {a.name: a for a in (
    LaunchArgument("namespace", "ROS namespace of this excavator's nodes and topics"),
    LaunchArgument("use_sim_time", "follow the simulator's /clock (sim_node publishes it only "
                   "when true; false: every node on wall time)", "true", BOOL),
    LaunchArgument("rviz", "start RViz with rviz/excavator.rviz (default: true where rviz2 is "
                   "installed, else false)", RVIZ_AUTO, BOOL),
    LaunchArgument("soil", "start soil_node (deformable terrain, soil forces)", "true", BOOL),
    LaunchArgument("track_command", "topic whose track_left/track_right velocities [m/s] drive "
                   "sim_node's tracks (excavator.launch.py: the PLC's plc/wheel_states)",
                   "track_command"),
    _param_file("sim", "sim_node"),
    _param_file("soil", "soil_node"),
    _param_file("ik", "ik_node"),
    LaunchArgument("teleop", "start teleop_node (joystick / coordinated / impedance control "
                   "from joy and hand_pose)", "false", BOOL),
    _param_file("teleop", "teleop_node"),
    _param_file("plc", "plc_bridge", " (data blocks, model, timeouts; a key left "
                "out takes the default of docs/configuration.md, an unknown key stops the "
                "bridge)"),
    LaunchArgument("plc_host", "IP address of the S7-1200/1500 (PUT/GET enabled)",
                   "192.168.0.1"),
    LaunchArgument("redis_url", "Redis URL (redis:// or rediss://, user:pass@ for AUTH)",
                   "redis://127.0.0.1:6379/0"),
    LaunchArgument("model", "vehicle kinematic model between Redis and the PLC", "skid_steer",
                   MODELS),
    LaunchArgument("virtual_plc", "start the virtual PLC and connect the bridge to it",
                   "false", BOOL),
    LaunchArgument("virtual_plc_port", "TCP port of the virtual PLC's S7 server", "1102"),
    LaunchArgument("dashboard", "browser dashboard on http://127.0.0.1:8080/ "
                   "(dashboard.launch.py for its own arguments)", "false", BOOL),
    LaunchArgument("host", "interface the web page binds (not loopback: needs token)",
                   "127.0.0.1"),
    LaunchArgument("port", "TCP port of the page", "8080"),
    LaunchArgument("token", "access token, >= 16 characters (required when host is not "
                   "loopback; open /?token=...)"),
    LaunchArgument("refresh_hz", "machine view refresh per browser tab [Hz], 1..30", "10"),
    LaunchArgument("count", "number of machines, 1..16 (namespaces exc1, exc2, ...); ignored "
                   "when namespaces is set", "2"),
    LaunchArgument("namespaces", "comma-separated namespaces, one machine each (e.g. "
                   "exc_a,exc_b); empty: from count"),
    LaunchArgument("spacing", "distance between machines along world y [m]", "20.0"),
    LaunchArgument("shared_terrain", "one soil_node and one terrain for every machine (true), "
                   "or a soil_node and terrain per machine", "true", BOOL),
    LaunchArgument("db_base", "Redis database of the first machine", "0"),
)}

_A = ARGUMENTS
_SIM = ("namespace", "use_sim_time", "rviz", "soil", "track_command", "sim_params",
        "soil_params", "ik_params", "teleop", "teleop_params")
_BRIDGE = ("namespace", "use_sim_time", "plc_params", "plc_host", "redis_url", "model",
           "virtual_plc", "virtual_plc_port")

# Per launch file, in order: the arguments it declares (a name: the table's entry as it is).
LAUNCH_FILES: dict[str, tuple[str | LaunchArgument, ...]] = {
    "sim.launch.py": _SIM,
    "bridge.launch.py": (
        _A["namespace"].but(description="ROS namespace of the bridge's node and topics"),
        _A["use_sim_time"].but(default="false", description="use /clock (true needs sim_node "
                               "with use_sim_time true, or bag play --clock)"),
        *_BRIDGE[2:]),
    # everything of sim.launch.py and bridge.launch.py (forwarded to both), and the dashboard
    "excavator.launch.py": (
        *_SIM[:4],
        _A["track_command"].but(default="plc/wheel_states", description="topic whose "
                                "track_left/track_right velocities [m/s] drive sim_node's "
                                "tracks: the PLC's measured track speeds (track_command: drive "
                                "them directly)"),
        *_SIM[5:], "plc_params",
        _A["plc_host"].but(description="IP address of the S7-1200/1500 (ignored with "
                           "virtual_plc:=true)"),
        "redis_url", "model",
        _A["virtual_plc"].but(default="true", description="use the virtual PLC instead of real "
                              "hardware"),
        "virtual_plc_port", "dashboard"),
    "dashboard.launch.py": (
        _A["namespace"].but(description="ROS namespace of the excavator to show and drive"),
        "host", "port", "token",
        _A["redis_url"].but(description="Redis of the PLC bridge"),
        _A["plc_params"].but(description="plc_bridge parameter file (model, command envelope, "
                             "key layout)"),
        "refresh_hz"),
    "fleet.launch.py": (
        "count", "namespaces", "spacing", "soil", "shared_terrain",
        _A["redis_url"].but(default="redis://127.0.0.1:6379", description="the shared Redis "
                            "server, without a database: machine k uses database db_base + k"),
        "db_base",
        _A["virtual_plc_port"].but(description="S7 port of the first machine's virtual PLC; "
                                   "machine k uses this + k"),
        "model", "sim_params", "soil_params", "ik_params",
        _A["plc_params"].but(description="plc_bridge parameter file")),
}


def arguments_of(launch_file: str) -> list[LaunchArgument]:
    """The arguments ``launch_file`` (e.g. ``"sim.launch.py"``) declares, in order."""
    return [ARGUMENTS[a] if isinstance(a, str) else a for a in LAUNCH_FILES[launch_file]]


def declare_arguments(launch_file: str, package: str = "excavator_hil") -> list[Any]:
    """``DeclareLaunchArgument`` actions for every argument of ``launch_file``."""
    from launch.actions import DeclareLaunchArgument
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.substitutions import FindPackageShare

    out = []
    for a in arguments_of(launch_file):
        default: Any = a.default
        if a.share_path:
            default = PathJoinSubstitution([FindPackageShare(package), *a.share_path])
        elif a.default == RVIZ_AUTO:
            default = rviz_default()
        out.append(DeclareLaunchArgument(a.name, default_value=default,
                                         description=a.description,
                                         **({"choices": list(a.choices)} if a.choices else {})))
    return out
