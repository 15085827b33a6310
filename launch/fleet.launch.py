"""N excavators on one ROS graph, each a complete machine in its own namespace.

    ros2 launch excavator_hil fleet.launch.py count:=2
    ros2 launch excavator_hil fleet.launch.py namespaces:=exc_a,exc_b redis_url:=redis://h:6379

Machine k (0-based; namespace ``exc<k+1>`` or the k-th of ``namespaces``) gets, inside a scoped
group with its namespace pushed:
- sim_node (``track_command`` remapped to ``plc/wheel_states``: the PLC drives its tracks),
  ik_node, soil_node, robot_state_publisher, the virtual PLC and plc_bridge: every node and every
  relative topic under ``/<ns>/``;
- TF frame prefix ``<ns>/``: its URDF links are ``<ns>/base_link`` ... (``world`` is shared, so
  all machines hang in one TF tree);
- its own strip of the world: base at y = k * ``spacing`` [m], its terrain grid (sim and soil)
  centred there;
- Redis database ``db_base + k`` on the one shared server ``redis_url`` (key names unchanged);
- its virtual PLC on TCP port ``virtual_plc_port + k``.

One clock: machine 0's sim_node owns ``/clock`` (``use_sim_time`` true, which makes it publish);
the other sims run ``follow_clock`` (no second /clock): each steps its own model to the owner's
time, so every machine's stamps are times on /clock; every other node follows /clock. Each
machine's soil_node keeps its own terrain: machines do not see
each other's trenches (each digs in its own strip). See docs/deployment.md.
"""

from __future__ import annotations

import re

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node, PushRosNamespace
from launch_ros.substitutions import FindPackageShare

PACKAGE = "excavator_hil"
MAX_MACHINES = 16          # Redis has 16 databases by default (databases in redis.conf)


def generate_launch_description() -> LaunchDescription:
    share = FindPackageShare(PACKAGE)
    args = [
        DeclareLaunchArgument("count", default_value="2",
                              description="number of machines, 1..16 (namespaces exc1, exc2, "
                                          "...); ignored when namespaces is set"),
        DeclareLaunchArgument("namespaces", default_value="",
                              description="comma-separated namespaces, one machine each "
                                          "(e.g. exc_a,exc_b); empty: from count"),
        DeclareLaunchArgument("spacing", default_value="20.0",
                              description="distance between machines along world y [m]"),
        DeclareLaunchArgument("soil", default_value="true", choices=["true", "false"],
                              description="one soil_node per machine (its own terrain)"),
        DeclareLaunchArgument("redis_url", default_value="redis://127.0.0.1:6379",
                              description="the shared Redis server, without a database: "
                                          "machine k uses database db_base + k"),
        DeclareLaunchArgument("db_base", default_value="0",
                              description="Redis database of the first machine"),
        DeclareLaunchArgument("virtual_plc_port", default_value="1102",
                              description="S7 port of the first machine's virtual PLC; "
                                          "machine k uses this + k"),
        DeclareLaunchArgument("model", default_value="skid_steer",
                              choices=["skid_steer", "ackermann", "4wd4ws"],
                              description="vehicle kinematic model between Redis and the PLC"),
        DeclareLaunchArgument("sim_params", default_value=PathJoinSubstitution(
            [share, "config", "sim.yaml"]), description="sim_node parameter file"),
        DeclareLaunchArgument("soil_params", default_value=PathJoinSubstitution(
            [share, "config", "soil.yaml"]), description="soil_node parameter file"),
        DeclareLaunchArgument("ik_params", default_value=PathJoinSubstitution(
            [share, "config", "ik.yaml"]), description="ik_node parameter file"),
        DeclareLaunchArgument("plc_params", default_value=PathJoinSubstitution(
            [share, "config", "plc.yaml"]), description="plc_bridge parameter file"),
    ]
    return LaunchDescription([*args, OpaqueFunction(function=_machines)])


