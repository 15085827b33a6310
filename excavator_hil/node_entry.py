"""Entry points of the node executables (``ros2 run excavator_hil <node>``, launch files).

A node's module imports numpy, MuJoCo, numba and rclpy first: seconds on a loaded machine.
``ros2 launch`` sends SIGINT twice on Ctrl-C (the terminal's and its own); arriving during those
imports, the first raised KeyboardInterrupt in the middle of an import (a traceback in the launch
output) and the second could hold the interpreter's exit for seconds (8.5 s measured) until
launch escalated to SIGTERM. Nothing has started yet that needs cleaning up, so until the node's
the node's ``main()`` installs its own handling (``excavator_kinematics.ros_runtime.run_node``,
the virtual PLC's stop handler) a SIGINT ends the process at once, quietly, with code 0 (as an
interrupted node does).

Only the standard library is imported here, so the handler is in place before anything slow.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    sys.stdout.flush()
    os._exit(0)


def _run(module: str) -> int:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    # Left in place until main() installs its own (run_node, the virtual PLC's stop handler).
    return int(importlib.import_module(module).main() or 0)


def ik_node() -> int:
    return _run("excavator_kinematics.ik_node")


def sim_node() -> int:
    return _run("excavator_sim.sim_node")


def soil_node() -> int:
    return _run("excavator_sim.soil.soil_node")


def plc_bridge() -> int:
    return _run("plc_bridge.bridge_node")


def virtual_plc() -> int:
    return _run("plc_bridge.virtual_plc_cli")
