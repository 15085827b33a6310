"""N excavators on one ROS graph, each a complete machine in its own namespace.

    ros2 launch excavator_hil fleet.launch.py count:=2
    ros2 launch excavator_hil fleet.launch.py namespaces:=exc_a,exc_b redis_url:=redis://h:6379

Machine k (0-based; namespace ``exc<k+1>`` or the k-th of ``namespaces``) gets, inside a scoped
group with its namespace pushed:
- sim_node, ik_node, robot_state_publisher, the virtual PLC, plc_bridge and (``plant:=closed``,
  the default) the plant link: every node and every relative topic under ``/<ns>/``. Closed:
  the machine's simulation is its PLC's plant (sim_node ``drive_mode: plant``, the virtual
  PLC's ``plant_mode: external``, the plant link on that PLC's port); ``plant:=standalone``:
  the virtual PLC's built-in plant, sim_node's ``track_command`` remapped to
  ``plc/wheel_states``;
- TF frame prefix ``<ns>/`` (sim_node, ik_node, plc_bridge, the URDF): ``<ns>/base_link``,
  ``<ns>/odom`` ... (``world`` is shared, so all machines hang in one TF tree);
- its own strip of the world: base at y = k * ``spacing`` [m];
- Redis database ``db_base + k`` on the one shared server ``redis_url`` (key names unchanged);
- its virtual PLC on TCP port ``virtual_plc_port + k``;
- its machine preset: ``machine`` (one for all, or a comma-separated list, one per machine: a
  mixed fleet); a wheeled preset brings its kinematic model and vehicle geometry to the
  machine's bridge and virtual PLC (start-up check, excavator_hil.machine_match) and its
  wheels to its URDF (``plant:=standalone``: its ``wheel_command`` remapped to the bridge's
  ``plc/wheel_states``).

One terrain (``shared_terrain:=true``, the default): one soil_node in the root namespace serves
every machine (``machines`` parameter: ``/<ns>/bucket_pose`` in, ``/<ns>/soil/wrench`` out) from
one grid over all their strips; every sim's height field lies on that grid and follows its
``/soil/terrain_patch``. ``shared_terrain:=false``: a soil_node and a grid per machine, centred
on it (machines do not see each other's trenches).

One clock: machine 0's sim_node owns ``/clock`` (``use_sim_time`` true, which makes it publish);
the other sims run ``follow_clock`` (no second /clock): each steps its own model to the owner's
time, so every machine's stamps are times on /clock; every other node (the bridges included:
the PLC's ``plc/wheel_states`` reach the sims stamped in their time) follows /clock. See
docs/deployment.md.

Operated (each one for the whole fleet, in the root namespace, off unless asked):
- ``teleop:=true``: one teleop_node on ``/joy`` driving ``teleop_machine`` (default the first;
  its ``machine`` parameter: ``/<ns>/joint_command``, ``track_command``, ...);
- ``dashboard:=true``: the browser dashboard; its selector lists the fleet's machines and
  switches between them (target, views, Send, and the PLC panel and Drive on that machine's
  bridge, its Redis database); it starts on ``dashboard_machine`` (default the first);
- ``foxglove:=true``: one Foxglove live view, every machine in one scene (URDF and /tf of each
  under its prefix, ``machines`` parameter), each machine's PLC plots from its database
  (``/<ns>/plc/*``), layout ``layouts/excavator_foxglove_fleet.json``;
- ``rviz:=true``: RViz with a RobotModel per machine (``/<ns>/robot_description``), written for
  the fleet's namespaces and spacing into the launch's log directory as ``fleet.rviz``
  (excavator_hil.rviz_fleet; the shipped ``rviz/fleet.rviz`` is the one for exc1,exc2).

Every node is required (RViz is not): when one ends by itself the launch stops the others and
exits with code 1 naming it; ``respawn:=true`` starts it again instead. ``realtime:=auto``
applies the demo's real-time set-up where the host supports it, one log line per node.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import GroupAction, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import PushRosNamespace

from excavator_hil.fleet import (
    fleet_machines,
    fleet_namespaces,
    shared_soil_grid,
    sim_grid_parameters,
)
from excavator_hil.launch_support import (
    RVIZ_HINT,
    declare_arguments,
    number_argument,
    plan_from_arguments,
    plant_link_parameters,
    rviz_installed,
    supervised_node,
)

PACKAGE = "excavator_hil"


def generate_launch_description() -> LaunchDescription:
    args = declare_arguments("fleet.launch.py")
    return LaunchDescription([*args, OpaqueFunction(function=_machines)])


def _machines(context: LaunchContext) -> list[Action]:
    from excavator_hil.machine_match import check_launch_machine
    from excavator_sim.machines import load_machine
    from excavator_sim.sim_config import load_sim_config
    from excavator_sim.soil.config import load_soil_config
    from excavator_sim.urdf import generate_urdf

    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    names = fleet_namespaces(arg("count"), arg("namespaces"))
    machines = fleet_machines(arg("machine"), len(names))
    try:
        spacing = float(arg("spacing"))
    except ValueError:
        raise ValueError(f"spacing: {arg('spacing')!r} is not a number [m]") from None
    if len(names) > 1 and abs(spacing) < 1.0:
        raise ValueError(f"spacing {spacing:.6g} m: machines would stand in each other; give "
                         "at least the soil grid's size_y_m (16 m by default)")
    soil = arg("soil") == "true"
    shared = soil and arg("shared_terrain") == "true"
    redis_base = arg("redis_url").rstrip("/")
    if re.search(r"/\d+$", redis_base.split("@")[-1].split("//", 1)[-1]):
        raise ValueError(f"redis_url {redis_base!r}: leave the database out (db_base + k is "
                         "appended per machine)")
    db_base, plc_port = int(arg("db_base")), int(arg("virtual_plc_port"))
    sim_terrain = load_sim_config(arg("sim_params")).terrain
    soil_grid = load_soil_config(arg("soil_params")).terrain if soil else None
    soil_centre_y = soil_grid.centre_y_m if soil_grid is not None else 0.0
    plan = plan_from_arguments(context)
    closed = arg("plant") == "closed"

    def node(name: str, ns: str = "", **kwargs: Any) -> list[Action]:
        # ns: only for the log line (the node's namespace is the group's PushRosNamespace)
        return supervised_node(context, plan, name=name, log_namespace=ns, **kwargs)

    actions: list[Action] = []
    grid_params: dict[str, float | int] = {}
    if shared and soil_grid is not None:
        # one soil_node (root namespace) over every machine's strip; every sim's height field
        # on its cells, fed by its one soil/terrain_patch
        grid = shared_soil_grid(soil_grid, len(names), spacing)
        grid_params = sim_grid_parameters(grid)
        actions += node("soil_node", parameters=[arg("soil_params"), {
            "machines": ",".join(names), "terrain.centre_y_m": grid.centre_y_m,
            "terrain.size_y_m": grid.size_y_m, "use_sim_time": True}])
    for k, (ns, machine) in enumerate(zip(names, machines, strict=True)):
        y = k * spacing
        owner = k == 0                       # the one /clock publisher
        prefix = f"{ns}/"
        # a wheeled preset: its model and vehicle geometry for the bridge and the PLC
        overrides = check_launch_machine(machine, arg("plc_params"), arg("model"))
        model = str(overrides.get("model", arg("model")))
        preset = load_machine(machine) if machine else None
        wheels = preset.undercarriage.params if preset and preset.undercarriage else None
        sim_params = {
            "machine": machine,
            "frame_prefix": prefix,
            "publish_robot_description": False,
            "terrain.contact": not soil,
            "initial.base_y_m": y,
            "terrain.y0_m": sim_terrain.y0 + y,
            **grid_params,
            # machine 0 publishes /clock; the others step to it (one time for every stamp)
            "use_sim_time": True,
            "follow_clock": not owner,
            # plant:=closed: the drive train under the PLC's plant/actuation (HIL)
            "drive_mode": "plant" if closed else "kinematic",
        }
        follow = {"use_sim_time": True}
        bridge: dict[str, object] = {
            "config_file": arg("plc_params"), "plc_host": "127.0.0.1",
            "plc_port": plc_port + k, "redis_url": f"{redis_base}/{db_base + k}",
            **overrides, "model": model, "autostart": True, "frame_prefix": prefix,
            # on /clock like every node of the fleet: plc/wheel_states, odom stamped in the
            # simulation's time (on wall time they reached the sims decades ahead of them)
            "use_sim_time": True}
        if plan.rt_priority is not None:   # else plc_params' rt_priority stands
            bridge["rt_priority"] = plan.rt_priority
        nodes: list[Action] = [
            PushRosNamespace(ns),
            *node("sim_node", ns, parameters=[arg("sim_params"), sim_params],
                  # standalone: the tracks (a wheeled machine's wheels: wheel_command) follow
                  # the PLC's measured speeds (and steering angles)
                  remappings=[*([] if closed else [("wheel_command" if overrides
                                                    else "track_command", "plc/wheel_states")]),
                              *([("soil/terrain_patch", "/soil/terrain_patch")] if shared
                                else [])]),
            *node("ik_node", ns, parameters=[arg("ik_params"), {"frame_prefix": prefix}, follow]),
            *node("robot_state_publisher", ns, package="robot_state_publisher",
                  parameters=[{"robot_description": generate_urdf(
                      preset.geometry() if preset else None, frame_prefix=prefix,
                      wheels=wheels)}, follow]),
            *node("virtual_plc", ns, arguments=[
                "--port", str(plc_port + k), "--model", model,
                *(f"--vehicle={key.split('.')[-1]}={v}" for key, v in overrides.items()
                  if key.startswith("vehicle.")),
                "--config", arg("plc_params"), "--plant-config", arg("virtual_plc_params"),
                "--rt-priority", str(plan.plc_rt_priority),
                "--plant-mode", "external" if closed else "internal"]),
            *node("plc_bridge", ns, parameters=[arg("plc_params"), bridge]),
        ]
        if closed:   # this machine's plant link, on its own virtual PLC
            nodes += node("plant_link", ns, parameters=[plant_link_parameters(
                arg("plant_link_params"), arg("plc_params"), "127.0.0.1", plc_port + k,
                model, plan), {"use_sim_time": True}])
        if soil and not shared:
            nodes += node("soil_node", ns, parameters=[arg("soil_params"), {
                "terrain.centre_y_m": soil_centre_y + y}, follow])
        actions.append(GroupAction(nodes, scoped=True))
    return actions + _operated(context, plan, names, redis_base, db_base, shared, spacing)


def _chosen(argument: str, value: str, names: list[str]) -> str:
    """A machine named by a launch argument: one of the fleet's, default the first."""
    name = value.strip().strip("/") or names[0]
    if name not in names:
        raise ValueError(f"{argument}: {value!r} is not one of the fleet's machines "
                         f"({', '.join(names)})")
    return name