def fleet_namespaces(count: str, namespaces: str) -> list[str]:
    """The machines' namespaces from the ``count`` / ``namespaces`` arguments; ValueError naming
    the bad value and the fix."""
    if namespaces.strip():
        names = [n.strip().strip("/") for n in namespaces.split(",")]
        for n in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
                raise ValueError(f"namespaces: {n!r} is not a ROS name (letters, digits, '_', "
                                 "not starting with a digit)")
        if len(set(names)) != len(names):
            raise ValueError(f"namespaces: {names} has duplicates; give each machine its own")
    else:
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"count: {count!r} is not an integer (1..{MAX_MACHINES})") from None
        names = [f"exc{k + 1}" for k in range(n)]
    if not 1 <= len(names) <= MAX_MACHINES:
        raise ValueError(f"{len(names)} machines: give 1..{MAX_MACHINES} (one Redis database "
                         "each)")
    return names


def _machines(context: LaunchContext) -> list[Action]:
    from excavator_sim.sim_config import load_sim_config
    from excavator_sim.soil.config import load_soil_config
    from excavator_sim.urdf import generate_urdf

    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    names = fleet_namespaces(arg("count"), arg("namespaces"))
    try:
        spacing = float(arg("spacing"))
    except ValueError:
        raise ValueError(f"spacing: {arg('spacing')!r} is not a number [m]") from None
    if len(names) > 1 and abs(spacing) < 1.0:
        raise ValueError(f"spacing {spacing:.6g} m: machines would stand in each other; give "
                         "at least the soil grid's size_y_m (16 m by default)")
    soil = arg("soil") == "true"
    redis_base = arg("redis_url").rstrip("/")
    if re.search(r"/\d+$", redis_base.split("@")[-1].split("//", 1)[-1]):
        raise ValueError(f"redis_url {redis_base!r}: leave the database out (db_base + k is "
                         "appended per machine)")
    db_base, plc_port = int(arg("db_base")), int(arg("virtual_plc_port"))
    sim_terrain = load_sim_config(arg("sim_params")).terrain
    soil_centre_y = load_soil_config(arg("soil_params")).terrain.centre_y_m if soil else 0.0
    actions: list[Action] = []
    for k, ns in enumerate(names):
        y = k * spacing
        owner = k == 0                       # the one /clock publisher
        prefix = f"{ns}/"
        sim_params = {
            "frame_prefix": prefix,
            "publish_robot_description": False,
            "terrain.contact": not soil,
            "initial.base_y_m": y,
            "terrain.y0_m": sim_terrain.y0 + y,
            # machine 0 publishes /clock; the others step to it (one time for every stamp)
            "use_sim_time": True,
            "follow_clock": not owner,
        }
        follow = {"use_sim_time": True}
        nodes: list[Action] = [
            PushRosNamespace(ns),
            Node(package=PACKAGE, executable="sim_node", name="sim_node", output="screen",
                 parameters=[arg("sim_params"), sim_params],
                 remappings=[("track_command", "plc/wheel_states")]),
            Node(package=PACKAGE, executable="ik_node", name="ik_node", output="screen",
                 parameters=[arg("ik_params"), {"frame_prefix": prefix}, follow]),
            Node(package="robot_state_publisher", executable="robot_state_publisher",
                 name="robot_state_publisher", output="screen",
                 parameters=[{"robot_description": generate_urdf(frame_prefix=prefix)}, follow]),
            Node(package=PACKAGE, executable="virtual_plc", name="virtual_plc", output="screen",
                 arguments=["--port", str(plc_port + k), "--model", arg("model"),
                            "--config", arg("plc_params")]),
            Node(package=PACKAGE, executable="plc_bridge", name="plc_bridge", output="screen",
                 parameters=[arg("plc_params"), {
                     "config_file": arg("plc_params"), "plc_host": "127.0.0.1",
                     "plc_port": plc_port + k, "redis_url": f"{redis_base}/{db_base + k}",
                     "model": arg("model"), "autostart": True, "frame_prefix": prefix}]),
        ]
        if soil:
            nodes.append(Node(package=PACKAGE, executable="soil_node", name="soil_node",
                              output="screen", parameters=[arg("soil_params"), {
                                  "terrain.centre_y_m": soil_centre_y + y}, follow]))
        actions.append(GroupAction(nodes, scoped=True))
    return actions

