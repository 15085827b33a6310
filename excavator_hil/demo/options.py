"""What a demo run is asked to do: output folder, quick mode, leg timing, drive distance."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class DemoOptions:
    output_dir: Path = Path("output")
    quick: bool = False  # CI: a shorter drive and faster legs, same stack
    time_scale: float = 1.0  # stretches every leg of the dig cycle
    drive_distance_m: float = 1.0  # tracks: drive forward this far before digging
    drive_speed_m_s: float = 0.5
    startup_timeout_s: float = 90.0
    joystick: bool = False  # dig with a scripted joystick session (teleop_node), not IK targets
    rt_priority: int = 0  # SCHED_FIFO for the bridge loop, the virtual PLC, redis (0 = normal)
    # nice value for the processes off the real-time paths: the bag recorder and this process
    # (the operator); 0 = the same priority as the rest (issue 12; docs/plc_bridge.md)
    background_nice: int = 10
    # the fair scheduler's time slice for the bridge, the virtual PLC and redis-server [ms]
    # (Linux >= 6.12, normal scheduling, no privilege; 0 = the kernel's default slice)
    bridge_slice_ms: float = 0.1
    # pin the bridge, the virtual PLC and redis-server to the last CPU, sim/soil/ik to the rest
    pin_cpus: bool = False
    # the soil model inside sim_node (exact coupling: every bucket pose answered within its
    # period, the default since issue 32) instead of soil_node over DDS (issue 12 item 3)
    soil_in_process: bool = True
    # ik_node in sim_node's process (excavator_hil.node_container: a Python process with rclpy
    # fewer, issue 32) instead of a process of its own
    ik_in_sim_process: bool = True
    # the bag's recorder as a thread of the demo's process (excavator_hil.bags.recorder.
    # RecorderThread: a Python process with rclpy fewer, issue 32) instead of `bag record`
    recorder_in_process: bool = True
    machines: int = 1  # machines digging side by side (namespaces exc1.. when more than one)
    # closed: hardware in the loop, the simulated machine is the virtual PLC's plant (plant
    # link, sim_node drive_mode plant); standalone: the virtual PLC's built-in plant, sim_node's
    # tracks following plc/wheel_states (the arrangement before issue 27)
    plant: str = "closed"
    spacing_m: float = 10.0  # between the machines along world y [m]
    # the machine preset (config/machines/, a name or a file; "" = the default tracked
    # machine): a wheeled one drives its own path through the bridge's ackermann / 4wd4ws model
    # (excavator_hil.demo.wheeled_path), checked by excavator_hil.demo.run.demo_machine
    machine: str = ""