def _operated(context: LaunchContext, plan: Any, names: list[str], redis_base: str,
              db_base: int, shared: bool, spacing: float) -> list[Action]:
    """The tools that serve every machine, in the root namespace, on the fleet's /clock."""
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    clock = {"use_sim_time": True}
    out: list[Action] = []
    if arg("teleop") == "true":
        machine = _chosen("teleop_machine", arg("teleop_machine"), names)
        out += supervised_node(context, plan, name="teleop_node", parameters=[
            arg("teleop_params"), {"machine": machine}, clock])
    if arg("dashboard") == "true":
        machine = _chosen("dashboard_machine", arg("dashboard_machine"), names)
        out += supervised_node(context, plan, name="dashboard", arguments=[
            "--host", arg("host"), "--port", arg("port"), "--token", arg("token"),
            "--redis-url", f"{redis_base}/{db_base + names.index(machine)}",
            "--plc-config", arg("plc_params"), "--machine", machine,
            # each machine's bridge: the PLC panel and Drive follow the machine chosen
            *[a for k, ns in enumerate(names)
              for a in ("--machine-redis", f"{ns}={redis_base}/{db_base + k}")],
            "--refresh-hz", arg("refresh_hz"), "--nice", str(plan.background_nice)],
            parameters=[clock])
    if arg("foxglove") == "true":
        port = int(number_argument("foxglove_port", arg("foxglove_port"), int, (0, 65535),
                                   "the TCP port of the Foxglove WebSocket server"))
        out += supervised_node(context, plan, name="foxglove_view", parameters=[{
            "host": arg("foxglove_host"), "port": port, "machines": ",".join(names),
            # each machine's PLC plots from its bridge's database (/<ns>/plc/*)
            "redis_url": redis_base, "redis_db_base": db_base,
            "soil_params": arg("soil_params"), **clock}])
    if arg("rviz") == "true":
        if not rviz_installed():
            raise RuntimeError(f"rviz:=true, but {RVIZ_HINT}")
        from launch.logging import launch_config

        from excavator_hil.rviz_fleet import fleet_rviz

        # with this launch's logs (~/.ros/log/<launch>/fleet.rviz): found there, not left in /tmp
        path = Path(launch_config.log_dir) / "fleet.rviz"
        path.write_text(fleet_rviz(names, shared_terrain=shared, spacing_m=spacing))
        out += supervised_node(context, plan, name="rviz2", package="rviz2", required=False,
                               arguments=["-d", str(path)], parameters=[clock])
    return out

