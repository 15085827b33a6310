"""The PLC bridge: plc_bridge (lifecycle node, auto-activated) and optionally the virtual PLC.

    ros2 launch excavator_hil bridge.launch.py plc_host:=192.168.0.10 redis_url:=redis://host:6379/0
    ros2 launch excavator_hil bridge.launch.py virtual_plc:=true     # HIL without hardware
    ros2 launch excavator_hil bridge.launch.py respawn:=true rt_priority:=20
    ros2 launch excavator_hil bridge.launch.py virtual_plc:=true plant:=closed  # + plant link

``plant:=closed`` (default ``standalone``) closes the hardware-in-the-loop loop through a
simulated machine (sim.launch.py ``plant:=closed``): the plant link (``plant_link``, its
parameters from ``plant_link_params``, the PLC connection, model and blocks from
``plc_params``) exchanges the PLC's ``plant_in`` / ``plant_out`` blocks with the simulation's
``plant/sensors``, ``imu`` and ``plant/actuation`` at 100 Hz, and the virtual PLC runs
``plant_mode: external`` (its speed loops on the simulated machine's measured speeds). With a
real PLC (``virtual_plc:=false plc_host:=...``) the plant link talks to that PLC, which must run
the HIL blocks of docs/plc_setup.md; never start it against a machine with its drives
connected (the HIL guard of docs/plc_setup.md). ``standalone``: no plant link, the virtual
PLC's built-in first-order plant.

Both are required: when one ends by itself, the launch says which and why, stops the other and
exits with code 1 (its last line names the node); ``respawn:=true`` starts it again instead. The
bridge's parameters (plc_bridge/parameters.py, docs/configuration.md) come from ``plc_params``
with the four arguments below on top; those marked "run time" there can be changed while it
runs (``ros2 param set /plc_bridge heartbeat_timeout_s 1.0``), the others are read only.
``realtime:=auto`` starts both with the demo's real-time set-up where this host supports it
(a 0.1 ms fair-scheduler slice; SCHED_FIFO with ``rt_priority``), one log line per node.
"""

from typing import Any

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import GroupAction, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import PushRosNamespace

from excavator_hil.launch_support import (
    declare_arguments,
    number_argument,
    plan_from_arguments,
    plant_link_parameters,
    supervised_node,
)
from excavator_hil.machine_match import check_launch_machine

PACKAGE = "excavator_hil"


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        *declare_arguments("bridge.launch.py"),
        # Scoped: the namespace ends with the group (nothing after it, here or in an including
        # file, inherits it).
        GroupAction(scoped=True, actions=[
            PushRosNamespace(LaunchConfiguration("namespace")),
            OpaqueFunction(function=_nodes),
        ]),
    ])


def _nodes(context: LaunchContext) -> list[Action]:
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    plan = plan_from_arguments(context)
    virtual = arg("virtual_plc") == "true"
    closed = arg("plant") == "closed"
    params = arg("plc_params")
    port = int(number_argument("virtual_plc_port", arg("virtual_plc_port"), int, (1, 65535),
                               "the TCP port of the virtual PLC's S7 server"))
    # machine:= a preset: a wheeled one brings its model and vehicle geometry (start-up check)
    machine_overrides = check_launch_machine(arg("machine"), params, arg("model"))
    model = str(machine_overrides.get("model", arg("model")))
    nodes: list[Action] = []
    if virtual:
        nodes += supervised_node(
            context, plan, name="virtual_plc",
            arguments=["--port", str(port), "--model", model,
                       *(f"--vehicle={k.split('.')[-1]}={v}" for k, v in machine_overrides.items()
                         if k.startswith("vehicle.")),
                       "--config", params, "--plant-config", arg("virtual_plc_params"),
                       "--rt-priority", str(plan.plc_rt_priority),
                       # closed: the simulated machine is the plant (plant_in / plant_out)
                       "--plant-mode", "external" if closed else "internal"])
    bridge: dict[str, Any] = {
        # The data-block layouts and vehicle geometry come from the same file.
        "config_file": params,
        # With the virtual PLC the bridge talks to it on loopback, whatever plc_host says.
        "plc_host": "127.0.0.1" if virtual else arg("plc_host"),
        "plc_port": port if virtual else 102,
        "redis_url": arg("redis_url"),
        "autostart": True,
        **machine_overrides,
        "model": model,
        "use_sim_time": arg("use_sim_time") == "true",
    }
    if plan.rt_priority is not None:   # else plc_params' rt_priority stands
        bridge["rt_priority"] = plan.rt_priority
    nodes += supervised_node(context, plan, name="plc_bridge", parameters=[params, bridge])
    if closed:
        nodes += supervised_node(context, plan, name="plant_link", parameters=[
            plant_link_parameters(arg("plant_link_params"), params, bridge["plc_host"],
                                  int(bridge["plc_port"]), model, plan),
            # the bridge's time base: plant/actuation stamped on the clock the simulation runs
            {"use_sim_time": bridge["use_sim_time"]}])
    return nodes
