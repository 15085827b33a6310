"""Entry points of the node executables (``ros2 run excavator_hil <node>``, launch files).

A node's module imports numpy, MuJoCo, numba and rclpy first: seconds on a loaded machine.
``ros2 launch`` sends SIGINT twice on Ctrl-C (the terminal's and its own); arriving during those
imports, the first raised KeyboardInterrupt in the middle of an import (a traceback in the launch
output) and the second could hold the interpreter's exit for seconds (8.5 s measured) until
launch escalated to SIGTERM. Nothing has started yet that needs cleaning up, so until the
node's ``main()`` installs its own handling (``excavator_common.ros_runtime.run_node``, the
virtual PLC's stop handler, the dashboard's server) a SIGINT ends the process at once, quietly,
with code 0 (as an interrupted node does). After ``main()`` returns, the process ends without
the interpreter's teardown.

Only the standard library (and ``excavator_common.process_exit``, which imports nothing else) is
imported here, so the handler is in place before anything slow.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import NoReturn

from excavator_common.process_exit import exit_without_teardown


def _interrupted_while_starting(signum: int, frame: object) -> None:
    sys.stdout.flush()
    os._exit(0)


def _run(module: str) -> NoReturn:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    # the real-time prefix (excavator_common.realtime) execs the node with SIGINT blocked so a
    # Ctrl-C in between is kept pending, not fatal: it is taken here, by the handler above
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # Left in place until main() installs its own (run_node, the virtual PLC's stop handler).
    code = int(importlib.import_module(module).main() or 0)
    # main() has stopped the node and cleaned up: no interpreter teardown (slow, and it can
    # crash after a clean stop; excavator_common.process_exit)
    exit_without_teardown(code)


def ik_node() -> NoReturn:
    _run("excavator_kinematics.ik_node")


def teleop_node() -> NoReturn:
    _run("excavator_kinematics.teleop_node")


def sim_node() -> NoReturn:
    _run("excavator_sim.sim_node")


def soil_node() -> NoReturn:
    _run("excavator_sim.soil.soil_node")


def plc_bridge() -> NoReturn:
    _run("plc_bridge.bridge.node")


def virtual_plc() -> NoReturn:
    _run("plc_bridge.virtual_plc.cli")


def plant_link() -> NoReturn:
    _run("plc_bridge.plant_link.node")


def dashboard() -> NoReturn:
    _run("excavator_hil.dashboard.app")


def foxglove_view() -> NoReturn:
    _run("excavator_hil.foxglove_view.node")
